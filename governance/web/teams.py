"""The team view: a lead or member sees their own team first (its shares' usage and
history, its pending jobs with reasons and estimated starts, its exceptions), then every
other team in one line each. ``/teams/<id>/`` shows any team the same way."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import SafeString

from governance.models import Decision, DecisionState, Team
from governance.selectors import decisions as decision_selectors
from governance.selectors import scheduling, state_cache
from governance.selectors import workloads as workload_selectors
from governance.web import charts, fragments, regions
from governance.web.nav import request_roles
from governance.web.presenters import teams as team_view

# The pending table (the team's first 50 pending jobs with why each waits and when it
# may start) is a pure function of its queues' stored state and of the engine readings
# cached under it, as the queue page's job tables are (governance/web/queues.py): its
# HTML is cached under each queue's fingerprint with the generations of the reasons
# served ("-": the team had no pending job in that state), and served while those are
# the reasons' generations now (read with it, in one cache read), for as long as the
# readings hold (EXPLAIN_MAX_AGE). A view with nothing changed skips two job queries,
# nine cache reads and 50 rows. Relative times are slots written at each serving
# (web/regions.py).
PENDING_HTML_VERSION = 2  # 2: the generations stored with the HTML


def _pending_key(team: Team, states: dict[int, str]) -> str:
    parts = "|".join(f"{q}:{fp}" for q, fp in states.items())
    # hashed: a team with several queues would pass the 250 characters a key may have
    digest = hashlib.blake2b(parts.encode(), digest_size=16).hexdigest()
    return f"team-pending:{PENDING_HTML_VERSION}:{team.pk}:{digest}"


def _generations(generations: dict[int, str | None]) -> str:
    return "|".join(f"{q}:{token or '-'}" for q, token in generations.items())


def _pending_html(team: Team, queue_ids: list[int], fingerprints: dict[int, str]) -> SafeString:
    states = {queue_id: fingerprints[queue_id] for queue_id in queue_ids}
    key = _pending_key(team, states)
    generations, found = scheduling.explain_generations_with(states, [key])
    held: tuple[str, regions.Rendered] | None = found.get(key)
    if held is not None and held[0] == _generations(generations):
        return regions.fill(held[1])
    pending, pending_total = team_view.pending_jobs(team, fingerprints)
    rendered = regions.render_with_slots(
        "teams/pending.html", {"pending": pending, "pending_total": pending_total}
    )
    # with the reasons' generations as now cached (the ones just served)
    served = _generations(scheduling.explain_generations(states))
    state_cache.cache_set_many({key: (served, rendered)}, scheduling.EXPLAIN_MAX_AGE)
    return regions.fill(rendered)


# The page's tables are a fragment (web/fragments.py) cached under what they read: the
# state fingerprint of every queue (the usage now, the teams' summaries and their runs
# on borrowed capacity: running jobs' rows, rewritten by heartbeats without an event)
# and ``state_cache.page_version`` (the newest job event and audit entry: exceptions,
# change requests, workloads and their recovery status, decisions are all audited), the
# team's open decisions' rows (a reminder is marked without an audit entry:
# ``rows_version``), within a bucket of BUCKET_SECONDS (an exposure's "reclaim
# imminent", a decision's "overdue"). Two parts are holes written at each serving: the
# usage history (the cycle adds to its rollups in place, with no event) and the pending
# table (cached under its own queues' fingerprints and the reasons' generations, above).
# What the page needs before the fragment (the teams, their queues, shares and queues'
# fingerprints) is one cache read under the fingerprint of every queue, which digests all
# of those rows (``team_view.layout``).
BUCKET_SECONDS = 30


def _team_block(team: Team, usage: list[Any], fingerprints: dict[int, str]) -> dict[str, Any]:
    return {
        "team": team,
        "share_rows": team_view.share_rows(team, usage),
        "pending_html": fragments.hole(f"pending-{team.pk}"),
        "history_html": fragments.hole(f"history-{team.pk}"),
        "borrowed_running": team_view.borrowed_running(team, fingerprints),
        "exceptions": team_view.team_exceptions(team),
        "change_requests": team_view.team_change_requests(team),
        "workloads": workload_selectors.of_team(team.pk),
        "decisions": list(decision_selectors.open_decisions(team_id=team.pk)),
    }


def _body_context(
    request: HttpRequest, detailed: list[Team], fingerprint: str, fingerprints: dict[int, str]
) -> dict[str, Any]:
    usage = team_view.all_usage(fingerprint)
    summaries = team_view.summaries(usage)
    shown = {team.pk for team in detailed}
    others = sorted(
        (s for pk, s in summaries.items() if pk not in shown), key=lambda s: s.name.lower()
    )
    blocks = [_team_block(team, usage, fingerprints) for team in detailed]
    held = request_roles(request)
    for block in blocks:
        block["may_edit_workloads"] = held.admin or block["team"].pk in held.lead_team_ids
    return {"blocks": blocks, "others": others, "mine": held.member_team_ids}


def _page(
    request: HttpRequest,
    fingerprint: str,
    detailed: list[Team],
    layout: team_view.TeamsLayout,
) -> HttpResponse:
    """The page showing ``detailed`` in full (their ``layout`` read under ``fingerprint``,
    the state of every queue)."""
    fingerprints = team_view.queue_fingerprints(fingerprint)
    fingerprints.update(layout.fingerprints)
    holes: dict[str, Callable[[], str]] = {}
    for team in detailed:
        holes[f"pending-{team.pk}"] = functools.partial(
            _pending_html, team, layout.queue_ids[team.pk], fingerprints
        )
        holes[f"history-{team.pk}"] = functools.partial(
            charts.history_html,
            request,
            queue_id=None,
            share_ids=layout.share_ids[team.pk],
            subject=f"Team {team.name}",
            history_id=team.pk,
        )
    body = fragments.fragment(
        request,
        "teams",
        template="teams/teams.html#body",
        context=lambda: _body_context(request, detailed, fingerprint, fingerprints),
        version="|".join(
            [
                fingerprint,
                state_cache.page_version(),
                *(
                    state_cache.rows_version(Decision, "team", team.pk, state=DecisionState.OPEN)
                    for team in detailed
                ),
            ]
        ),
        args=[team.pk for team in detailed],
        bucket=BUCKET_SECONDS,
        holes=holes,
    )
    return render(request, "teams/teams.html", {"body": body})


@login_required
def team_list(request: HttpRequest) -> HttpResponse:
    """Your teams in full (led ones first), then the others."""
    held = request_roles(request)
    led = held.lead_team_ids
    # One read of every queue's state, first: what is cached under it is never older.
    fingerprint = state_cache.queue_state_fingerprint()
    layout = team_view.layout(fingerprint, held.member_team_ids)
    teams = sorted(layout.teams.values(), key=lambda t: (t.pk not in led, t.name.lower()))
    return _page(request, fingerprint, teams, layout)


@login_required
def team_detail(request: HttpRequest, team_id: int) -> HttpResponse:
    fingerprint = state_cache.queue_state_fingerprint()
    layout = team_view.layout(fingerprint, [team_id])
    team = layout.teams.get(team_id)
    if team is None:
        raise Http404("No such team.")
    return _page(request, fingerprint, [team], layout)
