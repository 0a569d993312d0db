"""The admins' pages (``/admin/``): create and edit queues (with their executor and
capacity), instance types, teams and memberships, shares, users and their roles.

Thin views: each form checks the shape of the input, then one service call validates,
writes and records the audit entry with the admin's reason; a refused input comes back
with each message beside its field and nothing stored. Admins only: anyone else gets
403, anonymous visitors the sign-in page.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from functools import wraps
from typing import Any, cast

from django import forms
from django.contrib import messages
from django.contrib.auth import update_session_auth_hash
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render

from governance import roles
from governance.selectors import administration as sel
from governance.selectors import capacity as capacity_selectors
from governance.selectors import change_requests as change_request_selectors
from governance.selectors import teams as team_selectors
from governance.services import capacity as capacity_services
from governance.services import shares as share_services
from governance.services import teams as team_services
from governance.services import users as user_services
from governance.services.errors import ServiceError
from governance.web.errors import apply_service_errors, check_with_service
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
        # Every problem at once: the service's rules on what did parse (a field that
        # did not reads as empty), nothing stored.
        check_with_service(form, lambda: call(defaultdict(str, form.cleaned_data)))
        return None, 400
    try:
        return call(form.cleaned_data), 200
    except ServiceError as error:
        apply_service_errors(form, error)
        return None, error.status


def _form_page(
    request: HttpRequest,
    form: forms.Form,
    save: Callable[[dict[str, Any]], Any],
    *,
    template: str,
    context: dict[str, Any],
    done: Callable[[Any], str],
    then: Callable[[Any], HttpResponse] | None = None,
) -> HttpResponse:
    """What every admin form page does: on POST, ``save`` runs with the cleaned data
    (``_save``); once it succeeds, ``done(saved)`` is the flash message and the admin goes
    on to ``then(saved)`` (the admin index by default); otherwise the form comes back with
    its errors beside their fields and the refusal's status."""
    status = 200
    if request.method == "POST":
        saved, status = _save(form, save)
        if saved is not None:
            messages.success(request, done(saved))
            return then(saved) if then is not None else redirect("web:admin")
    return render(request, template, {"form": form, **context}, status=status)


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
        "pending_change_requests": change_request_selectors.pending_count(),
    }
    return render(request, "administration/index.html", context)


# --- instance types -------------------------------------------------------------------


@admin_only
def type_new(request: HttpRequest) -> HttpResponse:
    form = InstanceTypeForm(request.POST or None)

    def create(data: dict[str, Any]) -> Any:
        return capacity_services.instance_type_create(
            actor=request.user, name=data["name"], reason=_reason(data), **form.values()
        )

    return _form_page(
        request,
        form,
        create,
        template="administration/type_form.html",
        context={"itype": None},
        done=lambda itype: f"Instance type {itype.name} created.",
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

    def update(data: dict[str, Any]) -> Any:
        return capacity_services.instance_type_update(
            actor=request.user,
            instance_type=itype.pk,
            changes=form.values(),
            reason=_reason(data),
        )

    return _form_page(
        request,
        form,
        update,
        template="administration/type_form.html",
        context={"itype": itype},
        done=lambda saved: f"Instance type {saved.name} saved.",
    )


# --- queues ---------------------------------------------------------------------------


def _type_names() -> list[str]:
    return list(capacity_selectors.instance_types().values_list("name", flat=True))


@admin_only
def queue_new(request: HttpRequest) -> HttpResponse:
    form = QueueForm(request.POST or None, type_names=_type_names())

    def create(data: dict[str, Any]) -> Any:
        return capacity_services.queue_create(
            actor=request.user,
            name=data["name"],
            description=data["description"],
            executor=data["executor"],
            capacity=form.capacity_map(),
            reason=_reason(data),
        )

    return _form_page(
        request,
        form,
        create,
        template="administration/queue_form.html",
        context={"queue": None},
        done=lambda queue: f"Queue {queue.name} created.",
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

    return _form_page(
        request,
        form,
        update,
        template="administration/queue_form.html",
        context={"queue": queue},
        done=lambda saved: f"Queue {saved.name} saved.",
    )


# --- teams and memberships ------------------------------------------------------------


@admin_only
def team_new(request: HttpRequest) -> HttpResponse:
    form = TeamForm(request.POST or None, usernames=sel.usernames())

    def create(data: dict[str, Any]) -> Any:
        return team_services.team_create(
            actor=request.user,
            name=data["name"],
            description=data["description"],
            leads=list(data["leads"]),
            members=list(data["members"]),
            reason=_reason(data),
        )

    return _form_page(
        request,
        form,
        create,
        template="administration/team_form.html",
        context={"team": None},
        done=lambda team: f"Team {team.name} created.",
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

    return _form_page(
        request,
        form,
        update,
        template="administration/team_form.html",
        context={"team": team},
        done=lambda saved: f"Team {saved.name} saved.",
    )


# --- shares ---------------------------------------------------------------------------


@admin_only
def share_new(request: HttpRequest) -> HttpResponse:
    """A new share; it is edited afterwards in the share editor (with its preview)."""
    queues = [(q.pk, q.name) for q in capacity_selectors.queues()]
    teams = [(t.pk, t.name) for t in sel.teams()]
    initial = {"policy": "RESERVE", "enabled": True}
    if request.GET.get("queue", "").isdecimal():
        initial["queue"] = int(request.GET["queue"])
    form = ShareCreateForm(
        request.POST or None,
        initial=initial,
        type_names=_type_names(),
        queues=queues,
        teams=teams,
    )

    def create(data: dict[str, Any]) -> Any:
        return share_services.share_create(
            actor=request.user,
            queue=data["queue"],
            team=data["team"],
            name=data["name"],
            reason=_reason(data),
            **form.changes(),
        )

    policy = form["policy"].value() or "RESERVE"
    return _form_page(
        request,
        form,
        create,
        template="administration/share_form.html",
        context={"borrow_enabled": policy == "LEND_AND_BORROW"},
        done=lambda share: f"Share {share.name} created.",
        then=lambda share: redirect("web:share", share_id=share.pk),
    )


# --- users and roles ------------------------------------------------------------------


def _team_choices() -> list[tuple[int, str]]:
    return [(t.pk, t.name) for t in sel.teams()]


@admin_only
def user_new(request: HttpRequest) -> HttpResponse:
    form = UserForm(request.POST or None, teams=_team_choices())

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

    return _form_page(
        request,
        form,
        create,
        template="administration/user_form.html",
        context={"person": None},
        done=lambda user: f"User {user.get_username()} created.",
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

    def update(data: dict[str, Any]) -> Any:
        changes = {f: data[f] for f in ("email", "first_name", "last_name")}
        if data["password"]:
            changes["password"] = data["password"]
        saved = user_services.user_edit(
            actor=request.user,
            user=person.pk,
            changes=changes,
            roles=list(data["roles"]),
            active=bool(data["active"]),
            reason=_reason(data),
            lead_of=list(data["lead_of"]),
            member_of=list(data["member_of"]),
        )
        if "password" in changes and saved.pk == request.user.pk:
            # An admin's own new password: this session stays, their other ones end.
            update_session_auth_hash(request, cast(Any, saved))
        return saved

    return _form_page(
        request,
        form,
        update,
        template="administration/user_form.html",
        context={"person": person, "described": described},
        done=lambda saved: f"User {saved.get_username()} saved.",
    )
