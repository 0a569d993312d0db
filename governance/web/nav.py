"""The navigation each role sees: only what that person may use.

The context processor runs for every template rendered with a request, including the
live partials polled every 2 s, which never show the navigation. So it hands the
template lazy values: the roles and the unread count are read only when a template
actually reads ``nav_links``, ``nav_roles`` or ``unread_notifications``, and once per
request (``request_roles``), in one query: the user's groups, led and member teams and
unread notifications together (every page shows all of them; four ORM queries cost a
page about 3 ms of CPU, one raw query a fifth of that). The views asking who leads what
read the same answer (``request_roles``), and ``roles.is_admin`` on the request's user
reads the groups it primed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from django.contrib.auth import get_user_model
from django.core.signals import setting_changed
from django.db import connection
from django.dispatch import receiver
from django.http import HttpRequest
from django.urls import NoReverseMatch, get_script_prefix, reverse
from django.utils.functional import SimpleLazyObject
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from governance import roles
from governance.models import Membership, MembershipRole, Notification

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
    member_team_ids: frozenset[int]
    unread_notifications: int


_ROLES_SQL = """
SELECT
  ARRAY(SELECT g.name FROM {group} g JOIN {user_group} ug ON ug.group_id = g.id
        WHERE ug.{user_column} = %(user)s),
  ARRAY(SELECT team_id FROM {membership} WHERE user_id = %(user)s AND role = %(lead)s),
  ARRAY(SELECT team_id FROM {membership} WHERE user_id = %(user)s),
  (SELECT count(*) FROM {notification} WHERE recipient_id = %(user)s AND read_at IS NULL)
"""


@cache
def _roles_sql() -> str:
    through: Any = get_user_model().groups.through
    user_column = through._meta.get_field(get_user_model()._meta.model_name).column
    return _ROLES_SQL.format(
        group=through._meta.get_field("group").related_model._meta.db_table,
        user_group=through._meta.db_table,
        user_column=user_column,
        membership=Membership._meta.db_table,
        notification=Notification._meta.db_table,
    )


def request_roles(request: HttpRequest) -> RequestRoles:
    """The signed-in user's site roles, led and member teams and unread notifications,
    read once per request in one query (the nav and a view asking the same question
    share the answer; a new request reads afresh). Their meaning is ``governance.roles``'s
    (``is_admin``, ``is_reviewer``, ``lead_team_ids``, ``member_team_ids``) and
    ``selectors.notifications.unread_count``'s; the groups read are kept on the user as
    ``roles`` keeps them, so its checks on this user ask no more."""
    found: RequestRoles | None = getattr(request, "_web_roles", None)
    if found is not None:
        return found
    user = request.user
    if not user.is_authenticated:
        found = RequestRoles(False, False, frozenset(), frozenset(), 0)
    else:
        with connection.cursor() as cursor:
            cursor.execute(_roles_sql(), {"user": user.pk, "lead": MembershipRole.LEAD.value})
            groups, led, member, unread = cursor.fetchone()
        setattr(user, "_role_groups", set(groups))  # noqa: B010  (roles._groups' own)
        found = RequestRoles(
            admin=roles.is_admin(user),
            reviewer=roles.is_reviewer(user),
            lead_team_ids=frozenset(led),
            member_team_ids=frozenset(member),
            unread_notifications=unread,
        )
    setattr(request, "_web_roles", found)  # noqa: B010
    return found


@cache
def _nav_urls(script_prefix: str) -> tuple[tuple[str, str, str], ...]:
    """(url, label, who) of every navigation entry that resolves: the URLconf does not
    change while the process runs, so each prefix's URLs are reversed once."""
    found = []
    for name, label, who in NAV:
        try:
            found.append((reverse(name), label, who))
        except NoReverseMatch:
            continue
    return tuple(found)


# The user's own pages beside the navigation (key in ``nav_url``, url name).
OWN_PAGES = (("notifications", "web:notifications"), ("tokens", "web:tokens"), ("logout", "logout"))


@cache
def _own_urls(script_prefix: str) -> dict[str, str]:
    """``OWN_PAGES``' URLs, reversed once per prefix as ``_nav_urls`` are."""
    return {key: reverse(name) for key, name in OWN_PAGES}


@receiver(setting_changed)
def _urlconf_changed(*, setting: str, **kwargs: Any) -> None:
    """A test that swaps the URLconf gets its navigation reversed afresh."""
    if setting == "ROOT_URLCONF":
        _nav_urls.cache_clear()
        _own_urls.cache_clear()


def _items(request: HttpRequest) -> tuple[tuple[str, str, bool], ...]:
    """(url, label, is the current section) of each entry the user may see."""
    held = request_roles(request)
    review = held.admin or held.reviewer
    items = []
    for url, label, who in _nav_urls(get_script_prefix()):
        if who == "review" and not review:
            continue
        if who == "admin" and not held.admin:
            continue
        active = request.path == url if url == "/" else request.path.startswith(url)
        items.append((url, label, active))
    return tuple(items)


ACTIVE = ' aria-current="page"'


@lru_cache(maxsize=256)
def _links_html(items: tuple[tuple[str, str, bool], ...]) -> SafeString:
    """The navigation's links: the same few strings for each set of rights and current
    section, so written once per process (the template's loop over them cost every page
    about 0.3 ms of CPU)."""
    return mark_safe(
        "\n".join(
            f'<a href="{escape(url)}"{ACTIVE if active else ""}>{escape(label)}</a>'
            for url, label, active in items
        )
    )


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
        # Called by the template (and only where it shows the navigation).
        "nav_links": lambda: _links_html(_items(request)),
        "nav_url": _own_urls(get_script_prefix()),
        "nav_roles": SimpleLazyObject(lambda: _role_names(request)),
        # A lazy int: counted only when a page (not a live partial) shows the navigation.
        "unread_notifications": SimpleLazyObject(
            lambda: request_roles(request).unread_notifications
        ),
    }
