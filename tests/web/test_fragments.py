"""Pages served from cached fragments (governance/web/fragments.py): a write shows on the
next read, each viewer gets the content of their own rights, a served form's CSRF token
is the requesting session's, and without the cache the pages still render.

The shared cache is the real Redis here (the other web tests use a memory cache), under
a key prefix of this test's own, whose keys are deleted after it."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone

from governance import settings as project_settings
from governance.models import Certification, ExceptionState, PriorityException
from governance.selectors import state_cache
from governance.services import certifications as certification_services
from governance.services import exceptions as exception_services
from governance.services import jobs as job_services
from governance.services import workloads as workload_services
from governance.web import fragments
from tests.factories import make_job, make_world
from tests.web.test_redis_down import redis_away  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def redis_prefix(settings: Any) -> Iterator[str]:
    prefix = f"test-fragments-{uuid.uuid4().hex}"
    shared = {**project_settings.CACHES["shared"], "LOCATION": settings.REDIS_URL}
    settings.CACHES = {**settings.CACHES, "shared": {**shared, "KEY_PREFIX": prefix}}
    yield prefix
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)


@pytest.fixture
def world() -> Any:
    return make_world()


def client_for(user: Any, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def fragment_keys() -> list[str]:
    """The keys of this test's fragments now in the shared cache (Redis, read directly)."""
    prefix = django_settings.CACHES["shared"]["KEY_PREFIX"]
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    keys = (key.decode() for key in client.scan_iter(f"{prefix}:*fragment:*"))
    return sorted(key for key in keys if not key.endswith(":lock"))


def file_exception(world: Any, justification: str) -> PriorityException:
    job = make_job(world.red_share, world.red_member, name=f"job-{justification}")
    return exception_services.exception_file(
        actor=world.red_lead,
        team=world.red,
        job=job,
        priority=700,
        justification=justification,
        expires_at=timezone.now() + timedelta(days=3),
    )


def test_a_write_shows_on_the_next_read_of_a_cached_page(world: Any) -> None:
    client = client_for(world.reviewer)
    page(client, "/exceptions/")
    kept = fragment_keys()
    assert any(":exceptions:" in key for key in kept)
    page(client, "/exceptions/")
    assert fragment_keys() == kept  # the second read was served from the first's
    file_exception(world, "first-release-blocked")
    assert "first-release-blocked" in page(client, "/exceptions/")
    # The jobs list: a submission (through its service) writes a job event.
    listing = page(client, "/jobs/")
    job_services.job_submit(
        actor=world.blue_lead,
        share=world.blue_share,
        name="fresh-submission",
        priority=1,
        preferences=[{"instance_type": "ml.g5.xlarge", "count": 1}],
    )
    assert "fresh-submission" not in listing
    assert "fresh-submission" in page(client, "/jobs/")


def test_a_workload_page_follows_audited_and_unaudited_writes(world: Any) -> None:
    workload = workload_services.workload_create(
        actor=world.red_lead, team=world.red, name="vision/finetune"
    )
    benchmark = {"count": 1, "runtime": 600, "utilization": 90, "failure_rate": 1}
    cert = certification_services.certification_propose(
        actor=world.red_lead,
        workload=workload,
        instance_type="ml.g5.xlarge",
        converged=True,
        output_valid=True,
        **benchmark,
    )
    client = client_for(world.red_member)
    url = f"/workloads/{workload.pk}/"
    assert "checkpoint in s3" not in page(client, url)
    workload_services.workload_update(
        actor=world.red_lead,
        workload=workload,
        changes={"recovery_assumptions": "checkpoint in s3"},
    )
    assert "checkpoint in s3" in page(client, url)
    # A certification's row written without an audit entry (as its drift and reminder
    # marks are): its expiry, which the page shows.
    expiry = timezone.now() + timedelta(days=7)
    assert expiry.strftime("%Y-%m-%d") not in page(client, url)
    Certification.objects.filter(pk=cert.pk).update(state="certified", expires_at=expiry)
    assert expiry.strftime("%Y-%m-%d") in page(client, url)


def test_viewers_with_other_rights_get_their_own_content(world: Any) -> None:
    file_exception(world, "needs-review")
    # The reviewer reads first: the page with the review queue is cached for reviewers.
    assert "Review queue" in page(client_for(world.reviewer), "/exceptions/")
    member = page(client_for(world.red_member), "/exceptions/")
    assert "Review queue" not in member and "needs-review" in member
    # The requester (a lead) may withdraw their own; another lead of no team of it may not.
    withdraw = ">Withdraw</button>"
    assert withdraw in page(client_for(world.red_lead), "/exceptions/")
    assert withdraw not in page(client_for(world.blue_lead), "/exceptions/")
    # The team page: a lead may add a workload, a member of the same team may not.
    assert "Add a workload" in page(client_for(world.red_lead), f"/teams/{world.red.pk}/")
    assert "Add a workload" not in page(client_for(world.red_member), f"/teams/{world.red.pk}/")


def test_two_users_of_the_same_rights_share_a_fragment_but_not_its_user_parts(
    world: Any,
) -> None:
    other_reviewer = type(world.reviewer).objects.create(username="second-reviewer")
    other_reviewer.groups.set(world.reviewer.groups.all())
    page(client_for(world.reviewer), "/jobs/")
    keys = fragment_keys()
    second = page(client_for(other_reviewer), "/jobs/")
    assert fragment_keys() == keys  # served from the first one's fragment
    assert "second-reviewer" in second and ">reviewer<" not in second


def test_a_served_cached_form_carries_the_sessions_own_csrf_token(world: Any) -> None:
    exc = file_exception(world, "approve-me")
    page(client_for(world.reviewer), "/exceptions/")  # another session fills the cache
    kept = fragment_keys()
    reviewer = client_for(world.reviewer, csrf=True)
    body = page(reviewer, "/exceptions/")
    assert fragment_keys() == kept  # served from the cache
    assert fragments.csrf_slot() not in body
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', body)
    assert token is not None
    approve = f"/exceptions/{exc.pk}/approve/"
    form = {"csrfmiddlewaretoken": token.group(1), "note": "ok", "next": "list"}
    third = client_for(world.reviewer, csrf=True)
    page(third, "/exceptions/")  # a session with a CSRF cookie of its own
    assert third.post(approve, form).status_code == 403  # the token is not its
    assert reviewer.post(approve, form).status_code == 302
    exc.refresh_from_db()
    assert exc.state == ExceptionState.APPROVED


@pytest.mark.usefixtures("redis_away")
def test_pages_render_without_the_cache(world: Any) -> None:
    file_exception(world, "still-shown")
    workload = workload_services.workload_create(
        actor=world.red_lead, team=world.red, name="vision/eval"
    )
    client = client_for(world.reviewer)
    assert "still-shown" in page(client, "/exceptions/")
    for url in (
        "/",
        "/jobs/",
        f"/teams/{world.red.pk}/",
        f"/shares/{world.red_share.pk}/",
        f"/workloads/{workload.pk}/",
        "/audit/",
        "/agreements/",
    ):
        body = page(client, url)
        assert "<!--when" not in body and fragments.csrf_slot() not in body, url


def test_only_the_previous_bucket_is_served_while_another_request_renders(
    monkeypatch: Any,
) -> None:
    """A fragment whose time bucket just ended is served while one request renders the
    new bucket's; one older than that is never served: the request waits, then renders."""
    key, lock = "fragment:test:buckets", "fragment:test:buckets:lock"
    old: Any = ("old", [])
    state_cache.cache_set_many({key: (9, old)}, 60)
    token = state_cache.take_lock(lock)  # another request renders bucket 10
    assert token is not None
    assert fragments._rendered(key, 10, lambda: ("new", []), 60) == old
    state_cache.release_lock(lock, token)
    assert fragments._rendered(key, 10, lambda: ("new", []), 60) == ("new", [])
    state_cache.cache_set_many({key: (7, old)}, 60)
    token = state_cache.take_lock(lock)
    monkeypatch.setattr(state_cache, "WAIT_SECONDS", 0.2)
    assert fragments._rendered(key, 10, lambda: ("newer", []), 60) == ("newer", [])
