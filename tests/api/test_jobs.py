"""Jobs API: fields, filters, each rule's 400 naming the field, the permission matrix."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from governance.models import Job, JobState
from tests.factories import make_job, make_world

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
P4 = "ml.p4d.24xlarge"

# Each role of the permission matrix, as the attribute of the test world (None: anonymous).
ROLES = {
    "anonymous": None,
    "member": "red_member",
    "lead_own": "red_lead",
    "lead_other": "blue_lead",
    "reviewer": "reviewer",
    "admin": "admin",
}


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def w() -> Any:
    return make_world()


def client_for(w: Any, role: str) -> APIClient:
    client = APIClient()
    attr = ROLES[role]
    if attr is not None:
        client.force_authenticate(getattr(w, attr))
    return client


def body(w: Any, **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "share": w.red_share.pk,
        "name": "train",
        "preferences": [{"instance_type": G5, "count": 1}],
    }
    data.update(fields)
    return data


def test_submit_and_read_back(w: Any) -> None:
    client = client_for(w, "member")
    response = client.post(
        "/api/jobs/",
        body(
            w,
            queue=w.queue.pk,
            preferences=[{"instance_type": P4}, {"instance_type": G5}],
            count=1,
            priority=5,
            kind="processing",
            max_pending=600,
            checkpoint_interval=60,
            duration=300,
        ),
        format="json",
    )
    assert response.status_code == 201, response.json()
    data = response.json()
    assert set(data) >= {
        "id", "queue", "share", "name", "kind", "priority", "preferences", "count",
        "max_pending", "checkpoint_interval", "duration", "state", "instance_type",
        "preference", "preemptions", "submitted_at", "started_at", "finished_at",
        "submitter", "borrowed", "events",
    }  # fmt: skip
    assert data["preferences"] == [
        {"instance_type": P4, "count": 1},
        {"instance_type": G5, "count": 1},
    ]
    assert data["state"] == "PENDING"
    assert data["submitter"] == "red_member"
    assert data["instance_type"] is None
    assert [e["type"] for e in data["events"]] == ["submitted"]
    detail = client.get(f"/api/jobs/{data['id']}/").json()
    assert detail["events"][0]["message"]
    listed = client.get("/api/jobs/").json()
    assert listed["count"] == 1
    assert "events" not in listed["results"][0]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"share": 999999}, "share"),
        ({"queue": 999999}, "queue"),
        ({"preferences": []}, "preferences"),
        ({"preferences": [{"instance_type": G5, "count": 1}] * 6}, "preferences"),
        ({"preferences": [{"instance_type": G5, "count": 1}] * 2}, "preferences"),
        ({"preferences": [{"instance_type": "ml.nope", "count": 1}]}, "preferences"),
        ({"preferences": [{"instance_type": G5, "count": 0}]}, "preferences"),
        ({"preferences": [{"instance_type": G5, "count": 1}], "count": 1}, "count"),
        ({"preferences": [{"instance_type": G5}]}, "count"),
        (
            {"preferences": [{"instance_type": G5, "count": 1}, {"instance_type": P4}]},
            "preferences",
        ),
        ({"priority": 10000}, "priority"),
        ({"priority": -1}, "priority"),
        ({"priority": 100}, "priority"),  # above the member's band
        ({"priority": "high"}, "priority"),
        ({"max_pending": 0}, "max_pending"),
        ({"checkpoint_interval": 0}, "checkpoint_interval"),
        ({"duration": -1}, "duration"),
        ({"name": ""}, "name"),
        ({"kind": "gaming"}, "kind"),
    ],
)
def test_submit_rule_400_names_field(w: Any, fields: dict[str, Any], field: str) -> None:
    response = client_for(w, "member").post("/api/jobs/", body(w, **fields), format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert not Job.objects.exists()


def test_disabled_share_400(w: Any) -> None:
    w.red_share.enabled = False
    w.red_share.save()
    response = client_for(w, "member").post("/api/jobs/", body(w), format="json")
    assert response.status_code == 400
    assert "share" in response.json()


def test_type_message_lists_share_types(w: Any) -> None:
    response = client_for(w, "member").post(
        "/api/jobs/", body(w, preferences=[{"instance_type": "ml.nope", "count": 1}]), format="json"
    )
    message = response.json()["preferences"][0]
    assert "ml.nope" in message and G5 in message and P4 in message


def test_band_message_names_highest_and_band(w: Any) -> None:
    response = client_for(w, "lead_own").post("/api/jobs/", body(w, priority=600), format="json")
    message = response.json()["priority"][0]
    assert "499" in message and "urgent" in message and "normal" in message


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("anonymous", {401, 403}),
        ("member", {201}),
        ("lead_own", {201}),
        ("lead_other", {403}),
        ("reviewer", {403}),
        ("admin", {201}),
    ],
)
def test_submit_permissions(w: Any, role: str, expected: set[int]) -> None:
    response = client_for(w, role).post("/api/jobs/", body(w), format="json")
    assert response.status_code in expected
    assert Job.objects.count() == (1 if 201 in expected else 0)


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("anonymous", {401, 403}),
        ("member", {200}),  # the submitter
        ("lead_own", {200}),
        ("lead_other", {403}),
        ("reviewer", {403}),
        ("admin", {200}),
    ],
)
def test_reprioritise_permissions(w: Any, role: str, expected: set[int]) -> None:
    job = make_job(w.red_share, w.red_member, priority=1)
    response = client_for(w, role).patch(f"/api/jobs/{job.pk}/", {"priority": 50}, format="json")
    assert response.status_code in expected
    job.refresh_from_db()
    assert job.priority == (50 if 200 in expected else 1)
    if 200 in expected:
        assert response.json()["priority"] == 50
        assert response.json()["events"][-1]["type"] == "reprioritised"


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("anonymous", {401, 403}),
        ("member", {200}),  # the submitter
        ("lead_own", {200}),
        ("lead_other", {403}),
        ("reviewer", {403}),
        ("admin", {200}),
    ],
)
def test_cancel_permissions(w: Any, role: str, expected: set[int]) -> None:
    job = make_job(w.red_share, w.red_member)
    response = client_for(w, role).post(f"/api/jobs/{job.pk}/cancel/", {}, format="json")
    assert response.status_code in expected
    job.refresh_from_db()
    assert job.state == (JobState.CANCELLED if 200 in expected else JobState.PENDING)


def test_patch_only_priority(w: Any) -> None:
    job = make_job(w.red_share, w.red_member, priority=1)
    response = client_for(w, "admin").patch(
        f"/api/jobs/{job.pk}/", {"priority": 2, "name": "x"}, format="json"
    )
    assert response.status_code == 400
    assert "name" in response.json()
    job.refresh_from_db()
    assert (job.priority, job.name) == (1, "job")


def test_patch_above_band_400(w: Any) -> None:
    job = make_job(w.red_share, w.red_member, priority=1)
    response = client_for(w, "member").patch(
        f"/api/jobs/{job.pk}/", {"priority": 200}, format="json"
    )
    assert response.status_code == 400
    assert "priority" in response.json()


def test_put_not_allowed(w: Any) -> None:
    job = make_job(w.red_share, w.red_member)
    response = client_for(w, "admin").put(f"/api/jobs/{job.pk}/", {"priority": 2}, format="json")
    assert response.status_code == 405


def test_cancel_finished_400_names_state(w: Any) -> None:
    job = make_job(w.red_share, w.red_member, state=JobState.SUCCEEDED)
    response = client_for(w, "admin").post(f"/api/jobs/{job.pk}/cancel/", {}, format="json")
    assert response.status_code == 400
    assert "state" in response.json()


def test_unknown_job_404(w: Any) -> None:
    client = client_for(w, "admin")
    assert client.get("/api/jobs/999999/").status_code == 404
    assert client.post("/api/jobs/999999/cancel/").status_code == 404
    assert client.patch("/api/jobs/999999/", {"priority": 1}, format="json").status_code == 404


def test_filters(w: Any) -> None:
    red = make_job(w.red_share, w.red_member, kind="training")
    blue = make_job(w.blue_share, w.blue_lead, kind="processing", state=JobState.RUNNING)
    client = client_for(w, "member")

    def ids(query: str) -> list[int]:
        response = client.get(f"/api/jobs/?{query}")
        assert response.status_code == 200, response.json()
        return [j["id"] for j in response.json()["results"]]

    assert ids(f"share={w.red_share.pk}") == [red.pk]
    assert ids(f"team={w.blue.pk}") == [blue.pk]
    assert set(ids(f"queue={w.queue.pk}")) == {red.pk, blue.pk}
    assert ids("state=RUNNING") == [blue.pk]
    assert ids("kind=training") == [red.pk]
    assert ids("submitter=blue_lead") == [blue.pk]
    assert ids(f"submitter={w.red_member.pk}") == [red.pk]
    assert client.get("/api/jobs/?state=NOPE").status_code == 400


def test_anonymous_reads_nothing(w: Any) -> None:
    make_job(w.red_share, w.red_member)
    assert client_for(w, "anonymous").get("/api/jobs/").status_code in {401, 403}


def test_list_without_n_plus_one(w: Any, django_assert_max_num_queries: Any) -> None:
    for _ in range(5):
        make_job(w.red_share, w.red_member)
    client = client_for(w, "member")
    with django_assert_max_num_queries(4):
        client.get("/api/jobs/")


def test_submit_answers_with_the_job_as_a_later_read_shows_it(w: Any) -> None:
    """The 201 is built from what the service returned, without re-reading the job."""
    client = client_for(w, "member")
    response = client.post("/api/jobs/", body(w, name="fresh"), format="json")
    assert response.status_code == 201, response.content
    created = response.json()
    assert [e["type"] for e in created["events"]] == ["submitted"]
    assert created == client.get(f"/api/jobs/{created['id']}/").json()


SECRET_PROGRAM = {"command": ["train.py"], "env": {"HF_TOKEN": "hf_secret"}}


@pytest.mark.parametrize(
    ("role", "sees"),
    [
        ("member", True),
        ("lead_own", True),
        ("lead_other", False),
        ("reviewer", False),
        ("admin", True),
    ],
)
def test_a_jobs_program_and_env_are_shown_only_to_its_team_and_admins(
    w: Any, role: str, sees: bool
) -> None:
    job = make_job(w.red_share, w.red_member, program=SECRET_PROGRAM)
    response = client_for(w, role).get(f"/api/jobs/{job.pk}/")
    assert response.status_code == 200
    assert response.json()["program"] == (SECRET_PROGRAM if sees else None)
    assert "hf_secret" not in str(response.content) or sees


def test_only_the_agent_holding_the_run_reads_the_program(w: Any) -> None:
    from django.contrib.auth.models import Group

    from tests.factories import UserFactory

    holder, other = UserFactory(username="agent-a"), UserFactory(username="agent-b")
    agents = Group.objects.get_or_create(name="agent")[0]
    holder.groups.add(agents)
    other.groups.add(agents)
    job = make_job(w.red_share, w.red_member, program=SECRET_PROGRAM, claimed_by=holder)
    for agent, expected in ((holder, SECRET_PROGRAM), (other, None)):
        client = APIClient()
        client.force_authenticate(agent)
        assert client.get(f"/api/jobs/{job.pk}/").json()["program"] == expected


def test_the_submitter_reads_their_program_back(w: Any) -> None:
    response = client_for(w, "member").post(
        "/api/jobs/", body(w, program=SECRET_PROGRAM), format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["program"] == SECRET_PROGRAM


def test_a_kept_serializer_shows_each_reader_their_own_view(w: Any) -> None:
    """The job's serializer is kept from request to request (``api.common.represent``):
    the member who submitted sees the program in the 201, and the reviewer reading the
    same job next on the same thread does not, nor does a reader after a failed render."""
    submitted = client_for(w, "member").post(
        "/api/jobs/", body(w, program=SECRET_PROGRAM), format="json"
    )
    assert submitted.json()["program"] == SECRET_PROGRAM
    job_id = submitted.json()["id"]
    for role, sees in (("reviewer", False), ("admin", True), ("lead_other", False)):
        shown = client_for(w, role).get(f"/api/jobs/{job_id}/").json()
        assert shown["program"] == (SECRET_PROGRAM if sees else None), role
        assert shown["id"] == job_id and shown["events"][0]["type"] == "submitted"
    other = make_job(w.red_share, w.red_member, program={"command": ["other"]})
    assert client_for(w, "member").get(f"/api/jobs/{other.pk}/").json()["program"] == {
        "command": ["other"]
    }


def test_represent_gives_what_the_serializer_gives_even_after_a_failure(w: Any) -> None:
    from governance.api.common import represent
    from governance.api.jobs import JobDetailSerializer

    job = make_job(w.red_share, w.red_member, program=SECRET_PROGRAM)
    for context in ({"program_visible": True}, {}, {"program_visible": True}):
        assert represent(JobDetailSerializer, job, context) == (
            JobDetailSerializer(job, context=context).data
        )
    with pytest.raises(AttributeError):
        represent(JobDetailSerializer, object(), {"program_visible": True})
    # The next use on this thread shows its own view, not the failed one's.
    assert represent(JobDetailSerializer, job, {})["program"] is None


def test_a_kept_parser_reads_each_body_afresh(w: Any) -> None:
    """Request bodies are parsed by a serializer kept per thread (``api.common``): a
    refused body leaves nothing behind for the next, and each says its own problems."""
    client = client_for(w, "member")
    refused = client.post("/api/jobs/", body(w, duration="long", name=""), format="json")
    assert refused.status_code == 400
    assert set(refused.json()) >= {"duration"}
    accepted = client.post("/api/jobs/", body(w, duration=60, name="second"), format="json")
    assert accepted.status_code == 201, accepted.content
    assert (accepted.json()["duration"], accepted.json()["name"]) == (60, "second")
    defaults = client.post("/api/jobs/", {"share": w.red_share.pk, "name": "bare"}, format="json")
    assert set(defaults.json()) == {"preferences"}  # only the missing list, no leftovers
    assert Job.objects.filter(name="second", duration=60, priority=0).count() == 1
