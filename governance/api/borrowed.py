"""Schemas of entitled and borrowed in a job's explain answer (docs/insight.md,
"Entitled and borrowed"): a pending job's start on its share's entitlement alone, a
running job's exposure on borrowed capacity, and the part of its running that borrowed."""

from __future__ import annotations

from rest_framework import serializers


class EntitledSerializer(serializers.Serializer):
    estimated_start = serializers.DateTimeField(
        allow_null=True,
        help_text="when the engine, played forward with nobody lending (each share on its "
        "own limits), starts it; null when it never does in that playback",
    )
    times_out = serializers.BooleanField(help_text="it times out first in that playback")
    never = serializers.BooleanField(
        help_text="no preference fits its share's own limits (and the queue's capacity): "
        "never on its own entitlement"
    )
    words = serializers.CharField(help_text="why there is no time, in words; empty otherwise")
    basis = serializers.CharField(help_text="how the estimate was made")


class LenderSerializer(serializers.Serializer):
    # A field named as the lending ledger names it; DRF's metaclass takes it out of the
    # class attributes, so it does not shadow ``Field.source``.
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=["lender", "unowned", "beyond"],
        help_text="a lending share's idle entitlement, capacity no share owns, or neither "
        "(after a limit, policy or capacity change)",
    )
    share = serializers.IntegerField(allow_null=True, help_text="the lending share's id")
    share_name = serializers.CharField(allow_null=True)
    team_name = serializers.CharField(allow_null=True)
    instances = serializers.IntegerField(help_text="instances of the type it lends")
    waiting_jobs = serializers.IntegerField(
        help_text="the lender's pending jobs with a preference for the type"
    )
    waiting_instances = serializers.IntegerField(help_text="instances those preferences ask")


class ExposureSerializer(serializers.Serializer):
    instance_type = serializers.CharField()
    count = serializers.IntegerField()
    share_borrowed = serializers.IntegerField(
        help_text="the share's instances of the type beyond its limit (all its runs there "
        "are open to reclaim)"
    )
    lenders = LenderSerializer(many=True)
    wanted_back_by = serializers.ListField(
        child=serializers.CharField(),
        help_text="other shares whose waiting work fits their own idle entitlement here",
    )
    reclaimed_now_by = serializers.IntegerField(
        allow_null=True, help_text="the job that reclaims this run in the cycle due now"
    )
    status = serializers.ChoiceField(choices=["reclaim_imminent", "may_be_reclaimed"])
    summary = serializers.CharField()


class BorrowedProgressSerializer(serializers.Serializer):
    run_seconds = serializers.FloatField(help_text="clock seconds of all its runs so far")
    borrowed_seconds = serializers.FloatField(
        help_text="of those, seconds of runs whose admission borrowed"
    )
    runs = serializers.IntegerField()
    borrowed_runs = serializers.IntegerField()
    lent_by = serializers.ListField(
        child=serializers.CharField(), help_text="who lent the borrowed runs their capacity"
    )
    summary = serializers.CharField(
        help_text="e.g. '3.2 h of its 5.0 h of running were on borrowed capacity, lent by "
        "team-b (share b)'; empty when it never ran"
    )
