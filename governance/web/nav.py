"""The navigation each role sees: only what that person may use.

The context processor runs for every template rendered with a request, including the
live partials polled every 2 s, which never show the navigation. So it hands the
template lazy values: the role queries (groups, led teams) run only when a template
actually reads ``nav_items`` or ``nav_roles``, and once per request (``request_roles``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils.functional import SimpleLazyObject

from governance import roles
from governance.selectors.notifications import unread_count

# (url name, label, who sees it: "all", "lead", "review" (reviewers and admins), "admin")
NAV: list[tuple[str, str, str]] = [
    ("web:overview", "Overview", "all"),
    ("web:queues", "Queues", "all"),
    ("web:plans", "Plans", "all"),
    ("web:jobs", "Jobs", "all"),
    ("web:teams", "Teams", "all"),
    ("web:exceptions", "Exceptions", "all"),
    ("web:priorities", "Priorities", "all"),
    ("web:agreements", "Agreements", "all"),
    ("web:signals", "Signals", "all"),
    ("web:audit", "Audit trail", "review"),
    ("web:admin", "Admin", "admin"),
]


@dataclass(frozen=True)
class RequestRoles:
    admin: bool
    reviewer: bool
    lead_team_ids: frozenset[int]


def request_roles(request: HttpRequest) -> RequestRoles:
    """The signed-in user's site roles and led teams, read once per request (the nav and
    a view asking the same question share the answer; a new request reads afresh)."""
    found: RequestRoles | None = getattr(request, "_web_roles", None)
    if found is None:
        user = request.user
        found = RequestRoles(
            admin=roles.is_admin(user),
            reviewer=roles.is_reviewer(user),
            lead_team_ids=frozenset(roles.lead_team_ids(user)),
        )
        setattr(request, "_web_roles", found)  # noqa: B010
    return found


def _items(request: HttpRequest) -> list[dict[str, Any]]:
    held = request_roles(request)
    review = held.admin or held.reviewer
    items = []
    for name, label, who in NAV:
        if who == "review" and not review:
            continue
        if who == "admin" and not held.admin:
            continue
        try:
            url = reverse(name)
        except NoReverseMatch:
            continue
        active = request.path == url if url == "/" else request.path.startswith(url)
        items.append({"url": url, "label": label, "active": active})
    return items


def _role_names(request: HttpRequest) -> list[str]:
    held = request_roles(request)
    names = [r for r, on in (("admin", held.admin), ("reviewer", held.reviewer)) if on]
    if held.lead_team_ids:
        names.append("team lead")
    return names


def nav(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    if not user.is_authenticated:
        return {}
    return {
        "nav_items": SimpleLazyObject(lambda: _items(request)),
        "nav_roles": SimpleLazyObject(lambda: _role_names(request)),
        # A lazy int: counted only when a page (not a live partial) shows the navigation.
        "unread_notifications": SimpleLazyObject(lambda: unread_count(user)),
    }
