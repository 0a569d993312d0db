"""Reads of shares with their limits (prefetched: no query per share)."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from governance.models import Share, ShareLimit


def shares() -> QuerySet[Share]:
    return Share.objects.select_related("queue", "team").prefetch_related(
        Prefetch(
            "limits",
            queryset=ShareLimit.objects.select_related("instance_type").order_by(
                "instance_type__name"
            ),
        )
    )


def limits_of(share: Share) -> dict[str, int]:
    """``{type name: count}`` from the prefetched limits."""
    return {row.instance_type.name: row.count for row in share.limits.all()}
