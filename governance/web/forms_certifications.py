"""Forms of certified configurations and preference templates (docs/workloads.md). They
parse types only; the certification and template services check every rule."""

from __future__ import annotations

from typing import Any

from django import forms

from governance.models.certifications import TemplateEntry
from governance.models.jobs import MAX_PREFERENCES
from governance.services import limits
from governance.services.certifications import (
    ENVIRONMENT_MAX_LENGTH,
    NOTE_MAX_LENGTH,
    PERCENT_MAX,
)

TEMPLATE_ROWS = MAX_PREFERENCES


class ProposeForm(forms.Form):
    """A lead's proposal: the configuration and the benchmark of the reference run."""

    instance_type = forms.ChoiceField(required=False, label="Instance type")
    plan = forms.ChoiceField(required=False, label="or capacity plan")
    count = forms.IntegerField(min_value=1, max_value=limits.MAX_INSTANCES, label="Count")
    runtime = forms.IntegerField(
        min_value=1, max_value=limits.MAX_SECONDS, label="Benchmark run time (seconds)"
    )
    converged = forms.BooleanField(required=False, label="Converged")
    utilization = forms.DecimalField(
        min_value=0, max_value=PERCENT_MAX, decimal_places=2, label="Utilization (%)"
    )
    failure_rate = forms.DecimalField(
        min_value=0, max_value=PERCENT_MAX, decimal_places=2, label="Failure rate (%)"
    )
    output_valid = forms.BooleanField(required=False, label="Output valid")
    environment = forms.CharField(
        required=False,
        max_length=ENVIRONMENT_MAX_LENGTH,
        label="Image or environment",
        help_text="e.g. train:2.4",
    )
    notes = forms.CharField(
        required=False,
        max_length=NOTE_MAX_LENGTH,
        label="Notes",
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Convergence and output validation: what was checked, how.",
    )

    def __init__(self, *args: Any, types: list[str], plans: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["instance_type"].choices = [("", "—"), *((t, t) for t in types)]  # type: ignore[attr-defined]
        self.fields["plan"].choices = [("", "—"), *((p, p) for p in plans)]  # type: ignore[attr-defined]

    def service_kwargs(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "instance_type": data.get("instance_type") or None,
            "plan": data.get("plan") or None,
            "count": data.get("count"),
            "runtime": data.get("runtime"),
            "converged": bool(data.get("converged")),
            "utilization": data.get("utilization"),
            "failure_rate": data.get("failure_rate"),
            "output_valid": bool(data.get("output_valid")),
            "environment": data.get("environment") or "",
            "notes": data.get("notes") or "",
        }


class DecideForm(forms.Form):
    decision = forms.ChoiceField(choices=[("certify", "Certify"), ("reject", "Reject")])
    note = forms.CharField(required=False, max_length=NOTE_MAX_LENGTH, label="Note")


class RevokeForm(forms.Form):
    reason = forms.CharField(required=False, max_length=NOTE_MAX_LENGTH, label="Reason")


class TemplateForm(forms.Form):
    """A workload's template: up to five places, each a certified configuration and the
    reason for its place, and the defaults its jobs take."""

    max_pending = forms.IntegerField(
        required=False, min_value=1, max_value=limits.MAX_SECONDS, label="Max pending (seconds)"
    )
    deadline_offset = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=limits.MAX_SECONDS,
        label="Deadline (seconds after submission)",
    )
    max_cost = forms.DecimalField(
        required=False, min_value=0, max_digits=14, decimal_places=2, label="Budget ($)"
    )
    # Not an input: where the service's ``entries`` errors are shown.
    entries = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, certified: list[tuple[int, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for i in range(TEMPLATE_ROWS):
            self.fields[f"entry_{i}"] = forms.TypedChoiceField(
                coerce=int,
                required=False,
                empty_value=None,
                choices=[("", "—"), *certified],
                label=f"Choice {i + 1}",
            )
            self.fields[f"reason_{i}"] = forms.CharField(
                required=False,
                max_length=limits.column_length(TemplateEntry, "reason"),
                label=f"Why choice {i + 1}",
            )

    def rows(self) -> list[tuple[forms.BoundField, forms.BoundField]]:
        return [(self[f"entry_{i}"], self[f"reason_{i}"]) for i in range(TEMPLATE_ROWS)]

    def service_kwargs(self) -> dict[str, Any]:
        data = self.cleaned_data
        entries = [
            {"certification": data.get(f"entry_{i}"), "reason": data.get(f"reason_{i}") or ""}
            for i in range(TEMPLATE_ROWS)
            if data.get(f"entry_{i}") is not None or data.get(f"reason_{i}")
        ]
        return {
            "entries": entries,
            "max_pending": data.get("max_pending"),
            "deadline_offset": data.get("deadline_offset"),
            "max_cost": data.get("max_cost"),
        }
