"""The overview page: usage bars per queue, type and share, and the live decision feed."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any
from unittest.mock import patch

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent, JobQueue
from governance.services import jobs as job_services
from governance.templatetags.web_time import relative_time
from governance.web.presenters import overview as web_overview
from governance.web.presenters.overview import describe
from scheduler.cycle.run import run_cycle
from tests.factories import (
    TeamFactory,
    make_admin,
    make_bands,
    make_lead,
    make_member,
    make_queue,
    make_reviewer,
    make_share,
)

pytestmark = pytest.mark.django_db

ONE_G5 = [{"instance_type": "ml.g5.xlarge", "count": 1}]


def client_for(user: Any) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def count_queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    return len(ctx.captured_queries)


def aws_world(name: str = "aws", *, bands: bool = True) -> SimpleNamespace:
    """The AWS worked example: three shares of one ml.g5.xlarge each, capacity 3."""
    queue = make_queue(name, {"ml.g5.xlarge": 3})
    vision = TeamFactory(name="vision")
    language = TeamFactory(name="language")
    speech = TeamFactory(name="speech")
    background = make_share(
        queue,
        vision,
        f"{name}-background",
        policy="LEND_AND_BORROW",
        borrow_limit=200,
        in_share_preemption=True,
    )
    medium = make_share(queue, language, f"{name}-medium", policy="LEND")
    protected = make_share(queue, speech, f"{name}-protected", policy="RESERVE")
    if bands:
        make_bands()
    return SimpleNamespace(
        queue=queue,
        vision=vision,
        language=language,
        speech=speech,
        background=background,
        medium=medium,
        protected=protected,
        lead_vision=make_lead(vision, "lead-vision"),
        member_vision=make_member(vision, "member-vision"),
        lead_language=make_lead(language, "lead-language"),
        reviewer=make_reviewer("reviewer"),
        admin=make_admin("admin"),
    )


def submit(user: Any, share: Any, name: str, priority: int = 1, **kw: Any) -> Any:
    kw.setdefault("preferences", ONE_G5)
    return job_services.job_submit(actor=user, share=share, name=name, priority=priority, **kw)


def borrowing_then_reclaim(w: SimpleNamespace) -> None:
    """bg-high runs on its own limit, bg-med borrows medium's idle g5, then medium's own
    job takes it back (reclaim)."""
    submit(w.lead_vision, w.background, "bg-high", 3, duration=3600)
    submit(w.lead_vision, w.background, "bg-med", 2, duration=3600)
    run_cycle(w.queue.pk)
    submit(w.lead_language, w.medium, "llm-pretrain", 5, duration=3600)
    run_cycle(w.queue.pk)


@pytest.fixture
def world() -> SimpleNamespace:
    return aws_world()


def test_anonymous_is_sent_to_sign_in(world):
    for url in ("/", "/partials/usage/", "/partials/feed/"):
        response = Client().get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")


@pytest.mark.parametrize("role", ["admin", "reviewer", "lead_vision", "member_vision"])
def test_every_signed_in_role_sees_the_overview(world, role):
    response = client_for(getattr(world, role)).get("/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "aws-background" in body and "aws-protected" in body
    assert 'hx-get="/partials/usage/"' in body and 'hx-trigger="every 2s"' in body
    assert 'hx-get="/partials/feed/"' in body


def test_usage_splits_own_borrowed_lent_and_idle(world):
    submit(world.lead_vision, world.background, "bg-high", 3)
    submit(world.lead_vision, world.background, "bg-med", 2)
    run_cycle(world.queue.pk)
    response = client_for(world.reviewer).get("/")
    # The page embeds the cached rendering of the usage region: read the figures it shows.
    (queue,) = web_overview.usage_blocks(web_overview.overview_queues())
    (g5,) = queue.types
    bars = {bar.name: bar for bar in g5.shares}
    assert (bars["aws-background"].own, bars["aws-background"].borrowed) == (1, 1)
    assert (bars["aws-medium"].lent, bars["aws-medium"].idle_lend) == (1, 0)
    assert (bars["aws-protected"].idle_reserved, bars["aws-protected"].lent) == (1, 0)
    assert g5.capacity == 3 and g5.usage == 2 and not g5.oversubscribed
    # Drawn as segments scaled to capacity 3: own 1/3, borrowed 1/3.
    kinds = [(s.kind, round(s.width)) for s in bars["aws-background"].segments]
    assert kinds == [("own", 33), ("borrowed", 33)]
    body = response.content.decode()
    assert 'class="borrowed"' in body and 'class="lent"' in body and 'class="idle-reserved"' in body


def test_oversubscription_is_shown(world):
    make_share(world.queue, TeamFactory(name="extra"), "aws-extra", {"ml.g5.xlarge": 2})
    response = client_for(world.admin).get("/partials/usage/")
    body = response.content.decode()
    assert "oversubscribed by 2" in body
    assert "<html" not in body  # the partial alone


def test_feed_tells_reclaim_in_plain_words(world):
    borrowing_then_reclaim(world)
    response = client_for(world.member_vision).get("/partials/feed/")
    body = response.content.decode()
    assert (
        "language&#x27;s job llm-pretrain took back its ml.g5.xlarge "
        "from vision&#x27;s borrowed run bg-med" in body
    )
    assert "(reclaim)" in body
    assert "vision&#x27;s bg-med started on ml.g5.xlarge borrowing 1 beyond its limit" in body
    assert 'id="feed"' in body and "<html" not in body


def _entry(event: AuditEvent, after: dict[str, Any]) -> AuditEntry:
    return AuditEntry(
        event_type=event,
        subject_type="job",
        subject_id="1",
        subject_repr="x (1)",
        after=after,
        created_at=timezone.now(),
    )


def test_feed_sentences_for_every_rule():
    priority = describe(
        _entry(
            AuditEvent.JOB_PREEMPTED,
            {
                "job": "bg-high",
                "team": "vision",
                "share": "background",
                "rule": "priority",
                "by": "bg-low",
                "by_team": "vision",
                "instance_type": "ml.g5.xlarge",
                "lost_work": 0,
            },
        )
    )
    assert priority.text.startswith("vision's bg-low preempted bg-high in the same share")
    assert priority.rule_words == "higher priority"
    lost = describe(
        _entry(
            AuditEvent.JOB_PREEMPTED,
            {
                "job": "a",
                "team": "t",
                "rule": "capacity_lost",
                "instance_type": "ml.p5.48xlarge",
                "lost_work": 600,
            },
        )
    )
    assert "lost ml.p5.48xlarge capacity" in lost.text and "10 min of work lost" in lost.text
    failed = describe(
        _entry(
            AuditEvent.JOB_FAILED,
            {
                "rule": "preemption_retries_exhausted",
                "preemptions": 2,
            },
        )
    )
    assert "failed: preempted 2 times" in failed.text
    assert failed.rule_words == "preemption retries exhausted"
    timed_out = describe(
        _entry(
            AuditEvent.JOB_TIMED_OUT,
            {
                "job": "j",
                "team": "t",
                "rule": "timeout",
                "max_pending": 3600,
            },
        )
    )
    assert "gave up waiting after its max pending time of 60 min" in timed_out.text
    own = describe(
        _entry(
            AuditEvent.JOB_ADMITTED,
            {
                "job": "j",
                "team": "t",
                "rule": "own",
                "instance_type": "ml.g5.xlarge",
                "count": 2,
            },
        )
    )
    assert own.text == "t's j started on 2 x ml.g5.xlarge"
    assert own.rule_words == "within its own limit"


def _grow(w: SimpleNamespace, tag: str, jobs: int) -> None:
    """More queues, shares, jobs and decisions: the page must not run more queries."""
    other = aws_world(tag, bands=False)
    for i in range(jobs):
        submit(w.lead_vision, w.background, f"bulk-{tag}-{i}", 1)
        submit(other.lead_vision, other.background, f"bulk-other-{tag}-{i}", 1)
    run_cycle(w.queue.pk)
    run_cycle(other.queue.pk)


def test_query_count_does_not_grow_with_data(world):
    client = client_for(world.lead_vision)
    borrowing_then_reclaim(world)
    small = [count_queries(client, url) for url in ("/", "/partials/usage/", "/partials/feed/")]
    _grow(world, "big", 12)
    world.lead_vision.refresh_from_db()  # the builders reset passwords: sign in again
    client.force_login(world.lead_vision)
    big = [count_queries(client, url) for url in ("/", "/partials/usage/", "/partials/feed/")]
    assert small == big
    # 12, the unread notifications of the top bar, the capacity plans beside the bars and
    # the usage history, the broken promises, the agreements overdue for review and the
    # open decisions (one query each), and the versions its cached parts are kept under
    # (web/fragments.py: the page's, its open decisions', the usage history's).
    assert max(big) <= 20
    # Read again with nothing changed, the page is served from those parts: the session's
    # user and roles, the versions, the live regions' states.
    assert count_queries(client, "/") <= 8


def test_cached_feed_shows_a_new_decision_on_the_next_poll(world):
    """The feed's HTML is cached under the entries it lists (web_overview.feed_state):
    a poll with nothing new reuses it, a new decision shows on the very next poll, and
    the full page embeds the same rendering."""
    client = client_for(world.reviewer)
    submit(world.lead_vision, world.background, "bg-high", 3)
    run_cycle(world.queue.pk)
    first = count_queries(client, "/partials/feed/")
    assert count_queries(client, "/partials/feed/") < first  # cached: nothing new
    assert "bg-high started" in client.get("/partials/feed/").content.decode()
    assert "bg-med" not in client.get("/").content.decode()
    submit(world.lead_vision, world.background, "bg-med", 2)
    run_cycle(world.queue.pk)
    assert "vision&#x27;s bg-med started" in client.get("/partials/feed/").content.decode()
    assert "vision&#x27;s bg-med started" in client.get("/").content.decode()
    # A renamed queue shows in the feed's sentences at once (its name is in the key).
    JobQueue.objects.filter(pk=world.queue.pk).update(name="aws-renamed")
    assert "aws-renamed" in client.get("/partials/feed/").content.decode()


def test_cached_feed_keeps_relative_times_true(world):
    """A cached feed is re-rendered when any of its relative times would read differently."""
    client = client_for(world.reviewer)
    submit(world.lead_vision, world.background, "bg-high", 3)
    run_cycle(world.queue.pk)
    assert ">just now</time>" in client.get("/partials/feed/").content.decode()

    def later(d: Any, now: Any = None) -> str:  # the clock five minutes on
        return relative_time(d, timezone.now() + timedelta(minutes=5))

    with patch("governance.templatetags.web_time.relative_time", later):
        body = client.get("/partials/feed/").content.decode()
    assert ">just now</time>" not in body and "5\xa0minutes ago</time>" in body


def test_partials_do_not_read_the_navigation_roles(world):
    """Live partials never show the nav: its role queries (groups, led teams) are lazy."""
    client = client_for(world.lead_vision)
    client.get("/partials/usage/")
    with CaptureQueriesContext(connection) as ctx:
        client.get("/partials/usage/")
    sql = " ".join(q["sql"] for q in ctx.captured_queries)
    assert "auth_group" not in sql and "governance_membership" not in sql
    body = client.get("/").content.decode()
    assert "team lead" in body and 'href="/audit/"' not in body


def test_the_navigation_reads_roles_and_unread_count_in_one_query(world):
    """A page's navigation (site roles, led teams, unread notifications) is one query
    per request, however many of them the page and its view ask about."""
    client = client_for(world.lead_vision)
    client.get("/teams/")
    with CaptureQueriesContext(connection) as ctx:
        body = client.get("/teams/").content.decode()
    reads = [
        q["sql"]
        for q in ctx.captured_queries
        if any(t in q["sql"] for t in ("auth_group", "governance_membership", "notification"))
    ]
    assert len(reads) == 1, reads
    assert "team lead" in body and 'href="/audit/"' not in body
