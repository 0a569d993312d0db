"""The admins' forms (``/admin/``): they check only the shape of the input (a number is a
number, within what a column holds); every rule is the service's, and its errors come back
beside the field by ``apply_service_errors``. Every form asks why: the reason goes into
the audit entry of the change."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.core.validators import MaxLengthValidator

from governance.models import InstanceType, JobQueue, Share, Team
from governance.models.capacity import Executor
from governance.models.shares import Policy
from governance.selectors.administration import SITE_ROLES
from governance.services import limits as limits_
from governance.web.forms_shares import LIMIT_ROWS, ShareEditForm

REASON_MAX = limits_.MAX_REASON
ROLE_LABELS = {
    "admin": "Admin: changes queues, types, capacity, teams, shares, users and bands",
    "reviewer": "Reviewer: decides priority exceptions, reads the audit trail",
    "agent": "Agent: a program that runs admitted jobs on a cluster (docs/agents.md)",
}


def reason_field() -> forms.CharField:
    return forms.CharField(
        max_length=REASON_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Reason",
        help_text="Why this change: it goes into the audit trail.",
        error_messages={"required": "Say why; the reason goes into the audit trail."},
    )


class InstanceTypeForm(forms.Form):
    name = forms.CharField(
        max_length=limits_.column_length(InstanceType, "name"),
        help_text="e.g. ml.g5.xlarge; it cannot change later.",
    )
    accelerated = forms.ChoiceField(
        choices=[("", "From the name (ml.p, ml.g, ml.trn)"), ("yes", "Yes"), ("no", "No")],
        required=False,
        label="Accelerated (GPU/accelerator type)",
    )
    accelerators = forms.IntegerField(
        min_value=0, max_value=limits_.MAX_ACCELERATORS, initial=0, label="Accelerators"
    )
    speed = forms.FloatField(
        min_value=0.0,
        max_value=limits_.MAX_SPEED,
        initial=1.0,
        help_text="Relative to the reference type (1.0).",
    )
    hourly_price = forms.DecimalField(
        min_value=0, max_digits=10, decimal_places=4, initial=0, label="Hourly price"
    )
    reason = reason_field()

    def __init__(self, *args: Any, editing: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if editing:
            # The service refuses a rename (jobs name their types); the page does not offer it.
            self.fields["name"].disabled = True
            self.fields["name"].help_text = "Types cannot be renamed: jobs refer to them by name."
            accelerated = self.fields["accelerated"]
            assert isinstance(accelerated, forms.ChoiceField)
            accelerated.choices = [("yes", "Yes"), ("no", "No")]

    def values(self) -> dict[str, Any]:
        data = self.cleaned_data
        values: dict[str, Any] = {
            "accelerators": data["accelerators"],
            "speed": data["speed"],
            "hourly_price": data["hourly_price"],
        }
        if data.get("accelerated"):
            values["accelerated"] = data["accelerated"] == "yes"
        return values


class QueueForm(forms.Form):
    """A queue, its executor, and its capacity: one count per known instance type."""

    name = forms.CharField(max_length=limits_.column_length(JobQueue, "name"))
    description = forms.CharField(
        required=False,
        max_length=limits_.MAX_DESCRIPTION,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    executor = forms.ChoiceField(
        choices=Executor.choices,
        help_text="Where admitted jobs run: the simulated fleet, agents on your clusters, or "
        "a Slurm cluster (docs/slurm.md).",
    )
    # Not an input: where the service's ``capacity`` errors are shown.
    capacity = forms.CharField(required=False, widget=forms.HiddenInput)
    reason = reason_field()

    def __init__(self, *args: Any, type_names: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.type_names = type_names
        for i, name in enumerate(type_names):
            self.fields[f"cap_{i}"] = forms.IntegerField(
                required=False,
                min_value=0,
                max_value=limits_.MAX_INSTANCES,
                label=name,
            )

    def capacity_fields(self) -> list[forms.BoundField]:
        return [self[f"cap_{i}"] for i in range(len(self.type_names))]

    @staticmethod
    def initial_capacity(type_names: list[str], capacity: dict[str, int]) -> dict[str, Any]:
        return {f"cap_{i}": capacity[name] for i, name in enumerate(type_names) if name in capacity}

    def capacity_map(self) -> dict[str, int]:
        """Types given a count (0 included); an empty box leaves the type out of the queue."""
        found: dict[str, int] = {}
        for i, name in enumerate(self.type_names):
            count = self.cleaned_data.get(f"cap_{i}")
            if count is not None:
                found[name] = count
        return found


class TeamForm(forms.Form):
    name = forms.CharField(max_length=limits_.column_length(Team, "name"))
    description = forms.CharField(
        required=False,
        max_length=limits_.MAX_DESCRIPTION,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    leads = forms.MultipleChoiceField(
        required=False,
        help_text="Team leads submit jobs, file priority exceptions and edit their agreements.",
    )
    members = forms.MultipleChoiceField(
        required=False, help_text="Members submit jobs. A lead is listed once, as a lead."
    )
    reason = reason_field()

    def __init__(self, *args: Any, usernames: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [(u, u) for u in usernames]
        for name in ("leads", "members"):
            field = self.fields[name]
            assert isinstance(field, forms.MultipleChoiceField)
            field.choices = choices
            field.widget.attrs["size"] = min(10, max(3, len(choices)))


class UserForm(forms.Form):
    username = forms.CharField(max_length=limits_.column_length(get_user_model(), "username"))
    email = forms.EmailField(
        required=False, max_length=limits_.column_length(get_user_model(), "email")
    )
    first_name = forms.CharField(
        required=False, max_length=limits_.column_length(get_user_model(), "first_name")
    )
    last_name = forms.CharField(
        required=False, max_length=limits_.column_length(get_user_model(), "last_name")
    )
    password = forms.CharField(
        required=False,
        max_length=limits_.MAX_PASSWORD_LENGTH,
        strip=False,
        # new-password: a browser must not fill in the signed-in admin's own password.
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Empty: they sign in after a password reset by email.",
    )
    roles = forms.MultipleChoiceField(
        required=False,
        choices=[(role, ROLE_LABELS[role]) for role in SITE_ROLES],
        widget=forms.CheckboxSelectMultiple,
        label="Site roles",
    )
    lead_of = forms.TypedMultipleChoiceField(
        coerce=int,
        required=False,
        label="Team lead of",
        help_text="A lead submits jobs, files priority exceptions and keeps the team's agreements.",
    )
    member_of = forms.TypedMultipleChoiceField(
        coerce=int, required=False, label="Member of", help_text="Members submit jobs."
    )
    active = forms.BooleanField(
        required=False, initial=True, label="May sign in (unticked: deactivated, tokens revoked)"
    )
    reason = reason_field()

    def __init__(
        self,
        *args: Any,
        teams: list[tuple[int, str]],
        editing: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        for name in ("lead_of", "member_of"):
            field = self.fields[name]
            assert isinstance(field, forms.TypedMultipleChoiceField)
            field.choices = teams
            field.widget.attrs["size"] = min(8, max(3, len(teams)))
        if editing:
            self.fields["username"].disabled = True
            self.fields["username"].help_text = "Usernames do not change."
            self.fields["password"].help_text = "Empty: the password stays as it is."
        else:
            del self.fields["active"]


class ShareCreateForm(ShareEditForm):
    """A new share: its queue, team and name, then the editor's fields (limits, policy)."""

    field_order = ["queue", "team", "name"]

    def __init__(
        self,
        *args: Any,
        queues: list[tuple[int, str]],
        teams: list[tuple[int, str]],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        del self.fields["version"]
        self.fields["queue"] = forms.TypedChoiceField(
            coerce=int, choices=[("", "—"), *queues], label="Queue"
        )
        self.fields["team"] = forms.TypedChoiceField(
            coerce=int, choices=[("", "—"), *teams], label="Team"
        )
        self.fields["name"] = forms.CharField(
            max_length=limits_.column_length(Share, "name"), label="Share name"
        )
        self.fields["reason"].validators.append(MaxLengthValidator(REASON_MAX))
        for i in range(LIMIT_ROWS):
            for prefix in ("limit_type_", "limit_count_"):
                field = self.fields[f"{prefix}{i}"]
                field.widget.attrs["aria-label"] = str(field.label)
        self.fields["policy"].initial = Policy.RESERVE
        self.fields["enabled"].initial = True
