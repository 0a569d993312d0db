"""Page fragments rendered once per version of the stored state they show (issue 34).

Most of a page's time is spent computing and rendering what the previous request of the
same page computed and rendered: 20 readers of the team page see the same tables until
something is written. So a view hands the expensive, shared part of its page (a
template or a partial, and a function computing its context) to ``fragment``, which
serves the HTML cached under a key naming everything the HTML depends on:

- the fragment's name and arguments (URL kwargs, the query string's values that the
  fragment reads), ``SCHEMA`` (raised when the helper's output changes) and
  ``code_version`` (the templates and code of this release);
- the database, by name and oid (a test database or a re-created one never meets
  another's entries, though it reuses their ids);
- the viewer's visibility class (``Viewer``): EVERYONE for what every signed-in user
  sees alike, ROLES for what depends on the user's rights (admin, reviewer, the teams
  they lead, the teams they belong to: two users with the same rights share the HTML),
  USER for what depends on who the user is ("you filed this", the requester's own
  withdraw button, a proposer who may not decide their own proposal). The template is
  rendered without the request (no ``request``, ``user``, ``perms`` or ``messages`` in
  it): what it shows of the viewer, the view computes into its context, and the viewer
  class must name everything that computation reads;
- the ``version`` of the state it shows, from the view: ``state_cache.page_version``
  (the newest job event and audit entry: every job change writes an event and every
  policy change, filing, decision and review an audit entry; and digests of the few
  rows written without one that many pages show: promises, agreements, users' names),
  with what the page reads beyond that added by the view: a queue's
  ``queue_state_fingerprint`` for running jobs' figures (a heartbeat rewrites their
  rows without an event), ``rows_version`` for other rows written without an audit
  entry (a certification's drift mark, a decision's reminder, a what-if's result).
  Digests of rows take ``xmin`` and ``ctid``: a new row version always changes one of
  them, even two written by one transaction. Each view that caches says what it reads
  and which part of its version covers it;
- a time bucket (``bucket`` seconds) where the fragment shows a state that changes with
  time alone ("in 3 days" as words computed in Python, "overdue", an exposure's
  "reclaim imminent"): the HTML is at most that old, and the render of the next
  bucket's (each key's buckets start at an offset of their own, so a site's fragments do
  not all end theirs at once). Times written with ``{% when %}``
  need none: they are slots, written at each serving (``web.regions``), and so are
  those of the cached regions the fragment embeds (``regions.deferred_times``).

Parts that change without changing the fragment's version are ``holes``: a marker in the
cached HTML, replaced at each serving by the part as computed then (each usually cached
under its own version: the live usage bars, a usage history, the pending jobs' reasons).

What belongs to one request never enters the cache: the navigation, its unread count and
the messages are in the page around the fragment (rendered per request), and a form's
CSRF token is rendered as a slot (``csrf_slot``, a value derived from ``SECRET_KEY``, so
no stored text can imitate it) that each serving replaces with the requesting session's
token (``get_token``, which also sets the CSRF cookie as ``{% csrf_token %}`` does). A
page with a form's problems (a POST answered 400) is rendered for its request, not
cached.

Single flight: the first reader of a missing key renders it while the others wait for
its answer (``state_cache``'s lock, without using a CPU), so 20 clients arriving after a
write render the fragment once, not 20 times; when only the time bucket ended, the
others are served the previous bucket's HTML meanwhile. With the cache unavailable every request
renders its own fragment, as without this module.
"""

from __future__ import annotations

import enum
import hashlib
import time
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import render
from django.utils.crypto import salted_hmac
from django.utils.safestring import SafeString, mark_safe

from governance.selectors import state_cache
from governance.templatetags import web_time
from governance.web import regions
from governance.web.nav import request_roles

SCHEMA = 1
TIMEOUT = 600.0  # an unread version's HTML is dropped after this long
ROOT = Path(__file__).resolve().parent.parent.parent


@cache
def code_version() -> str:
    """A digest of the templates and of the views and presenters that fill them, read
    once per process: a deploy that changes what a fragment looks like never serves the
    HTML the code before it cached (every web worker of one release agrees on it)."""
    digest = hashlib.blake2b(digest_size=12)
    sources = [*(ROOT / "templates").rglob("*.html"), *(ROOT / "governance").rglob("*.py")]
    for path in sorted(sources):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class Viewer(enum.Enum):
    """Whose view a fragment is: what in the viewer changes the HTML."""

    EVERYONE = "everyone"
    ROLES = "roles"
    USER = "user"


@cache
def _secret_word(purpose: str, secret: str) -> str:
    return f"{purpose}-" + salted_hmac("fragments", purpose, secret=secret).hexdigest()


def csrf_slot() -> str:
    """What a cached fragment holds where a CSRF token goes (letters and digits only,
    so HTML escaping leaves it as it is; unguessable without ``SECRET_KEY``)."""
    return _secret_word("csrf-slot", settings.SECRET_KEY)


def viewer_class(request: HttpRequest, viewer: Viewer) -> str:
    """The part of a key naming who may see the fragment (``Viewer``)."""
    if viewer is Viewer.EVERYONE:
        return "all"
    held = request_roles(request)
    rights = (
        f"a{int(held.admin)}r{int(held.reviewer)}"
        f"l{','.join(map(str, sorted(held.lead_team_ids)))}"
        f"m{','.join(map(str, sorted(held.member_team_ids)))}"
    )
    return f"u{request.user.pk}{rights}" if viewer is Viewer.USER else rights


def database_identity() -> str:
    """The database's name and oid: a database dropped and created again under its name
    (a test run's, a bench's) gets another oid, so it never meets the fragments of the
    one before, whose ids it reuses. Read once per connection, on the first fragment it
    serves (a database is dropped only once every connection to it is closed, so it
    holds while the connection lives), not when a connection opens: with
    ``DB_CONN_MAX_AGE=0`` that would be one more query for every request."""
    connection.ensure_connection()
    raw = connection.connection
    held: tuple[Any, str] | None = getattr(connection, "_fragments_identity", None)
    if held is not None and held[0] is raw:
        return held[1]
    with connection.cursor() as cursor:
        cursor.execute("SELECT oid FROM pg_database WHERE datname = current_database()")
        row = cursor.fetchone()
    identity = f"{connection.settings_dict['NAME']}:{row[0] if row else ''}"
    setattr(connection, "_fragments_identity", (raw, identity))  # noqa: B010
    return identity


def fragment_key(
    request: HttpRequest,
    name: str,
    *,
    version: str,
    args: Iterable[Any] = (),
    viewer: Viewer = Viewer.ROLES,
) -> str:
    """The cache key of a fragment (see the module's docstring for its parts; the time
    bucket is stored with the HTML, ``bucket_of``)."""
    parts = [
        code_version(),
        database_identity(),
        repr(tuple(args)),
        viewer_class(request, viewer),
        version,
    ]
    # hashed: the parts (a fingerprint, lists of team ids) may pass a key's 250 characters
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=20).hexdigest()
    return f"fragment:{SCHEMA}:{name}:{digest}"


def bucket_of(key: str, bucket: int | None) -> int:
    """The time bucket a fragment stored under ``key`` is now in (0 without one). Each
    key's buckets start at an offset of its own, so the fragments of a site do not all
    expire in the same second."""
    if bucket is None:
        return 0
    offset = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=4).digest()) % bucket
    return int((time.time() + offset) // bucket)


def render_fragment(template_name: str, context: Mapping[str, Any]) -> regions.Rendered:
    """The template rendered for the cache: without the request (nothing of one user's
    can slip in), ``{% when %}`` times as slots and CSRF tokens as ``csrf_slot``."""
    return regions.render_with_slots(template_name, {**context, "csrf_token": csrf_slot()})


def _compute(template_name: str, context: Callable[[], Mapping[str, Any]]) -> regions.Rendered:
    """The fragment for the cache; the cached regions written into it keep their times
    as slots too (``regions.deferred_times``)."""
    with regions.deferred_times():
        return render_fragment(template_name, context())


def hole(name: str) -> SafeString:
    """A marker a fragment's context puts where a part is written at each serving (the
    ``holes`` of ``fragment``): a part that changes without changing the fragment's
    version, such as a usage history the scheduling cycle adds to in place."""
    return mark_safe(f"<!--{_secret_word('hole', settings.SECRET_KEY)}:{name}-->")


def serve(
    request: HttpRequest,
    rendered: regions.Rendered,
    holes: Mapping[str, Callable[[], str]] | None = None,
) -> SafeString:
    """A cached fragment for this request: times as of now, this session's CSRF token,
    each hole's part as computed now."""
    html = mark_safe(web_time.fill_inline(regions.fill(rendered)))
    for name, part in (holes or {}).items():
        marker = hole(name)
        if marker in html:
            html = mark_safe(html.replace(marker, part()))
    slot = csrf_slot()
    if slot in html:
        html = mark_safe(html.replace(slot, get_token(request)))
    return html


def fragment(
    request: HttpRequest,
    name: str,
    *,
    template: str,
    context: Callable[[], Mapping[str, Any]],
    version: str,
    args: Iterable[Any] = (),
    viewer: Viewer = Viewer.ROLES,
    bucket: int | None = None,
    holes: Mapping[str, Callable[[], str]] | None = None,
    timeout: float = TIMEOUT,
) -> SafeString:
    """``template`` rendered from ``context()``, cached under ``fragment_key`` and
    rendered by one request at a time (single flight); served with this request's
    times, CSRF token and ``holes`` (name -> its part, computed when served)."""
    key = fragment_key(request, name, version=version, args=args, viewer=viewer)
    rendered = _rendered(key, bucket_of(key, bucket), lambda: _compute(template, context), timeout)
    return serve(request, rendered, holes)


def _rendered(
    key: str, now: int, compute: Callable[[], regions.Rendered], timeout: float
) -> regions.Rendered:
    """The HTML stored under ``key`` for the time bucket ``now``, computed by one caller
    at a time (single flight). While another caller computes the new bucket's, the
    previous bucket's is served (a state of the same version, one bucket older), so a
    bucket's end makes no one wait; any other miss waits for the one computing."""
    found: tuple[int, regions.Rendered] | None = state_cache.cache_get_many([key]).get(key)
    if found is not None and found[0] == now:
        return found[1]
    lock = f"{key}:lock"
    token = state_cache.take_lock(lock)
    if token is None:
        if found is not None and found[0] == now - 1:
            return found[1]
        found = _wait_for_bucket(key, now - 1)
        if found is not None:
            return found[1]
    try:
        rendered = compute()
        state_cache.cache_set_many({key: (now, rendered)}, timeout)
    finally:
        if token is not None:
            state_cache.release_lock(lock, token)
    return rendered


def _wait_for_bucket(key: str, oldest: int) -> tuple[int, regions.Rendered] | None:
    """What another caller stores under ``key`` for a bucket from ``oldest`` on, polled
    for up to ``state_cache.WAIT_SECONDS`` (None after that: compute it)."""

    def stored(found: dict[str, Any]) -> tuple[int, regions.Rendered] | None:
        held: tuple[int, regions.Rendered] | None = found.get(key)
        return held if held is not None and held[0] >= oldest else None

    return stored(state_cache.wait_until([key], lambda found: stored(found) is not None))


def page(
    request: HttpRequest,
    name: str,
    template: str,
    context: Callable[[], Mapping[str, Any]],
    *,
    version: str,
    args: Iterable[Any] | None = None,
    viewer: Viewer = Viewer.ROLES,
    bucket: int | None = None,
    holes: Mapping[str, Callable[[], str]] | None = None,
    around: Mapping[str, Any] | None = None,
    swaps: str | None = None,
) -> HttpResponse:
    """The page ``template`` whose partial ``body`` is the ``fragment`` (its arguments:
    the query string's, unless ``args``), with ``around`` for the rest of the page (its
    title). The page's template shows ``{{ body }}`` where the partial would be. An htmx
    request swapping the element ``swaps`` (a list's results, refiltered) gets the
    partial ``results`` rendered from ``context()``, not cached."""
    if swaps is not None and getattr(getattr(request, "htmx", None), "target", None) == swaps:
        return render(request, f"{template}#results", context())
    body = fragment(
        request,
        name,
        template=f"{template}#body",
        context=context,
        version=version,
        args=sorted(request.GET.lists()) if args is None else args,
        viewer=viewer,
        bucket=bucket,
        holes=holes,
    )
    return render(request, template, {**(around or {}), "body": body})
