"""The navigation each role sees: only what that person may use."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

from governance import roles

# (url name, label, who sees it: "all", "lead", "review" (reviewers and admins), "admin")
NAV: list[tuple[str, str, str]] = [
    ("web:overview", "Overview", "all"),
    ("web:queues", "Queues", "all"),
    ("web:jobs", "Jobs", "all"),
    ("web:exceptions", "Exceptions", "all"),
    ("web:priorities", "Priorities", "all"),
    ("web:agreements", "Agreements", "all"),
    ("web:audit", "Audit trail", "review"),
]


def nav(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    if not user.is_authenticated:
        return {}
    admin = roles.is_admin(user)
    review = admin or roles.is_reviewer(user)
    items = []
    for name, label, who in NAV:
        if who == "review" and not review:
            continue
        if who == "admin" and not admin:
            continue
        try:
            url = reverse(name)
        except NoReverseMatch:
            continue
        active = request.path == url if url == "/" else request.path.startswith(url)
        items.append({"url": url, "label": label, "active": active})
    role_names = [r for r, on in (("admin", admin), ("reviewer", roles.is_reviewer(user))) if on]
    if roles.lead_team_ids(user):
        role_names.append("team lead")
    return {"nav_items": items, "nav_roles": role_names}
