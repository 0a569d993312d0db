"""Reads of priority definitions (bands), for the API, the pages and the job services."""

from __future__ import annotations

from django.db.models import QuerySet

from governance.models import PriorityDefinition, Team
from governance.models.priorities import MAX_PRIORITY, MIN_PRIORITY
from governance.roles import AnyUser, band_roles


def priority_definitions() -> QuerySet[PriorityDefinition]:
    """Every band, lowest first, with its exception owner loaded (no N+1 on listing)."""
    return PriorityDefinition.objects.select_related("exception_owner").order_by(
        "min_priority", "id"
    )


def band_for(priority: int) -> PriorityDefinition | None:
    """The band that contains ``priority``, or None when no band covers it.

    Bands never overlap (the priority service enforces it), so at most one matches.
    """
    return (
        PriorityDefinition.objects.select_related("exception_owner")
        .filter(min_priority__lte=priority, max_priority__gte=priority)
        .order_by("min_priority")
        .first()
    )


def max_usable_priority(user: AnyUser, team: Team | int | None) -> int | None:
    """The highest priority ``user`` may give a job of ``team`` without an exception.

    It is the highest ``max_priority`` among the bands whose ``usable_by`` shares a role
    with ``roles.band_roles(user, team)``; None when the user may use no band at all.
    """
    roles = band_roles(user, team)
    if not roles:
        return None
    return highest_usable(band_limits(), roles)


def band_limits() -> list[tuple[int, list[str]]]:
    """Every band's ``max_priority`` and ``usable_by``, in one query ([]: no bands; a
    site has a handful, so a submission reads them all rather than asking twice)."""
    return [
        (top, list(usable))
        for top, usable in PriorityDefinition.objects.order_by().values_list(
            "max_priority", "usable_by"
        )
    ]


def highest_usable(bands: list[tuple[int, list[str]]], roles: set[str]) -> int | None:
    """The highest ``max_priority`` of ``bands`` usable by one of ``roles``; None if none."""
    return max((top for top, usable in bands if roles & set(usable)), default=None)


def allowance_words(user: AnyUser, team: Team | int | None) -> str:
    """What priority ``user`` may give a job of ``team`` without an exception, as the
    job pages say it; the same rule as the job service's ``priority_refusal``."""
    if not PriorityDefinition.objects.exists():
        return (
            f"No priority bands are defined yet, so any priority from {MIN_PRIORITY} to "
            f"{MAX_PRIORITY} is allowed."
        )
    highest = max_usable_priority(user, team)
    if highest is None:
        return (
            "You may use no priority band for this team: any priority needs an approved exception."
        )
    return f"You may use up to {highest} without an approved exception."
