"""The team view: a lead or member sees their own team first (its shares' usage and
history, its pending jobs with reasons and estimated starts, its exceptions), then every
other team in one line each. ``/teams/<id>/`` shows any team the same way."""

from __future__ import annotations

import hashlib
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import SafeString

from governance.models import Team
from governance.selectors import decisions as decision_selectors
from governance.selectors import insight, scheduling
from governance.selectors import teams as team_selectors
from governance.selectors import workloads as workload_selectors
from governance.web import charts, regions
from governance.web.nav import request_roles
from governance.web.presenters import teams as team_view

# The pending table (the team's first 50 pending jobs with why each waits and when it
# may start) is a pure function of its queues' stored state and of the engine readings
# cached under it, as the queue page's job tables are (governance/web/queues.py): its
# HTML is cached under each queue's fingerprint and the generation of the reasons served
# ("-": the team had no pending job in that state), for as long as the readings hold
# (EXPLAIN_MAX_AGE). A view with nothing changed skips two job queries, nine cache reads
# and 50 rows. Relative times are slots written at each serving (web/regions.py).
PENDING_HTML_VERSION = 1


def _pending_key(team: Team, queue_ids: list[int], fingerprints: dict[int, str]) -> str:
    states = {queue_id: fingerprints[queue_id] for queue_id in queue_ids}
    generations = scheduling.explain_generations(states)
    parts = "|".join(f"{q}:{fp}:{generations[q] or '-'}" for q, fp in states.items())
    # hashed: a team with several queues would pass the 250 characters a key may have
    digest = hashlib.blake2b(parts.encode(), digest_size=16).hexdigest()
    return f"team-pending:{PENDING_HTML_VERSION}:{team.pk}:{digest}"


def _pending_html(team: Team, queue_ids: list[int], fingerprints: dict[int, str]) -> SafeString:
    found = regions.lookup(_pending_key(team, queue_ids, fingerprints))
    if found is not None:
        return found
    pending, pending_total = team_view.pending_jobs(team, fingerprints)
    rendered = regions.render_with_slots(
        "teams/pending.html", {"pending": pending, "pending_total": pending_total}
    )
    # keyed by the reasons' generations as now cached (the ones just served)
    regions.store(_pending_key(team, queue_ids, fingerprints), rendered, scheduling.EXPLAIN_MAX_AGE)
    return regions.fill(rendered)


def _team_block(team: Team, usage: list[Any], window: str | None) -> dict[str, Any]:
    fingerprints = team_view.queue_fingerprints()
    history = insight.usage_history(
        queue_id=None, window_key=window, share_ids=team_view.team_share_ids(team, usage)
    )
    return {
        "team": team,
        "share_rows": team_view.share_rows(team, usage),
        "pending_html": _pending_html(team, team_view.team_queue_ids(team, usage), fingerprints),
        "borrowed_running": team_view.borrowed_running(team, fingerprints),
        "exceptions": team_view.team_exceptions(team),
        "change_requests": team_view.team_change_requests(team),
        "workloads": workload_selectors.of_team(team.pk),
        "decisions": list(decision_selectors.open_decisions(team_id=team.pk)),
        **charts.history_context(history, f"Team {team.name}"),
    }


def _page(request: HttpRequest, detailed: list[Team]) -> HttpResponse:
    usage = team_view.all_usage()
    summaries = team_view.summaries(usage)
    shown = {team.pk for team in detailed}
    others = sorted(
        (s for pk, s in summaries.items() if pk not in shown), key=lambda s: s.name.lower()
    )
    window = request.GET.get("history")
    blocks = [_team_block(team, usage, window) for team in detailed]
    held = request_roles(request)
    for block in blocks:
        block["may_edit_workloads"] = held.admin or block["team"].pk in held.lead_team_ids
    context = {"blocks": blocks, "others": others, "mine": held.member_team_ids}
    return render(request, "teams/teams.html", context)


@login_required
def team_list(request: HttpRequest) -> HttpResponse:
    """Your teams in full (led ones first), then the others."""
    held = request_roles(request)
    led, mine = held.lead_team_ids, held.member_team_ids
    teams = sorted(
        team_selectors.teams_by_id(mine), key=lambda t: (t.pk not in led, t.name.lower())
    )
    return _page(request, teams)


@login_required
def team_detail(request: HttpRequest, team_id: int) -> HttpResponse:
    team = team_selectors.team(team_id)
    if team is None:
        raise Http404("No such team.")
    return _page(request, [team])
