"""Reads of allocation agreements, with PostgreSQL full-text search."""

from __future__ import annotations

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db.models import F, Prefetch, QuerySet

from governance.models import Agreement, AgreementVersion, WhatIf

SEARCH_CONFIG = "english"


def agreements() -> QuerySet[Agreement]:
    """Every agreement with its owner, editors, shares and versions loaded (no N+1)."""
    return Agreement.objects.select_related("owner").prefetch_related(
        "shares",
        "editors",
        Prefetch(
            "versions",
            queryset=AgreementVersion.objects.select_related("owner", "edited_by").order_by(
                "version"
            ),
        ),
    )


def evidence(agreement_id: int) -> list[WhatIf]:
    """The what-if results attached to an agreement, last attached first."""
    return list(
        WhatIf.objects.filter(agreement_id=agreement_id)
        .select_related("queue", "requested_by")
        .order_by("-attached_at", "-id")
    )


def search_agreements(
    text: str, queryset: QuerySet[Agreement] | None = None
) -> QuerySet[Agreement]:
    """Agreements matching ``text`` (web-search syntax: words, "phrases", -not, or),
    best match first. Title matches weigh most; see services.agreements."""
    query = SearchQuery(text, search_type="websearch", config=SEARCH_CONFIG)
    base = queryset if queryset is not None else agreements()
    return (
        base.filter(search_vector=query)
        .annotate(rank=SearchRank(F("search_vector"), query))
        .order_by("-rank", "title", "id")
    )
