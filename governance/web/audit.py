"""The audit trail page: reviewers and admins only.

Filtering is ``selectors.filters.AuditFilter`` (one implementation for the page, the
API list and its CSV/JSON export, whose links carry the same query string). Pages go by keyset
on (created_at, id) — "older"/"newer" with a cursor — so no OFFSET and no COUNT(*) on a
table of hundreds of thousands of entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import render
from django.utils.dateparse import parse_datetime
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from governance.models import AuditEntry, AuditEvent
from governance.selectors import audit as audit_selectors
from governance.selectors import state_cache
from governance.selectors.filters import AuditFilter
from governance.web import fragments, regions
from governance.web.forms_governance import htmx_target
from governance.web.presenters import governance as sel

PAGE_SIZE = 50
FILTER_KEYS = ("actor", "event_type", "team", "share", "job", "queue", "since", "until")
MISSING = object()


@dataclass
class Change:
    key: str
    old: Any
    new: Any
    had_old: bool
    has_new: bool
    old_kind: str | None = None  # the kind of row the old value names (REF_KINDS), if any
    new_kind: str | None = None


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys: ``{"limits": {"ml.g5.xlarge": 2}}`` ->
    ``{"limits.ml.g5.xlarge": 2}``. Lists and scalars stay whole."""
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        if not value and prefix:
            flat[prefix] = {}
        for key, inner in value.items():
            flat.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix or "value": value}


# Keys of before/after whose value is the id of a row with a name: shown by that name
# (read at each serving, like the actor's: a user or team may be renamed), the id in the
# title. The last dotted part decides (``limits.x`` is never one of these).
REF_KINDS = {
    "actor": "user",
    "user": "user",
    "requester": "user",
    "submitter": "user",
    "decided_by": "user",
    "created_by": "user",
    "edited_by": "user",
    "claimed_by": "user",
    "team": "team",
    "share": "share",
    "queue": "queue",
    "job": "job",
    "by_job": "job",
}
_REF = re.compile(r"<!--ref:(user|team|share|queue|job):(\d+)-->")


def ref_kind(key: str, value: Any) -> str | None:
    """The kind of row ``value`` names under ``key``, or None (not an id key, or not an
    integer id)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return REF_KINDS.get(key)


def fill_refs(pieces: list[str]) -> list[str]:
    """``pieces`` of HTML with each ``<!--ref:kind:id-->`` marker replaced by the row's
    name, the id kept in the title ("kind id" when the row is gone): one query per kind
    present in all of them together."""
    refs: dict[str, set[int]] = {}
    for html in pieces:
        for kind, pk in _REF.findall(html):
            refs.setdefault(kind, set()).add(int(pk))
    if not refs:
        return pieces
    names = audit_selectors.names_of(refs)

    def named(match: re.Match[str]) -> str:
        kind, pk = match.group(1), int(match.group(2))
        name = names.get((kind, pk))
        if name is None:
            return f"{kind} {pk}"
        return f'<span class="ref" title="{kind} id {pk}">{escape(name)}</span>'

    return [_REF.sub(named, html) for html in pieces]


def changes(before: Any, after: Any) -> list[Change]:
    """Only the keys whose value differs (every key of a creation or a deletion)."""
    old = flatten(before) if before is not None else {}
    new = flatten(after) if after is not None else {}
    rows = []
    for key in sorted(set(old) | set(new), key=lambda k: (k not in old, k)):
        o, n = old.get(key, MISSING), new.get(key, MISSING)
        if o == n:
            continue
        last = key.rpartition(".")[2]
        old_value = None if o is MISSING else o
        new_value = None if n is MISSING else n
        rows.append(
            Change(
                key=key,
                old=old_value,
                new=new_value,
                had_old=o is not MISSING,
                has_new=n is not MISSING,
                old_kind=ref_kind(last, old_value),
                new_kind=ref_kind(last, new_value),
            )
        )
    return rows


# An entry's time, event, subject, change and reason cells depend on its own stored fields
# only, and audit entries are never changed or deleted once written (AuditEntry): so
# they are rendered once and cached per entry (``web.regions``, one cache read and at
# most one write per page), their relative time filled at each serving. Building the
# change lists and rendering them was most of this page's time. The actor's name (a user
# may be renamed) goes where the marker is, on every request. The key names the
# database, the entry's id and its creation time, so an id reused by another database or
# a re-created one never matches; CELLS_VERSION changes with the markup of
# ``audit/list.html#entry_cells``.
CELLS_VERSION = 4
CELLS_TTL = 7 * 24 * 3600.0
_WHO = "<!--who-->"


def _cells_key(entry: AuditEntry) -> str:
    db = connection.settings_dict["NAME"]
    stamp = int(entry.created_at.timestamp() * 1_000_000)
    return f"audit-cells:{CELLS_VERSION}:{db}:{entry.pk}:{stamp}"


def _render_cells(entry: AuditEntry) -> regions.Rendered:
    return regions.render_with_slots(
        "audit/list.html#entry_cells",
        {
            "e": entry,
            "changes": changes(entry.before, entry.after),
            # A creation or a deletion lists every field: folded by default.
            "whole": (entry.before is None) != (entry.after is None),
        },
    )


def entry_cells(entries: list[AuditEntry]) -> dict[int, tuple[SafeString, SafeString]]:
    """Entry id -> its row's cells before and after the actor's cell."""
    keys = {_cells_key(e): e for e in entries}
    html = regions.regions(keys, _render_cells, CELLS_TTL)
    cells = {}
    order = list(keys)
    filled = dict(zip(order, fill_refs([html[key] for key in order]), strict=True))
    for key, entry in keys.items():
        head, _, tail = filled[key].partition(_WHO)
        cells[entry.pk] = (mark_safe(head), mark_safe(tail))
    return cells


def _cursor(value: str | None) -> tuple[datetime, int] | None:
    """A cursor is ``<iso created_at>_<id>``; anything else means 'from the newest'."""
    if not value or "_" not in value:
        return None
    stamp, _, pk = value.rpartition("_")
    at = parse_datetime(stamp)
    if at is None or not pk.isdecimal():
        return None
    return at, int(pk)


def _cursor_of(entry: AuditEntry) -> str:
    return f"{entry.created_at.isoformat()}_{entry.pk}"


# The page is a fragment (web/fragments.py) of what it shows: audit entries (never
# changed once written, a new one is the newest id: ``page_version``), their
# actors' names and the filters' teams, shares, queues and users (renames and new ones
# are audited too). Reviewers and admins alone read it; per rights all the same. A
# refused filter (400) and the htmx swap of the results are rendered, not cached.
@login_required
def audit_list(request: HttpRequest) -> HttpResponse:
    if not audit_selectors.may_read_audit(request.user):
        return HttpResponseForbidden("Only reviewers and admins may read the audit trail.")
    filters = {k: request.GET.get(k, "") for k in FILTER_KEYS}
    filterset = AuditFilter(
        data={k: v for k, v in filters.items() if v},
        queryset=audit_selectors.audit_entries(request.user),
    )
    if not filterset.is_valid():
        context = _list_context(request, filters, filterset)
        return render(request, "audit/list.html", context, status=400)
    if htmx_target(request) == "audit-results":
        context = _list_context(request, filters, filterset)
        return render(request, "audit/list.html#results", context)
    return fragments.page(
        request,
        "audit",
        "audit/list.html",
        lambda: _list_context(request, filters, filterset),
        version=state_cache.page_version(),
    )


def _list_context(
    request: HttpRequest, filters: dict[str, str], filterset: AuditFilter
) -> dict[str, Any]:
    queryset = filterset.qs if filterset.is_valid() else AuditEntry.objects.none()
    entries, has_older, has_newer = sel.keyset_page(
        queryset,
        older_than=_cursor(request.GET.get("older")),
        newer_than=_cursor(request.GET.get("newer")),
        size=PAGE_SIZE,
    )
    fixed = entry_cells(entries)
    rows = [{"entry": e, "fixed": fixed[e.pk]} for e in entries]
    query = "&".join(f"{k}={v}" for k, v in _encoded(filters))
    return {
        "filters": filters,
        "filter_errors": filterset.errors,
        "rows": rows,
        "older": _cursor_of(entries[-1]) if entries and has_older else None,
        "newer": _cursor_of(entries[0]) if entries and has_newer else None,
        "query": query,
        "event_types": AuditEvent.choices,
        **sel.audit_filter_choices(),
        "usernames": sel.usernames(),
    }


def _encoded(filters: dict[str, str]) -> list[tuple[str, str]]:
    from urllib.parse import quote

    return [(k, quote(v, safe="")) for k, v in filters.items() if v]
