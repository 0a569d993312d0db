"""The admins' pages (``/admin/``): create and edit queues (with their executor and
capacity), instance types, teams and memberships, shares, users and their roles.

Thin views: each form checks the shape of the input, then one service call validates,
writes and records the audit entry with the admin's reason; a refused input comes back
with each message beside its field and nothing stored. Admins only: anyone else gets
403, anonymous visitors the sign-in page.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render

from governance import roles
from governance.selectors import administration as sel
from governance.selectors import capacity as capacity_selectors
from governance.selectors import teams as team_selectors
from governance.services import capacity as capacity_services
from governance.services import shares as share_services
from governance.services import teams as team_services
from governance.services import users as user_services
from governance.services.errors import ServiceError
from governance.web.errors import apply_service_errors
from governance.web.forms_admin import (
    InstanceTypeForm,
    QueueForm,
    ShareCreateForm,
    TeamForm,
    UserForm,
)

View = Callable[..., HttpResponse]


def admin_only(view: View) -> View:
    """Signed-in admins only: 403 for everyone else (the sign-in page when anonymous)."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not roles.is_admin(request.user):
            return HttpResponseForbidden("Only admins may use the admin pages.")
        return view(request, *args, **kwargs)

    return wrapped


def _save(form: forms.Form, call: Callable[[dict[str, Any]], Any]) -> tuple[Any, int]:
    """Run ``call`` with the form's cleaned data when the form is valid; return what it
    gave (None when refused) and the status to answer with (400/403/... when refused)."""
    if not form.is_valid():
        return None, 400
    try:
        return call(form.cleaned_data), 200
    except ServiceError as error:
        apply_service_errors(form, error)
        return None, error.status


def _reason(data: dict[str, Any]) -> str:
    return str(data.get("reason") or "").strip()


@admin_only
def index(request: HttpRequest) -> HttpResponse:
    context = {
        "queues": capacity_selectors.queues(),
        "types": list(capacity_selectors.instance_types()),
        "teams": sel.teams_with_people(),
        "shares": list(sel.shares()),
        "users": sel.users_with_roles(),
    }
    return render(request, "administration/index.html", context)


# --- instance types -------------------------------------------------------------------


@admin_only
def type_new(request: HttpRequest) -> HttpResponse:
    form = InstanceTypeForm(request.POST or None)
    status = 200
    if request.method == "POST":

        def create(data: dict[str, Any]) -> Any:
            return capacity_services.instance_type_create(
                actor=request.user, name=data["name"], reason=_reason(data), **form.values()
            )

        itype, status = _save(form, create)
        if itype is not None:
            messages.success(request, f"Instance type {itype.name} created.")
            return redirect("web:admin")
    return render(
        request, "administration/type_form.html", {"form": form, "itype": None}, status=status
    )


@admin_only
def type_edit(request: HttpRequest, pk: int) -> HttpResponse:
    itype = capacity_selectors.instance_types().filter(pk=pk).first()
    if itype is None:
        raise Http404("No such instance type.")
    initial = {
        "name": itype.name,
        "accelerated": "yes" if itype.accelerated else "no",
        "accelerators": itype.accelerators,
        "speed": itype.speed,
        "hourly_price": itype.hourly_price,
    }
    form = InstanceTypeForm(request.POST or None, initial=initial, editing=True)
    status = 200
    if request.method == "POST":

        def update(data: dict[str, Any]) -> Any:
            return capacity_services.instance_type_update(
                actor=request.user,
                instance_type=itype.pk,
                changes=form.values(),
                reason=_reason(data),
            )

        saved, status = _save(form, update)
        if saved is not None:
            messages.success(request, f"Instance type {saved.name} saved.")
            return redirect("web:admin")
    return render(
        request, "administration/type_form.html", {"form": form, "itype": itype}, status=status
    )


# --- queues ---------------------------------------------------------------------------


def _type_names() -> list[str]:
    return list(capacity_selectors.instance_types().values_list("name", flat=True))


@admin_only
def queue_new(request: HttpRequest) -> HttpResponse:
    form = QueueForm(request.POST or None, type_names=_type_names())
    status = 200
    if request.method == "POST":

        def create(data: dict[str, Any]) -> Any:
            return capacity_services.queue_create(
                actor=request.user,
                name=data["name"],
                description=data["description"],
                executor=data["executor"],
                capacity=form.capacity_map(),
                reason=_reason(data),
            )

        queue, status = _save(form, create)
        if queue is not None:
            messages.success(request, f"Queue {queue.name} created.")
            return redirect("web:admin")
    return render(
        request, "administration/queue_form.html", {"form": form, "queue": None}, status=status
    )


@admin_only
def queue_edit(request: HttpRequest, pk: int) -> HttpResponse:
    queue = capacity_selectors.queue(pk)
    if queue is None:
        raise Http404("No such queue.")
    type_names = _type_names()
    initial = {
        "name": queue.name,
        "description": queue.description,
        "executor": queue.executor,
        **QueueForm.initial_capacity(type_names, sel.capacity_of(queue)),
    }
    form = QueueForm(request.POST or None, initial=initial, type_names=type_names)
    status = 200
    if request.method == "POST":

        def update(data: dict[str, Any]) -> Any:
            changes = {
                "name": data["name"],
                "description": data["description"],
                "executor": data["executor"],
                "capacity": form.capacity_map(),
            }
            return capacity_services.queue_update(
                actor=request.user, queue=queue.pk, changes=changes, reason=_reason(data)
            )

        saved, status = _save(form, update)
        if saved is not None:
            messages.success(request, f"Queue {saved.name} saved.")
            return redirect("web:admin")
    return render(
        request, "administration/queue_form.html", {"form": form, "queue": queue}, status=status
    )


# --- teams and memberships ------------------------------------------------------------


@admin_only
def team_new(request: HttpRequest) -> HttpResponse:
    form = TeamForm(request.POST or None, usernames=sel.usernames())
    status = 200
    if request.method == "POST":

        def create(data: dict[str, Any]) -> Any:
            return team_services.team_create(
                actor=request.user,
                name=data["name"],
                description=data["description"],
                leads=list(data["leads"]),
                members=list(data["members"]),
                reason=_reason(data),
            )

        team, status = _save(form, create)
        if team is not None:
            messages.success(request, f"Team {team.name} created.")
            return redirect("web:admin")
    return render(
        request, "administration/team_form.html", {"form": form, "team": None}, status=status
    )


@admin_only
def team_edit(request: HttpRequest, pk: int) -> HttpResponse:
    team = team_selectors.team(pk)
    if team is None:
        raise Http404("No such team.")
    people = team_services.membership_snapshot(team)
    initial = {"name": team.name, "description": team.description, **people}
    # Someone deactivated stays listed while they are on the team.
    names = sorted({*sel.usernames(), *people["leads"], *people["members"]})
    form = TeamForm(request.POST or None, initial=initial, usernames=names)
    status = 200
    if request.method == "POST":

        def update(data: dict[str, Any]) -> Any:
            changes = {
                "name": data["name"],
                "description": data["description"],
                "leads": list(data["leads"]),
                "members": list(data["members"]),
            }
            return team_services.team_update(
                actor=request.user, team=team.pk, changes=changes, reason=_reason(data)
            )

        saved, status = _save(form, update)
        if saved is not None:
            messages.success(request, f"Team {saved.name} saved.")
            return redirect("web:admin")
    return render(
        request, "administration/team_form.html", {"form": form, "team": team}, status=status
    )


# --- shares ---------------------------------------------------------------------------


@admin_only
def share_new(request: HttpRequest) -> HttpResponse:
    """A new share; it is edited afterwards in the share editor (with its preview)."""
    queues = [(q.pk, q.name) for q in capacity_selectors.queues()]
    teams = [(t.pk, t.name) for t in sel.teams()]
    initial = {"policy": "RESERVE", "enabled": True}
    if request.GET.get("queue", "").isdigit():
        initial["queue"] = int(request.GET["queue"])
    form = ShareCreateForm(
        request.POST or None,
        initial=initial,
        type_names=_type_names(),
        queues=queues,
        teams=teams,
    )
    status = 200
    if request.method == "POST":

        def create(data: dict[str, Any]) -> Any:
            values = form.changes()
            return share_services.share_create(
                actor=request.user,
                queue=data["queue"],
                team=data["team"],
                name=data["name"],
                reason=_reason(data),
                **values,
            )

        share, status = _save(form, create)
        if share is not None:
            messages.success(request, f"Share {share.name} created.")
            return redirect("web:share", share_id=share.pk)
    policy = form["policy"].value() or "RESERVE"
    context = {"form": form, "borrow_enabled": policy == "LEND_AND_BORROW"}
    return render(request, "administration/share_form.html", context, status=status)


# --- users and roles ------------------------------------------------------------------


def _team_choices() -> list[tuple[int, str]]:
    return [(t.pk, t.name) for t in sel.teams()]


@admin_only
def user_new(request: HttpRequest) -> HttpResponse:
    form = UserForm(request.POST or None, teams=_team_choices())
    status = 200
    if request.method == "POST":

        def create(data: dict[str, Any]) -> Any:
            return user_services.user_create(
                actor=request.user,
                username=data["username"],
                password=data["password"] or None,
                email=data["email"],
                first_name=data["first_name"],
                last_name=data["last_name"],
                roles=list(data["roles"]),
                reason=_reason(data),
                lead_of=list(data["lead_of"]),
                member_of=list(data["member_of"]),
            )

        user, status = _save(form, create)
        if user is not None:
            messages.success(request, f"User {user.get_username()} created.")
            return redirect("web:admin")
    return render(
        request, "administration/user_form.html", {"form": form, "person": None}, status=status
    )


@admin_only
def user_edit(request: HttpRequest, pk: int) -> HttpResponse:
    person = sel.user(pk)
    if person is None:
        raise Http404("No such user.")
    described = sel.describe_user(person)
    initial = {
        "username": person.get_username(),
        "email": person.email,
        "first_name": person.first_name,
        "last_name": person.last_name,
        "roles": described["roles"],
        "lead_of": [t.pk for t in described["leads"]],
        "member_of": [t.pk for t in described["member_of"]],
        "active": person.is_active,
    }
    form = UserForm(request.POST or None, initial=initial, teams=_team_choices(), editing=True)
    status = 200
    if request.method == "POST":

        def update(data: dict[str, Any]) -> Any:
            changes = {f: data[f] for f in ("email", "first_name", "last_name")}
            if data["password"]:
                changes["password"] = data["password"]
            return user_services.user_edit(
                actor=request.user,
                user=person.pk,
                changes=changes,
                roles=list(data["roles"]),
                active=bool(data["active"]),
                reason=_reason(data),
                lead_of=list(data["lead_of"]),
                member_of=list(data["member_of"]),
            )

        saved, status = _save(form, update)
        if saved is not None:
            messages.success(request, f"User {saved.get_username()} saved.")
            return redirect("web:admin")
    context = {"form": form, "person": person, "described": described}
    return render(request, "administration/user_form.html", context, status=status)
