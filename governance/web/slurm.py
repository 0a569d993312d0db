"""The queue's Slurm page: how the queue maps onto Slurm (admins edit it) and the
executor's health (paused since when, the last error). docs/slurm.md."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from governance import roles
from governance.models import JobQueue
from governance.selectors import capacity as capacity_selectors
from governance.services import slurm as slurm_services
from governance.services.errors import ServiceError
from governance.web.errors import apply_service_errors

TYPE_KEYS = ("partition", "feature", "gpus_per_instance", "gres_name")


class SlurmConfigForm(forms.Form):
    """Account, QOS, grace, and per instance type of the queue its Slurm expression."""

    account = forms.CharField(required=False, max_length=64)
    qos = forms.CharField(required=False, max_length=64, label="QOS")
    grace_seconds = forms.IntegerField(
        min_value=0,
        max_value=slurm_services.MAX_GRACE_SECONDS,
        label="Grace before cancel (s)",
        help_text="Seconds between the signal (TERM) and the cancel of a stopped run.",
    )
    reason = forms.CharField(required=False, max_length=2000, label="Reason for the change")

    def __init__(self, *args: Any, type_names: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.type_names = type_names
        for i, name in enumerate(type_names):
            self.fields[f"t{i}_partition"] = forms.CharField(
                required=False, max_length=64, label=f"{name}: partition"
            )
            self.fields[f"t{i}_feature"] = forms.CharField(
                required=False, max_length=64, label=f"{name}: node feature"
            )
            self.fields[f"t{i}_gpus_per_instance"] = forms.IntegerField(
                min_value=0,
                max_value=slurm_services.MAX_GPUS_PER_INSTANCE,
                label=f"{name}: GPUs per instance",
            )
            self.fields[f"t{i}_gres_name"] = forms.CharField(
                max_length=32, label=f"{name}: gres name"
            )

    def type_rows(self) -> list[dict[str, Any]]:
        return [
            {"name": name, "fields": [self[f"t{i}_{key}"] for key in TYPE_KEYS]}
            for i, name in enumerate(self.type_names)
        ]

    def config(self) -> dict[str, Any]:
        data = self.cleaned_data
        types = {}
        for i, name in enumerate(self.type_names):
            spec = {key: data.get(f"t{i}_{key}") for key in TYPE_KEYS}
            if spec["partition"] or spec["feature"]:  # a type left blank is not mapped
                types[name] = spec
        return {
            "account": data["account"],
            "qos": data["qos"],
            "grace_seconds": data["grace_seconds"],
            "types": types,
        }


def _initial(queue: JobQueue, type_names: list[str]) -> dict[str, Any]:
    mapping = capacity_selectors.slurm_mapping(queue)
    initial: dict[str, Any] = {
        "account": mapping["account"],
        "qos": mapping["qos"],
        "grace_seconds": mapping["grace_seconds"],
    }
    for i, name in enumerate(type_names):
        spec = mapping["types"].get(name, {"gpus_per_instance": 1, "gres_name": "gpu"})
        for key in TYPE_KEYS:
            initial[f"t{i}_{key}"] = spec.get(key, "")
    return initial


@login_required
def queue_slurm(request: HttpRequest, queue_id: int) -> HttpResponse:
    queue = capacity_selectors.queues().filter(pk=queue_id).first()
    if queue is None:
        raise Http404("No such queue.")
    type_names = sorted(capacity_selectors.capacity_of(queue))
    may_edit = roles.is_admin(request.user)
    status = 200
    if request.method == "POST":
        form = SlurmConfigForm(request.POST, type_names=type_names)
        if not may_edit:
            form.add_error(None, "Only admins may configure Slurm queues.")
            status = 403
        elif form.is_valid():
            try:
                slurm_services.slurm_config_set(
                    actor=request.user,
                    queue=queue,
                    config=form.config(),
                    reason=form.cleaned_data["reason"],
                )
            except ServiceError as exc:
                apply_service_errors(form, exc)
                status = exc.status
            else:
                messages.success(request, f"Slurm mapping of {queue.name} saved.")
                return redirect("web:queue-slurm", queue_id=queue.pk)
        else:
            status = 400
    else:
        form = SlurmConfigForm(initial=_initial(queue, type_names), type_names=type_names)
    context = {
        "queue": queue,
        "form": form,
        "may_edit": may_edit,
        "health": capacity_selectors.slurm_config(queue),
        "drifts": capacity_selectors.slurm_drifts(queue),
    }
    return render(request, "queues/slurm.html", context, status=status)
