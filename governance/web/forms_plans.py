"""Capacity plan forms: create, resize, end. Forms parse types only; the plan service
checks every rule and its field errors go back beside the fields."""

from __future__ import annotations

from typing import Any

from django import forms

from governance.services.limits import MAX_INSTANCES
from governance.services.plans import NAME_MAX_LENGTH, REASON_MAX_LENGTH

DATETIME_INPUT = forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")
DATETIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"]


class PlanCreateForm(forms.Form):
    share = forms.TypedChoiceField(coerce=int, label="Share (and so its queue)")
    name = forms.CharField(
        max_length=NAME_MAX_LENGTH, help_text="Unique in the queue, e.g. vision-december."
    )
    instance_type = forms.ChoiceField(label="Instance type")
    count = forms.IntegerField(min_value=0, max_value=MAX_INSTANCES)
    start = forms.DateTimeField(
        widget=DATETIME_INPUT, input_formats=DATETIME_FORMATS, help_text="UTC."
    )
    end = forms.DateTimeField(
        widget=DATETIME_INPUT,
        input_formats=DATETIME_FORMATS,
        help_text="UTC; the plan is active up to, not including, its end.",
    )
    hourly_price = forms.DecimalField(
        required=False,
        min_value=0,
        decimal_places=4,
        max_digits=12,
        label="Price per instance-hour",
    )
    reason = forms.CharField(
        required=False, max_length=REASON_MAX_LENGTH, label="Reason (for the audit trail)"
    )

    def __init__(
        self,
        *args: Any,
        shares: list[tuple[int, str]],
        type_names: list[str],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["share"].choices = [("", "choose a share"), *shares]  # type: ignore[attr-defined]
        self.fields["instance_type"].choices = [("", "choose a type")] + [  # type: ignore[attr-defined]
            (name, name) for name in type_names
        ]


class PlanResizeForm(forms.Form):
    count = forms.IntegerField(min_value=0, max_value=MAX_INSTANCES)
    reason = forms.CharField(max_length=REASON_MAX_LENGTH)


class PlanEndForm(forms.Form):
    reason = forms.CharField(max_length=REASON_MAX_LENGTH)
