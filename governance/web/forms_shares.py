"""The share editor's form: parses what the admin typed into the service's field values.

It checks only the shape of the input (numbers are numbers); every rule (limits against
the queue's capacity, the borrow limit's policy, ...) is the share service's, and its
errors are put back beside the fields by ``apply_service_errors``.
"""

from __future__ import annotations

from typing import Any

from django import forms

from governance.models import Share
from governance.models.change_requests import MAX_JUSTIFICATION
from governance.models.shares import MAX_LIMITS_PER_SHARE, Policy

LIMIT_ROWS = MAX_LIMITS_PER_SHARE
# Posted rows looked at beyond the ones shown, so that a limit too many is refused by name
# rather than dropped (the page shows a sixth row when the queue has more than five types).
MAX_POSTED_ROWS = 20


def _optional_int(value: Any) -> int | None:
    if value in (None, ""):
        return None
    return int(value)


class ShareEditForm(forms.Form):
    """Limits as up to five (type, count) rows, then the share's policy fields."""

    policy = forms.ChoiceField(choices=Policy.choices)
    borrow_limit = forms.IntegerField(
        required=False,
        help_text="Percent of each limit it may borrow on top (200 = twice its limit); "
        "-1 = unlimited. Only for Lend and borrow: with another policy it is cleared.",
    )
    in_share_preemption = forms.BooleanField(
        required=False,
        label="In-share preemption",
        help_text="A higher-priority pending job stops a lower-priority running job of this share.",
    )
    preemption_retries = forms.IntegerField(
        required=False,
        min_value=0,
        help_text="How often a job may be preempted and requeued; 0 fails it at its first "
        "preemption; empty = unlimited.",
    )
    enabled = forms.BooleanField(required=False, help_text="A disabled share accepts no new jobs.")
    borrow_requires_verified_recovery = forms.BooleanField(
        required=False,
        label="Borrowing requires verified recovery",
        help_text="Jobs of workloads whose recovery from a preemption is not verified, and "
        "jobs naming no workload, never run on borrowed capacity.",
    )
    certified_only = forms.BooleanField(
        required=False,
        label="Certified configurations only",
        help_text="Its jobs must name a workload, and every preference must be a certified, "
        "unexpired configuration of it.",
    )
    reason = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why this change: it goes into the audit trail.",
    )
    version = forms.IntegerField(widget=forms.HiddenInput)
    # Not an input: where the service's ``limits`` errors are shown.
    limits = forms.CharField(required=False, widget=forms.HiddenInput)
    max_limits = MAX_LIMITS_PER_SHARE

    def __init__(
        self, *args: Any, type_names: list[str], require_reason: bool = True, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.require_reason = require_reason
        choices = [("", "—")] + [(name, name) for name in type_names]
        # As many rows as a share may have limits (the legend says so); a row posted
        # beyond them still gets the "at most" message (``clean``).
        self.rows = LIMIT_ROWS
        for i in range(self.rows):
            self.fields[f"limit_type_{i}"] = forms.ChoiceField(
                choices=choices, required=False, label=f"Type {i + 1}"
            )
            self.fields[f"limit_count_{i}"] = forms.IntegerField(
                required=False,
                min_value=0,
                label=f"Count {i + 1}",
                error_messages={
                    "min_value": "A limit is a count of 0 or more (0 makes the type "
                    "borrow-only); leave the row empty to drop the type.",
                    "invalid": "A limit is a whole number of instances.",
                },
            )

    @classmethod
    def initial_for(cls, share: Share, limits: dict[str, int]) -> dict[str, Any]:
        initial: dict[str, Any] = {
            "policy": share.policy,
            "borrow_limit": share.borrow_limit,
            "in_share_preemption": share.in_share_preemption,
            "preemption_retries": share.preemption_retries,
            "enabled": share.enabled,
            "borrow_requires_verified_recovery": share.borrow_requires_verified_recovery,
            "certified_only": share.certified_only,
            "version": share.version,
        }
        for i, (type_name, count) in enumerate(sorted(limits.items())):
            initial[f"limit_type_{i}"] = type_name
            initial[f"limit_count_{i}"] = count
        return initial

    def limit_rows(self) -> list[tuple[forms.BoundField, forms.BoundField]]:
        return [(self[f"limit_type_{i}"], self[f"limit_count_{i}"]) for i in range(self.rows)]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        limits: dict[str, int] = {}
        extra = 0
        for i in range(self.rows):
            type_name = data.get(f"limit_type_{i}")
            count = data.get(f"limit_count_{i}")
            if f"limit_count_{i}" in self.errors or f"limit_type_{i}" in self.errors:
                # Already told what is wrong with this row (e.g. a negative count): one
                # message per row, not a second one contradicting it.
                extra += 1
                continue
            if not type_name and count is None:
                continue
            if not type_name:
                self.add_error(f"limit_type_{i}", "Choose an instance type for this count.")
            elif count is None:
                self.add_error(f"limit_count_{i}", "Give a count (0 makes the type borrow-only).")
            elif type_name in limits:
                self.add_error(f"limit_type_{i}", f"{type_name} is already listed above.")
            else:
                limits[type_name] = count
        beyond = [
            i
            for i in range(self.rows, MAX_POSTED_ROWS)
            if self.data.get(f"limit_type_{i}") or self.data.get(f"limit_count_{i}")
        ]
        given = len(limits) + extra + len(beyond)
        if beyond or given > MAX_LIMITS_PER_SHARE:
            self.add_error(
                "limits",
                f"A share has at most {MAX_LIMITS_PER_SHARE} limits; {given} given. "
                "Remove one before adding another.",
            )
        data["limits_map"] = limits
        if self.require_reason and not (data.get("reason") or "").strip():
            self.add_error("reason", "Say why you change this share; it goes into the audit trail.")
        return data

    def parsed_changes(self) -> dict[str, Any]:
        """What :meth:`changes` gives, for the fields that parsed only: when others did
        not, the service still judges these (``check_with_service``), so every problem is
        told at once. The limits go only when every row parsed (else the stored ones
        stand in), the borrow limit only with a policy that has one."""
        data = self.cleaned_data
        parsed: dict[str, Any] = {}
        if "policy" in data:
            parsed["policy"] = data["policy"]
        if "limits_map" in data and not any(k.startswith("limit_") for k in self.errors):
            parsed["limits"] = data["limits_map"]
        for flag in (
            "in_share_preemption",
            "enabled",
            "borrow_requires_verified_recovery",
            "certified_only",
        ):
            if flag in data and flag in self.fields:
                parsed[flag] = bool(data[flag])
        if "preemption_retries" in data:
            parsed["preemption_retries"] = _optional_int(data["preemption_retries"])
        if parsed.get("policy") == Policy.LEND_AND_BORROW and "borrow_limit" in data:
            parsed["borrow_limit"] = _optional_int(data["borrow_limit"])
        return parsed

    def changes(self) -> dict[str, Any]:
        """The share fields as the service takes them (``limits`` replaces the whole map).

        Only a LEND_AND_BORROW share has a borrow limit: with another policy the field is
        left out, so the service clears it. (Sending it got a refusal that the page could
        not let the admin act on.)
        """
        data = self.cleaned_data
        changes: dict[str, Any] = {
            "policy": data["policy"],
            "limits": data["limits_map"],
            "in_share_preemption": bool(data.get("in_share_preemption")),
            "preemption_retries": _optional_int(data.get("preemption_retries")),
            "enabled": bool(data.get("enabled")),
            "borrow_requires_verified_recovery": bool(
                data.get("borrow_requires_verified_recovery")
            ),
            "certified_only": bool(data.get("certified_only")),
        }
        if data["policy"] == Policy.LEND_AND_BORROW:
            changes["borrow_limit"] = _optional_int(data.get("borrow_limit"))
        return changes


class ChangeRequestForm(ShareEditForm):
    """A lead's proposal: the share editor's fields a change request may carry (not the
    on/off switch), and a justification instead of a reason."""

    justification = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=MAX_JUSTIFICATION,
        help_text="Why the share should change: the admins read it when they decide.",
    )

    def __init__(self, *args: Any, type_names: list[str], **kwargs: Any) -> None:
        super().__init__(*args, type_names=type_names, require_reason=False, **kwargs)
        for name in ("enabled", "version", "reason"):
            del self.fields[name]

    def proposed(self, current: dict[str, Any]) -> dict[str, Any]:
        """Only the fields that differ from ``current`` (the share's snapshot), so an
        approval never writes back a field the lead did not touch."""
        changes = self.changes()
        changes.pop("enabled", None)
        return {k: v for k, v in changes.items() if current.get(k) != v}
