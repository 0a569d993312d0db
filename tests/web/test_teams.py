"""The team view: a lead sees their own team first, with its shares' usage, history,
pending jobs (reasons and estimated starts) and exceptions; other teams below."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from governance.models import ExceptionState, PriorityException
from governance.services.jobs import job_submit
from scheduler.cycle.run import run_cycle
from tests.factories import TeamFactory, make_job, make_lead, make_member, make_queue, make_share

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"


@pytest.fixture(autouse=True)
def _clock_pace(settings: Any) -> None:
    settings.DEMO_TIME_FACTOR = 1


@pytest.fixture
def world() -> Any:
    """red: one share of limit 1, running r1 (100 s) with w1 (50 s) waiting; blue: one
    share, nothing running. By hand: w1 starts when r1 ends, at C0 + 100 s."""
    from types import SimpleNamespace

    queue = make_queue("team-q", {G5: 2})
    red, blue = TeamFactory(name="red"), TeamFactory(name="blue")
    red_share = make_share(queue, red, "red-share", {G5: 1}, policy="RESERVE")
    make_share(queue, blue, "blue-share", {G5: 1}, policy="RESERVE")
    lead = make_lead(red, "red_lead")
    c0 = timezone.now() - timedelta(seconds=10)
    c0 = c0.replace(second=c0.second // 10 * 10, microsecond=0)  # see test_forecasts
    make_job(red_share, lead, name="r1", priority=9, duration=100, submitted_at=c0)
    run_cycle(queue.pk, now=c0)
    waiting = make_job(red_share, lead, name="w1", priority=5, duration=50, submitted_at=c0)
    PriorityException.objects.create(
        requester=lead,
        team=red,
        share=red_share,
        priority=90,
        justification="deadline",
        expires_at=timezone.now() + timedelta(days=1),
        state=ExceptionState.PENDING,
    )
    return SimpleNamespace(queue=queue, red=red, blue=blue, lead=lead, c0=c0, waiting=waiting)


def test_lead_sees_own_team_first_with_estimates(world: Any) -> None:
    client = Client()
    client.force_login(world.lead)
    page = client.get("/teams/").content.decode()
    mine = page.index('id="team-' + str(world.red.pk) + '"')
    others = page.index("Other teams")
    assert mine < others
    block = page[mine:others]
    assert "red-share" in block and "your team" in block
    assert ">w1</a>" in block
    assert "own_quota_full" in block  # why it waits
    assert "remaining work known for 1 of 1 running jobs" in block  # how it was estimated
    # The estimated start is C0 + 100 s, shown as a time with its exact value as title.
    start = world.c0 + timedelta(seconds=100)
    assert start.strftime("%Y-%m-%dT%H:%M:%S") in block
    assert "deadline" not in block and "Priority exceptions" in block
    assert ">Pending</span>" in block  # the exception's state
    assert "blue" in page[others:]
    assert "Teams" in page  # in the navigation


def test_other_team_page_and_no_team(world: Any) -> None:
    member = make_member(TeamFactory(name="green"), "green_member")
    client = Client()
    client.force_login(member)
    page = client.get(f"/teams/{world.red.pk}/").content.decode()
    assert ">w1</a>" in page
    assert client.get("/teams/999999/").status_code == 404
    loner = Client()
    loner.force_login(make_member(TeamFactory(name="solo"), "solo_member"))
    assert "This team has no share yet." in loner.get("/teams/").content.decode()


def submit(world: Any, name: str, priority: int) -> None:
    """A job submitted through the service, as the API and the form do."""
    job_submit(
        actor=world.lead,
        share=world.waiting.share,
        name=name,
        preferences=[{"instance_type": G5, "count": 1}],
        priority=priority,
        duration=50,
    )


def _team_page_queries(client: Client, team_id: int) -> list[str]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        assert client.get(f"/teams/{team_id}/").status_code == 200
    return [q["sql"] for q in ctx.captured_queries]


@pytest.fixture
def one_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's fragments and the queues' fingerprints see one moment: each view then
    reads what the state asks for, not also what a time bucket ending between two views
    does (on a loaded CI machine one ended: the second view rendered the page again, 12
    queries, and the one after the submissions 6)."""
    import time
    from types import SimpleNamespace

    from governance.selectors import state_cache
    from governance.web import fragments

    moment = time.time()
    clock = SimpleNamespace(time=lambda: moment, monotonic=time.monotonic, sleep=time.sleep)
    monkeypatch.setattr(fragments, "time", clock)
    monkeypatch.setattr(state_cache, "time", clock)


@pytest.mark.usefixtures("one_moment")
def test_team_page_reads_each_queue_state_once_and_does_not_grow(world: Any) -> None:
    """The team page's reasons, forecasts, entitled starts and exposure are cached under
    their queue's state digest: one digest query of every queue (the usage), under which
    each queue's digest is kept once read (the first view reads it), not one per
    reading; and no query per pending or running job."""
    client = Client()
    client.force_login(world.lead)
    first = _team_page_queries(client, world.red.pk)  # fills the caches
    digests = [sql for sql in first if "md5(concat_ws" in sql]
    assert len(digests) == 2  # every queue (usage), then the team's one queue
    small = _team_page_queries(client, world.red.pk)
    digests = [sql for sql in small if "md5(concat_ws" in sql]
    assert not digests  # both kept under their queue's newest event and audit entry
    for i in range(6):  # submitted as users do: each writes its event
        submit(world, f"more-{i}", priority=i)
    rendered = _team_page_queries(client, world.red.pk)  # the page again: a new state
    assert len(rendered) <= len(first)  # eight jobs now, where there were two
    large = _team_page_queries(client, world.red.pk)
    assert len(large) == len(small)
    assert "more-5" in client.get(f"/teams/{world.red.pk}/").content.decode()
    # 12: the navigation is one query, the team's queues and shares come with the
    # (cached) usage, the open decisions are one query
    assert len(small) <= 12


def test_the_pending_table_is_served_from_the_cache_until_the_state_changes(
    world: Any,
) -> None:
    """The pending table's HTML is cached under its queue's state and the reasons'
    generation (governance/web/teams.py): a second view reads neither the team's pending
    jobs nor their count, shows the same table, and a new pending job shows at once."""
    client = Client()
    client.force_login(world.lead)

    def table(html: str) -> str:
        return html[html.index('<section class="card team-pending">') :].split("</section>")[0]

    first = client.get(f"/teams/{world.red.pk}/").content.decode()
    queries = _team_page_queries(client, world.red.pk)
    pending_reads = [sql for sql in queries if "\"state\" = 'PENDING'" in sql]
    assert not pending_reads, pending_reads
    second = client.get(f"/teams/{world.red.pk}/").content.decode()
    assert table(second) == table(first) and "w1" in table(first)
    submit(world, "brand-new", priority=1)
    assert "brand-new" in table(client.get(f"/teams/{world.red.pk}/").content.decode())


def test_exception_and_change_request_rows_cost_no_query_each(world: Any) -> None:
    """The team view's exceptions and change requests load only what their rows show, in
    one query each: more of them, or ones naming a job, add no query."""
    from governance.services.change_requests import change_request_file

    client = Client()
    client.force_login(world.lead)
    _team_page_queries(client, world.red.pk)
    before = len(_team_page_queries(client, world.red.pk))
    PriorityException.objects.create(
        requester=world.lead,
        team=world.red,
        job=world.waiting,
        priority=80,
        justification="release",
        expires_at=timezone.now() + timedelta(days=1),
        state=ExceptionState.APPROVED,
    )
    change_request_file(
        actor=world.lead,
        share=world.waiting.share,
        changes={"limits": {G5: 2}},
        justification="more work",
    )
    _team_page_queries(client, world.red.pk)
    assert len(_team_page_queries(client, world.red.pk)) == before
    page = client.get(f"/teams/{world.red.pk}/").content.decode()
    assert "job w1" in page and "share red-share" in page
    assert "team-q/red-share" in page and "red_lead" in page and "2 \u00d7 ml.g5.xlarge" in page


def test_the_teams_queues_and_names_read_before_the_fragment_follow_the_state(
    world: Any,
) -> None:
    """The team, its queues and shares and their fingerprints are kept under the state of
    every queue (``presenters.teams.layout``): a renamed team, its list page, a share in
    another queue with a pending job, all show on the next view."""
    from governance.services.teams import team_update
    from tests.factories import make_admin

    client = Client()
    client.force_login(world.lead)
    assert "<h2>red" in client.get(f"/teams/{world.red.pk}/").content.decode()
    client.get("/teams/")
    team_update(actor=make_admin(), team=world.red, changes={"name": "crimson"})
    page = client.get(f"/teams/{world.red.pk}/").content.decode()
    assert "<h2>crimson" in page and "<h2>red" not in page
    assert "<h2>crimson" in client.get("/teams/").content.decode()
    other = make_queue("other-q", {G5: 1})
    share = make_share(other, world.red, "crimson-other", {G5: 1}, policy="RESERVE")
    job_submit(  # as users submit: its event is what moves the state's version
        actor=world.lead,
        share=share,
        name="elsewhere",
        preferences=[{"instance_type": G5, "count": 1}],
        priority=1,
        duration=50,
    )
    page = client.get(f"/teams/{world.red.pk}/").content.decode()
    pending = page[page.index('<section class="card team-pending">') :].split("</section>")[0]
    assert ">elsewhere</a>" in pending and ">w1</a>" in pending


def test_the_pending_table_is_rendered_again_for_new_reasons(world: Any) -> None:
    """The cached pending table is served only with the reasons' generation it was
    rendered from: once the reasons are gone (expired), the next view reads the team's
    pending jobs again and the engine's reasons anew."""
    from django.core.cache import caches

    from governance.selectors import state_cache

    client = Client()
    client.force_login(world.lead)
    pending_reads = "\"state\" = 'PENDING'"
    client.get(f"/teams/{world.red.pk}/")
    assert not [q for q in _team_page_queries(client, world.red.pk) if pending_reads in q]
    state = state_cache.queue_state_fingerprint(world.queue.pk)
    caches["shared"].delete_many([f"explain:{state}:ok", f"explain:{state}:kept"])
    assert [q for q in _team_page_queries(client, world.red.pk) if pending_reads in q]
    page = client.get(f"/teams/{world.red.pk}/").content.decode()
    assert ">w1</a>" in page and "own_quota_full" in page
