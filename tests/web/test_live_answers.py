"""Windows that end now, answered from a kept answer "as of" its time
(scheduler/live_answers.py, docs/signals.md#windows-that-end-now, docs/ledger.md#on-the-page):
computed once and reused, recomputed by one task after a minute while the kept one is
served, "computing…" while the first is computed elsewhere, the API exact throughout; and
the single flight of the pages' cached engine readings (selectors/state_cache.py)."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import caches
from django.test import Client
from rest_framework.test import APIClient

from governance.selectors import scheduling, state_cache
from governance.services.kit import job_event
from scheduler import live_answers, tasks
from tests.factories import make_job
from tests.services.test_history import at, clock, run_history, world  # noqa: F401

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


@pytest.fixture
def redis_cache(settings: Any) -> None:
    """The shared cache in the real Redis (its locks are what is tested), under a prefix
    of this test's own."""
    settings.CACHES = {
        **settings.CACHES,
        "shared": {
            "BACKEND": "governance.cache.ResilientRedisCache",
            "LOCATION": settings.REDIS_URL,
            "KEY_PREFIX": f"test-{uuid.uuid4().hex}",
        },
    }


@pytest.fixture
def recorded(world: Any, clock: Any, redis_cache: None) -> Any:  # noqa: F811
    run_history(world, clock)
    clock.now = at(400)
    world.clock = clock  # the tests move it
    return world


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any], str, str]]:
    """The recomputes queued (the Celery task's arguments), run by the test itself."""
    calls: list[tuple[str, dict[str, Any], str, str]] = []

    def queue(kind: str, params: dict[str, Any], token: str, version: str) -> bool:
        calls.append((kind, params, token, version))
        return True

    monkeypatch.setattr(live_answers, "_queue_refresh", queue)
    return calls


def last_day(world: Any) -> live_answers.Live:  # noqa: F811
    return scheduling.queue_signals_as_of(world.queue, at(400) - DAY, at(400), span=DAY)


def test_a_window_that_ends_now_is_computed_once_and_reused(
    recorded: Any,
    django_assert_num_queries: Any,
) -> None:
    first = last_day(recorded)
    assert first.as_of == at(400)
    assert first.answer == scheduling.queue_signals(recorded.queue, at(400) - DAY, at(400))
    recorded.clock.now = at(430)
    with django_assert_num_queries(1):  # the queue's record version: unchanged
        again = last_day(recorded)
    assert again == first  # the same answer, as of the same time


def test_after_a_change_to_the_queue_the_next_reader_computes_it_afresh(
    recorded: Any,
) -> None:
    """Whoever just submitted, approved or reclaimed something sees it on the page, not
    the answer kept from before: the answer is kept under the queue's newest job event
    and the newest audit entry (``state_cache.queue_record_version``)."""
    first = last_day(recorded)
    recorded.clock.now = at(410)
    job = make_job(recorded.alpha, recorded.red_lead, name="new", submitted_at=at(405))
    job_event(job, at(405), "submitted", "Submitted.")  # as the submission service does
    again = last_day(recorded)
    assert again.as_of == at(410)
    assert again.answer != first.answer
    recorded.clock.now = at(420)
    assert last_day(recorded).as_of == at(410)  # kept again while nothing changes


def test_a_heartbeat_does_not_make_the_answer_be_computed_again(recorded: Any) -> None:
    """A running job's heartbeat rewrites its row (a new row version: the queue's state
    digest changes) but records nothing the window counts: the kept answer is served; a
    policy change (an audit entry) computes it afresh."""
    from django.utils import timezone

    from governance.models import AuditEntry, AuditEvent, Job

    first = last_day(recorded)
    recorded.clock.now = at(410)
    beats = Job.objects.filter(queue=recorded.queue).update(last_heartbeat_at=timezone.now())
    assert beats
    assert last_day(recorded) == first
    AuditEntry.objects.create(
        event_type=AuditEvent.SHARE_UPDATED,
        subject_type="share",
        subject_id=str(recorded.alpha.pk),
        queue_id=recorded.queue.pk,
        created_at=timezone.now(),
    )
    assert last_day(recorded).as_of == at(410)


def test_after_a_minute_the_kept_answer_is_served_while_one_task_recomputes_it(
    recorded: Any,
    queued: list[Any],
) -> None:
    last_day(recorded)
    recorded.clock.now = at(461)
    assert last_day(recorded).as_of == at(400)  # served at once, stale
    assert last_day(recorded).as_of == at(400)
    assert len(queued) == 1  # one recompute for both readers
    tasks.refresh_live_answer(*queued[0])
    fresh = last_day(recorded)
    assert fresh.as_of == at(461)
    assert fresh.answer is not None
    window = {"from": (at(461) - DAY).isoformat(), "to": at(461).isoformat()}
    assert fresh.answer["window"] == window
    recorded.clock.now = at(530)
    last_day(recorded)
    assert len(queued) == 2  # the lock was released: the next stale read queues again


def test_another_window_or_grouping_is_another_answer(recorded: Any) -> None:
    by_share = last_day(recorded)
    by_team = scheduling.queue_signals_as_of(
        recorded.queue, at(400) - DAY, at(400), span=DAY, group_by="team"
    )
    assert by_team.answer != by_share.answer
    hour = scheduling.queue_signals_as_of(
        recorded.queue, at(400) - timedelta(hours=1), at(400), span=timedelta(hours=1)
    )
    assert hour.answer is not None
    assert hour.answer["window"]["from"] == (at(400) - timedelta(hours=1)).isoformat()


def test_while_the_first_answer_is_computed_elsewhere_the_page_says_so_and_polls(
    recorded: Any,
) -> None:
    params = {"queue": recorded.queue.pk, "group_by": "share", "span": DAY.total_seconds()}
    lock = f"{live_answers.key('signals', params)}:lock"
    caches["shared"].add(lock, "another worker", 300)
    client = Client()
    client.force_login(recorded.red_lead)
    html = client.get("/signals/", {"queue": recorded.queue.pk}).content.decode()
    assert "Computing the figures" in html
    assert 'hx-trigger="load delay:2s"' in html and f"queue={recorded.queue.pk}" in html
    caches["shared"].delete(lock)
    html = client.get(
        "/signals/", {"queue": recorded.queue.pk}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "Computing the figures" not in html
    assert "As of 2025-03-03 08:06 UTC" in html
    assert 'class="hbars"' in html


def test_a_closed_window_is_exact_and_has_no_as_of(recorded: Any) -> None:
    recorded.clock.now = at(400) + timedelta(minutes=10)
    client = Client()
    client.force_login(recorded.red_lead)
    window = {"from": at(0).isoformat(), "to": at(400).isoformat()}
    html = client.get("/signals/", {"queue": recorded.queue.pk, **window}).content.decode()
    assert "As of" not in html.split("Chargeback")[0]
    assert 'class="hbars"' in html


def test_the_ledger_page_is_as_of_and_the_api_stays_exact(recorded: Any) -> None:
    client = Client()
    client.force_login(recorded.red_lead)
    share = recorded.beta
    html = client.get(f"/shares/{share.pk}/ledger/").content.decode()
    assert "As of 2025-03-03 08:06 UTC" in html
    recorded.clock.now = at(430)
    html = client.get(f"/shares/{share.pk}/ledger/").content.decode()
    assert "As of 2025-03-03 08:06 UTC" in html  # the kept answer, under a minute old
    api = APIClient()
    api.force_authenticate(recorded.red_lead)
    answer = api.get(f"/api/shares/{share.pk}/ledger/").json()
    assert answer["window"]["to"] == at(430).isoformat()  # computed for the request
    signals = api.get("/api/signals/", {"queue": recorded.queue.pk}).json()
    assert signals["window"]["to"] == at(430).isoformat()


def test_the_cached_ledger_page_shows_a_change_on_the_next_view(recorded: Any) -> None:
    """The ledger page is a cached fragment of the answers it shows: after a job event
    of its queue the window is computed afresh and the page shows it as of then; each
    share's page and each window asked for is its own."""
    client = Client()
    client.force_login(recorded.red_lead)
    beta = f"/shares/{recorded.beta.pk}/ledger/"
    assert "As of 2025-03-03 08:06 UTC" in client.get(beta).content.decode()
    alpha = client.get(f"/shares/{recorded.alpha.pk}/ledger/").content.decode()
    assert f"Lending ledger of {recorded.alpha.name}" in alpha
    assert f"Lending ledger of {recorded.beta.name}" not in alpha
    week = client.get(beta, {"window": "7d"}).content.decode()
    assert 'href="?window=7d" aria-current="true"' in week
    recorded.clock.now = at(500)
    job = make_job(recorded.alpha, recorded.red_lead, name="new", submitted_at=at(490))
    job_event(job, at(490), "submitted", "Submitted.")  # as the submission service does
    html = client.get(beta).content.decode()
    assert "As of 2025-03-03 08:08 UTC" in html and 'href="?window=1d"' in html


def test_an_engine_reading_is_computed_by_one_client_while_the_others_wait(
    redis_cache: None,
) -> None:
    """The team page's herd: when a cached reading is missing, one client computes it;
    the others wait for its answer rather than each computing it again."""
    started, release = threading.Event(), threading.Event()
    computed: list[int] = []

    def compute() -> tuple[dict[int, Any], str, float | None]:
        computed.append(1)
        started.set()
        release.wait(5)
        return {7: "reading"}, "note", None

    out: dict[str, Any] = {}

    def first() -> None:
        out["first"] = scheduling._per_job_cached("test", 1, [7], "state-a", compute)

    thread = threading.Thread(target=first)
    thread.start()
    assert started.wait(5)
    threading.Timer(0.3, release.set).start()
    second = scheduling._per_job_cached("test", 1, [7], "state-a", compute)
    thread.join()
    assert computed == [1]
    assert second == ({7: "reading"}, "note", True)
    assert out["first"] == ({7: "reading"}, "note", True)


def test_an_expired_reading_is_served_from_the_kept_one_while_another_recomputes(
    redis_cache: None,
) -> None:
    computed: list[int] = []

    def compute() -> tuple[dict[int, Any], str, float | None]:
        computed.append(1)
        return {7: f"reading {len(computed)}"}, f"note {len(computed)}", None

    scheduling._per_job_cached("test", 1, [7], "state-b", compute)
    caches["shared"].delete("test:state-b:ok")  # expired (the kept copy lives on)
    lock = state_cache.take_lock("test:state-b:lock")  # another client recomputes
    assert lock is not None
    served = scheduling._per_job_cached("test", 1, [7], "state-b", compute)
    assert served == ({7: "reading 1"}, "note 1", True)
    assert computed == [1]
    state_cache.release_lock("test:state-b:lock", lock)
    assert scheduling._per_job_cached("test", 1, [7], "state-b", compute)[0] == {7: "reading 2"}


def test_the_ledger_page_reads_now_once_per_stored_state(
    recorded: Any, monkeypatch: pytest.MonkeyPatch, django_assert_num_queries: Any
) -> None:
    """The page's "now" (an engine reading of the live state) is cached under the queue's
    stored state like the reasons jobs wait: the second view asks the engine nothing, in
    four queries (the session's user, the share's queue, the queue's record version, under
    which its fingerprint is kept, read once for "now", the window and the share itself
    alike, the navigation's roles and unread count, in one), none of them the engine's
    read of every active job."""
    from scheduler import readings

    calls: list[int] = []
    real = readings.lending_now

    def counted(share: Any) -> dict[str, Any]:
        calls.append(share.pk)
        return real(share)

    monkeypatch.setattr(readings, "lending_now", counted)
    client = Client()
    client.force_login(recorded.red_lead)
    url = f"/shares/{recorded.beta.pk}/ledger/"
    assert client.get(url).status_code == 200
    with django_assert_num_queries(4):
        assert client.get(url).status_code == 200
    assert calls == [recorded.beta.pk]


def test_the_results_of_a_kept_answer_are_rendered_once(
    recorded: Any, django_assert_num_queries: Any
) -> None:
    """The Signals page's results of a window that ends now are rendered once per kept
    answer: a second view draws no chart (reads no share to link its figures) and shows
    the same results, their relative times written as of the view."""
    client = Client()
    client.force_login(recorded.red_lead)
    first = client.get("/signals/", {"queue": recorded.queue.pk}, HTTP_HX_REQUEST="true")
    recorded.clock.now = at(430)
    # the session's user, the queues, the queue, its record version and every queue's
    # (for the chargeback): all unchanged, so nothing is computed again
    with django_assert_num_queries(5):
        again = client.get("/signals/", {"queue": recorded.queue.pk}, HTTP_HX_REQUEST="true")
    html = again.content.decode()
    assert html.count('class="hbars"') == 4 and "As of 2025-03-03 08:06 UTC" in html
    assert html == first.content.decode()
