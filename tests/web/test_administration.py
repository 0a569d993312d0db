"""The admins' pages (/admin/): who may use them, that a good input is written through the
service with an audit entry carrying the reason, and that a bad one shows its messages
beside the field and stores nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from governance.models import (
    AuditEntry,
    AuditEvent,
    InstanceType,
    JobQueue,
    Membership,
    QueueCapacity,
    Share,
    Team,
)
from tests.factories import (
    TeamFactory,
    UserFactory,
    make_lead,
    make_queue,
    make_share,
    make_world,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> Any:
    return make_world()


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def field_errors(response: Any, field: str) -> list[str]:
    """The messages shown beside ``field`` (the form's own and the service's)."""
    form = response.context["form"]
    return list(form.errors.get(field, []))


def audit_count() -> int:
    return AuditEntry.objects.count()


PAGES = [
    ("web:admin", []),
    ("web:admin-type-new", []),
    ("web:admin-queue-new", []),
    ("web:admin-team-new", []),
    ("web:admin-share-new", []),
    ("web:admin-user-new", []),
]


@pytest.mark.parametrize("role", ["red_member", "red_lead", "reviewer", "outsider"])
def test_non_admins_get_403_on_every_admin_page(world: Any, role: str) -> None:
    c = client_for(getattr(world, role))
    urls = [reverse(name, args=args) for name, args in PAGES] + [
        reverse("web:admin-type", args=[InstanceType.objects.first().pk]),  # type: ignore[union-attr]
        reverse("web:admin-queue", args=[world.queue.pk]),
        reverse("web:admin-team", args=[world.red.pk]),
        reverse("web:admin-user", args=[world.red_lead.pk]),
    ]
    before = audit_count()
    for url in urls:
        assert c.get(url).status_code == 403, url
        assert c.post(url, {"name": "x", "reason": "x"}).status_code == 403, url
    assert audit_count() == before


def test_anonymous_visitors_are_sent_to_sign_in(world: Any) -> None:
    response = Client().get(reverse("web:admin"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_the_admin_section_is_in_the_navigation_for_admins_only(world: Any) -> None:
    admin_page = reverse("web:admin")
    assert f'href="{admin_page}"' in client_for(world.admin).get("/").content.decode()
    assert f'href="{admin_page}"' not in client_for(world.red_lead).get("/").content.decode()


def test_the_index_lists_everything_with_names(world: Any) -> None:
    body = client_for(world.admin).get(reverse("web:admin")).content.decode()
    for text in ("ml.g5.xlarge", "main", "red", "blue", "red_lead", "reviewer", "Simulated fleet"):
        assert text in body


# --- instance types --------------------------------------------------------------------


def type_data(**changes: Any) -> dict[str, Any]:
    data = {
        "name": "ml.g6.xlarge",
        "accelerated": "",
        "accelerators": "1",
        "speed": "1.2",
        "hourly_price": "0.8",
        "reason": "New GPUs arrived.",
    }
    data.update(changes)
    return data


def test_an_admin_creates_an_instance_type(world: Any) -> None:
    response = client_for(world.admin).post(reverse("web:admin-type-new"), type_data())
    assert response.status_code == 302
    itype = InstanceType.objects.get(name="ml.g6.xlarge")
    assert itype.accelerated  # from the family name
    entry = AuditEntry.objects.get(event_type=AuditEvent.INSTANCE_TYPE_CREATED)
    assert entry.actor == world.admin
    assert entry.reason == "New GPUs arrived."
    assert entry.after["name"] == "ml.g6.xlarge"


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"name": "ml.g5.xlarge"}, "name", "already exists"),
        ({"name": "has space"}, "name", "No spaces"),
        ({"speed": "0"}, "speed", "> 0"),
        ({"accelerators": "-1"}, "accelerators", "greater than or equal to 0"),
        ({"hourly_price": "abc"}, "hourly_price", "number"),
        ({"reason": ""}, "reason", "Say why"),
    ],
)
def test_a_bad_instance_type_shows_the_field_error_and_stores_nothing(
    world: Any, changes: dict[str, Any], field: str, words: str
) -> None:
    before_types, before_audit = InstanceType.objects.count(), audit_count()
    response = client_for(world.admin).post(reverse("web:admin-type-new"), type_data(**changes))
    assert response.status_code == 400
    assert any(words in message for message in field_errors(response, field)), field_errors(
        response, field
    )
    assert f'id="id_{field}_errors"' in response.content.decode()  # shown beside the field
    assert InstanceType.objects.count() == before_types
    assert audit_count() == before_audit


def test_an_admin_edits_an_instance_type_but_not_its_name(world: Any) -> None:
    itype = InstanceType.objects.get(name="ml.g5.xlarge")
    response = client_for(world.admin).post(
        reverse("web:admin-type", args=[itype.pk]),
        type_data(name="renamed", accelerated="yes", speed="2.5", reason="Benchmarked again."),
    )
    assert response.status_code == 302
    itype.refresh_from_db()
    assert (itype.name, itype.speed) == ("ml.g5.xlarge", 2.5)
    entry = AuditEntry.objects.get(event_type=AuditEvent.INSTANCE_TYPE_UPDATED)
    assert entry.reason == "Benchmarked again."
    assert entry.after["speed"] == 2.5


# --- queues ----------------------------------------------------------------------------


def queue_data(**changes: Any) -> dict[str, Any]:
    types = list(InstanceType.objects.order_by("name").values_list("name", flat=True))
    data: dict[str, Any] = {
        "name": "batch",
        "description": "Nightly batch.",
        "executor": "agent",
        "reason": "The batch cluster joins.",
    }
    for i, name in enumerate(types):
        data[f"cap_{i}"] = {"ml.g5.xlarge": "6"}.get(name, "")
    data.update(changes)
    return data


def test_an_admin_creates_a_queue_with_its_executor_and_capacity(world: Any) -> None:
    response = client_for(world.admin).post(reverse("web:admin-queue-new"), queue_data())
    assert response.status_code == 302
    queue = JobQueue.objects.get(name="batch")
    assert queue.executor == "agent"
    capacity = dict(
        QueueCapacity.objects.filter(queue=queue).values_list("instance_type__name", "count")
    )
    assert capacity == {"ml.g5.xlarge": 6}
    entry = AuditEntry.objects.get(event_type=AuditEvent.QUEUE_CREATED)
    assert entry.reason == "The batch cluster joins."
    assert entry.after["capacity"] == {"ml.g5.xlarge": 6}


def test_an_admin_changes_capacity_and_executor_with_a_reason(world: Any) -> None:
    url = reverse("web:admin-queue", args=[world.queue.pk])
    page = client_for(world.admin).get(url).content.decode()
    assert 'value="4"' in page  # the current capacity is filled in
    types = list(InstanceType.objects.order_by("name").values_list("name", flat=True))
    data = queue_data(name="main", executor="agent", reason="Two more g5 arrived.")
    for i, name in enumerate(types):
        data[f"cap_{i}"] = {"ml.g5.xlarge": "6", "ml.p4d.24xlarge": "2"}.get(name, "")
    assert client_for(world.admin).post(url, data).status_code == 302
    changed = AuditEntry.objects.get(event_type=AuditEvent.CAPACITY_CHANGED)
    assert changed.before["capacity"]["ml.g5.xlarge"] == 4
    assert changed.after["capacity"]["ml.g5.xlarge"] == 6
    assert changed.reason == "Two more g5 arrived."
    updated = AuditEntry.objects.get(event_type=AuditEvent.QUEUE_UPDATED)
    assert updated.after["executor"] == "agent"


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"name": "MAIN"}, "name", "already exists"),
        ({"executor": "kubernetes"}, "executor", "valid choice"),
        ({"cap_0": "-2"}, "cap_0", "greater than or equal to 0"),
        ({"cap_0": "100001"}, "cap_0", "less than or equal to 100000"),
        ({"reason": " "}, "reason", "Say why"),
    ],
)
def test_a_bad_queue_shows_the_field_error_and_stores_nothing(
    world: Any, changes: dict[str, Any], field: str, words: str
) -> None:
    before_queues, before_audit = JobQueue.objects.count(), audit_count()
    response = client_for(world.admin).post(reverse("web:admin-queue-new"), queue_data(**changes))
    assert response.status_code == 400
    assert any(words in m for m in field_errors(response, field)), field_errors(response, field)
    assert JobQueue.objects.count() == before_queues
    assert audit_count() == before_audit


def test_removing_a_type_a_share_uses_is_refused_beside_capacity(world: Any) -> None:
    url = reverse("web:admin-queue", args=[world.queue.pk])
    types = list(InstanceType.objects.order_by("name").values_list("name", flat=True))
    data = queue_data(name="main", reason="Drop p4d.")
    for i, name in enumerate(types):
        data[f"cap_{i}"] = {"ml.g5.xlarge": "4"}.get(name, "")
    before = audit_count()
    response = client_for(world.admin).post(url, data)
    assert response.status_code == 400
    assert any("ml.p4d.24xlarge cannot be removed" in m for m in field_errors(response, "capacity"))
    assert 'id="id_capacity_errors"' in response.content.decode()
    assert QueueCapacity.objects.filter(queue=world.queue).count() == 2
    assert audit_count() == before


# --- teams and memberships -------------------------------------------------------------


def test_an_admin_creates_a_team_with_its_lead_and_members(world: Any) -> None:
    response = client_for(world.admin).post(
        reverse("web:admin-team-new"),
        {
            "name": "green",
            "description": "",
            "leads": ["outsider"],
            "members": ["red_member"],
            "reason": "New team for speech.",
        },
    )
    assert response.status_code == 302
    team = Team.objects.get(name="green")
    roles = dict(Membership.objects.filter(team=team).values_list("user__username", "role"))
    assert roles == {"outsider": "lead", "red_member": "member"}
    entry = AuditEntry.objects.get(event_type=AuditEvent.TEAM_CREATED)
    assert entry.after["leads"] == ["outsider"] and entry.reason == "New team for speech."


def test_an_admin_changes_a_teams_membership(world: Any) -> None:
    url = reverse("web:admin-team", args=[world.red.pk])
    response = client_for(world.admin).post(
        url,
        {"name": "red", "leads": ["red_lead", "outsider"], "members": [], "reason": "Reorg."},
    )
    assert response.status_code == 302
    entry = AuditEntry.objects.get(event_type=AuditEvent.MEMBERSHIP_CHANGED)
    assert entry.before == {"leads": ["red_lead"], "members": ["red_member"]}
    assert entry.after == {"leads": ["outsider", "red_lead"], "members": []}
    assert entry.reason == "Reorg."


def test_a_bad_team_shows_the_field_error_and_stores_nothing(world: Any) -> None:
    before_teams, before_audit = Team.objects.count(), audit_count()
    c = client_for(world.admin)
    clash = c.post(reverse("web:admin-team-new"), {"name": "Red", "reason": "x"})
    assert clash.status_code == 400
    assert any("already exists" in m for m in field_errors(clash, "name"))
    both = c.post(
        reverse("web:admin-team-new"),
        {"name": "green", "leads": ["outsider"], "members": ["outsider"], "reason": "x"},
    )
    assert both.status_code == 400
    assert any("both lead and member" in m for m in field_errors(both, "members"))
    unknown = c.post(
        reverse("web:admin-team-new"), {"name": "green", "leads": ["nobody"], "reason": "x"}
    )
    assert unknown.status_code == 400
    assert any("valid choice" in m for m in field_errors(unknown, "leads"))
    assert Team.objects.count() == before_teams
    assert audit_count() == before_audit


# --- shares ----------------------------------------------------------------------------


def share_data(world: Any, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "queue": str(world.queue.pk),
        "team": str(world.blue.pk),
        "name": "blue-batch",
        "policy": "LEND_AND_BORROW",
        "borrow_limit": "100",
        "limit_type_0": "ml.p4d.24xlarge",
        "limit_count_0": "1",
        "preemption_retries": "",
        "enabled": "on",
        "reason": "Blue needs p4d for its batch runs.",
    }
    data.update(changes)
    return data


def test_an_admin_creates_a_share(world: Any) -> None:
    index = client_for(world.admin).get(reverse("web:admin")).content.decode()
    assert f'href="{reverse("web:admin-share-new")}?queue={world.queue.pk}"' in index
    chosen = client_for(world.admin).get(reverse("web:admin-share-new"), {"queue": world.queue.pk})
    assert f'<option value="{world.queue.pk}" selected>main</option>' in chosen.content.decode()
    form = client_for(world.admin).get(reverse("web:admin-share-new")).content.decode()
    assert 'aria-label="Type 1"' in form and 'aria-label="Count 5"' in form
    response = client_for(world.admin).post(reverse("web:admin-share-new"), share_data(world))
    assert response.status_code == 302
    share = Share.objects.get(name="blue-batch")
    assert response["Location"] == reverse("web:share", args=[share.pk])
    assert (share.team, share.policy, share.borrow_limit) == (world.blue, "LEND_AND_BORROW", 100)
    entry = AuditEntry.objects.get(event_type=AuditEvent.SHARE_CREATED, share_id=share.pk)
    assert entry.after["limits"] == {"ml.p4d.24xlarge": 1}
    assert entry.reason == "Blue needs p4d for its batch runs."


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"name": "red"}, "name", "already has a share named"),
        ({"limit_type_0": "ml.g6.xlarge"}, "limit_type_0", "valid choice"),
        ({"limit_count_0": "-3"}, "limit_count_0", "a count of 0 or more"),
        ({"queue": ""}, "queue", "required"),
        ({"reason": ""}, "reason", "Say why"),
    ],
)
def test_a_bad_share_shows_the_field_error_and_stores_nothing(
    world: Any, changes: dict[str, Any], field: str, words: str
) -> None:
    before_shares, before_audit = Share.objects.count(), audit_count()
    response = client_for(world.admin).post(
        reverse("web:admin-share-new"), share_data(world, **changes)
    )
    assert response.status_code == 400
    assert any(words in m for m in field_errors(response, field)), dict(
        response.context["form"].errors
    )
    assert Share.objects.count() == before_shares
    assert audit_count() == before_audit


# --- users and roles -------------------------------------------------------------------


def test_an_admin_creates_a_reviewer(world: Any) -> None:
    response = client_for(world.admin).post(
        reverse("web:admin-user-new"),
        {
            "username": "rita",
            "email": "rita@example.com",
            "first_name": "Rita",
            "last_name": "",
            "password": "a-long-enough-pass-phrase",
            "roles": ["reviewer"],
            "reason": "Rita reviews exceptions from now on.",
        },
    )
    assert response.status_code == 302
    rita = get_user_model().objects.get(username="rita")
    form = client_for(world.admin).get(reverse("web:admin-user", args=[rita.pk]))
    assert 'autocomplete="new-password"' in form.content.decode()  # no autofilled password
    assert rita.check_password("a-long-enough-pass-phrase")
    entry = AuditEntry.objects.get(event_type=AuditEvent.USER_CREATED, subject_id=str(rita.pk))
    assert entry.after["roles"] == ["reviewer"]
    assert entry.reason == "Rita reviews exceptions from now on."
    assert "password" not in str(entry.after)


def test_an_admin_changes_roles_and_deactivates_in_one_save(world: Any) -> None:
    url = reverse("web:admin-user", args=[world.red_member.pk])
    page = client_for(world.admin).get(url).content.decode()
    assert f'<option value="{world.red.pk}" selected>red</option>' in page  # member of red
    response = client_for(world.admin).post(
        url,
        {
            "email": "",
            "first_name": "",
            "last_name": "",
            "password": "",
            "roles": ["agent"],
            "member_of": [str(world.red.pk)],
            "reason": "Now runs the cluster agent only.",
        },
    )
    assert response.status_code == 302
    assert not AuditEntry.objects.filter(event_type=AuditEvent.MEMBERSHIP_CHANGED).exists()
    world.red_member.refresh_from_db()
    assert not world.red_member.is_active
    roles = AuditEntry.objects.get(event_type=AuditEvent.USER_ROLES_CHANGED)
    assert (roles.before, roles.after) == ({"roles": []}, {"roles": ["agent"]})
    assert roles.reason == "Now runs the cluster agent only."
    assert AuditEntry.objects.filter(event_type=AuditEvent.USER_DEACTIVATED).count() == 1


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"username": "bad name!"}, "username", "Enter a valid username"),
        ({"username": "RED_LEAD"}, "username", "already exists"),
        ({"email": "not-an-email"}, "email", "valid email"),
        ({"password": "123"}, "password", "too short"),
        ({"roles": ["superuser"]}, "roles", "valid choice"),
        ({"reason": ""}, "reason", "Say why"),
    ],
)
def test_a_bad_user_shows_the_field_error_and_stores_nothing(
    world: Any, data: dict[str, Any], field: str, words: str
) -> None:
    before_users, before_audit = get_user_model().objects.count(), audit_count()
    response = client_for(world.admin).post(
        reverse("web:admin-user-new"), {"username": "newbie", "reason": "Joins.", **data}
    )
    assert response.status_code == 400
    assert any(words in m for m in field_errors(response, field)), dict(
        response.context["form"].errors
    )
    assert get_user_model().objects.count() == before_users
    assert audit_count() == before_audit


def test_an_admin_cannot_drop_their_own_admin_role_and_nothing_is_half_saved(world: Any) -> None:
    url = reverse("web:admin-user", args=[world.admin.pk])
    before = audit_count()
    response = client_for(world.admin).post(
        url,
        {"email": "new@example.com", "roles": [], "active": "on", "reason": "Stepping down."},
    )
    assert response.status_code == 400
    assert any("own admin role" in m for m in field_errors(response, "roles"))
    world.admin.refresh_from_db()
    assert world.admin.email == ""  # the email change was rolled back with the refusal
    assert audit_count() == before


def test_an_admin_changing_their_own_password_keeps_this_session_only(world: Any) -> None:
    url = reverse("web:admin-user", args=[world.admin.pk])
    here, elsewhere = client_for(world.admin), client_for(world.admin)
    assert elsewhere.get("/").status_code == 200
    response = here.post(
        url,
        {
            "password": "a-new-long-passphrase",
            "roles": ["admin"],
            "active": "on",
            "reason": "Rotating my password.",
        },
    )
    assert response.status_code == 302
    assert here.get("/").status_code == 200
    assert elsewhere.get("/").status_code == 302  # signed out


# --- one's own API tokens --------------------------------------------------------------


@pytest.mark.parametrize("role", ["red_member", "admin"])
def test_everyone_reaches_their_tokens_and_a_bad_expiry_shows_beside_its_field(
    world: Any, role: str
) -> None:
    c = client_for(getattr(world, role))
    assert 'href="/account/tokens/"' in c.get("/").content.decode()  # in the top bar
    before = audit_count()
    response = c.post(reverse("web:tokens"), {"hours": "0"})
    assert response.status_code == 400
    assert 'id="id_hours_errors"' in response.content.decode()
    assert audit_count() == before
    assert c.post(reverse("web:tokens"), {"hours": "1"}).status_code == 200
    assert AuditEntry.objects.filter(
        event_type=AuditEvent.TOKEN_CREATED, actor=getattr(world, role)
    ).exists()


def test_the_index_costs_the_same_queries_however_much_there_is(world: Any) -> None:
    """Each list is one or two reads (prefetched), not one per row."""
    c = client_for(world.admin)
    c.get(reverse("web:admin"))  # warm the session and caches
    with CaptureQueriesContext(connection) as few:
        assert c.get(reverse("web:admin")).status_code == 200
    for i in range(4):
        team = TeamFactory(name=f"more-{i}")
        make_lead(team, f"more-lead-{i}")
        UserFactory(username=f"more-user-{i}")
        queue = make_queue(f"more-queue-{i}", {"ml.g5.xlarge": 1})
        make_share(queue, team, f"more-share-{i}", {"ml.g5.xlarge": 1})
    with CaptureQueriesContext(connection) as many:
        body = c.get(reverse("web:admin")).content.decode()
    assert "more-share-3" in body and "more-lead-3" in body
    assert len(many) == len(few)


def test_team_roles_are_given_from_the_users_page(world: Any) -> None:
    """A lead of blue who stays a member of red: each team changed is its own entry."""
    url = reverse("web:admin-user", args=[world.red_member.pk])
    response = client_for(world.admin).post(
        url,
        {
            "lead_of": [str(world.blue.pk)],
            "member_of": [str(world.red.pk)],
            "active": "on",
            "reason": "Leads blue from Monday.",
        },
    )
    assert response.status_code == 302
    roles = dict(Membership.objects.filter(user=world.red_member).values_list("team__name", "role"))
    assert roles == {"blue": "lead", "red": "member"}
    [entry] = AuditEntry.objects.filter(event_type=AuditEvent.MEMBERSHIP_CHANGED)
    assert entry.team_id == world.blue.pk and entry.reason == "Leads blue from Monday."
    assert entry.after == {"leads": ["blue_lead", "red_member"], "members": []}


def test_a_new_user_joins_teams_and_a_refusal_leaves_no_user(world: Any) -> None:
    c = client_for(world.admin)
    before_users, before_audit = get_user_model().objects.count(), audit_count()
    both = c.post(
        reverse("web:admin-user-new"),
        {
            "username": "newbie",
            "lead_of": [str(world.red.pk)],
            "member_of": [str(world.red.pk)],
            "reason": "Joins red.",
        },
    )
    assert both.status_code == 400
    assert any("not both" in m for m in field_errors(both, "member_of"))
    assert get_user_model().objects.count() == before_users
    assert audit_count() == before_audit
    ok = c.post(
        reverse("web:admin-user-new"),
        {"username": "newbie", "member_of": [str(world.red.pk)], "reason": "Joins red."},
    )
    assert ok.status_code == 302
    newbie = get_user_model().objects.get(username="newbie")
    assert Membership.objects.get(user=newbie).team == world.red
    assert AuditEntry.objects.filter(
        event_type=AuditEvent.MEMBERSHIP_CHANGED, team_id=world.red.pk, reason="Joins red."
    ).exists()


def test_bad_edits_of_a_type_and_a_team_show_field_errors_and_change_nothing(world: Any) -> None:
    itype = InstanceType.objects.get(name="ml.g5.xlarge")
    c = client_for(world.admin)
    before = audit_count()
    bad_type = c.post(
        reverse("web:admin-type", args=[itype.pk]),
        type_data(name="ml.g5.xlarge", accelerated="yes", speed="5000", reason="Faster?"),
    )
    assert bad_type.status_code == 400
    assert any("less than or equal to 1000" in m for m in field_errors(bad_type, "speed"))
    itype.refresh_from_db()
    assert itype.speed == 1.0
    bad_team = c.post(
        reverse("web:admin-team", args=[world.red.pk]),
        {"name": "blue", "leads": ["red_lead"], "members": ["red_member"], "reason": "Merge."},
    )
    assert bad_team.status_code == 400
    assert any("already exists" in m for m in field_errors(bad_team, "name"))
    world.red.refresh_from_db()
    assert world.red.name == "red"
    assert audit_count() == before
