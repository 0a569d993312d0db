"""Test data builders. They write models directly: they set up a world, they are not users."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from governance import models as m
from governance.roles import ADMIN_GROUP, REVIEWER_GROUP

User = get_user_model()


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")

    @factory.post_generation
    def password(self, create: bool, extracted: str | None, **kwargs: Any) -> None:
        self.set_password(extracted or "pw")
        if create:
            self.save(update_fields=["password"])


def make_admin(username: str = "admin") -> Any:
    user = UserFactory(username=username)
    user.groups.add(Group.objects.get_or_create(name=ADMIN_GROUP)[0])
    return user


def make_reviewer(username: str = "reviewer") -> Any:
    user = UserFactory(username=username)
    user.groups.add(Group.objects.get_or_create(name=REVIEWER_GROUP)[0])
    return user


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = m.Team
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"team-{n}")


def make_lead(team: m.Team, username: str | None = None) -> Any:
    user = UserFactory(username=username or f"lead-{team.name}")
    m.Membership.objects.get_or_create(team=team, user=user, defaults={"role": "lead"})
    return user


def make_member(team: m.Team, username: str | None = None) -> Any:
    user = UserFactory(username=username or f"member-{team.name}")
    m.Membership.objects.get_or_create(team=team, user=user, defaults={"role": "member"})
    return user


class InstanceTypeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = m.InstanceType
        django_get_or_create = ("name",)

    name = "ml.g5.xlarge"
    accelerated = True
    accelerators = 1
    speed = 1.0
    hourly_price = 1.41


class JobQueueFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = m.JobQueue

    name = factory.Sequence(lambda n: f"queue-{n}")


def make_queue(name: str = "q", capacity: dict[str, int] | None = None) -> m.JobQueue:
    queue = m.JobQueue.objects.create(name=name)
    for type_name, count in (capacity or {"ml.g5.xlarge": 3}).items():
        itype = InstanceTypeFactory(name=type_name)
        m.QueueCapacity.objects.create(queue=queue, instance_type=itype, count=count)
    return queue


def make_share(
    queue: m.JobQueue,
    team: m.Team,
    name: str = "share",
    limits: dict[str, int] | None = None,
    **fields: Any,
) -> m.Share:
    share = m.Share.objects.create(queue=queue, team=team, name=name, **fields)
    for type_name, count in (limits or {"ml.g5.xlarge": 1}).items():
        m.ShareLimit.objects.create(
            share=share, instance_type=InstanceTypeFactory(name=type_name), count=count
        )
    return share


def field_values(obj: Any, *, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Every stored field of a model instance by attribute name (but ``skip``): what a
    read built without the ORM is compared with, field for field."""
    return {
        f.attname: getattr(obj, f.attname)
        for f in obj._meta.concrete_fields
        if f.attname not in skip
    }


def make_job(share: m.Share, submitter: Any, **fields: Any) -> m.Job:
    fields.setdefault("name", "job")
    fields.setdefault("preferences", [{"instance_type": "ml.g5.xlarge", "count": 1}])
    fields.setdefault("submitted_at", timezone.now())
    return m.Job.objects.create(queue=share.queue, share=share, submitter=submitter, **fields)


def make_bands() -> dict[str, m.PriorityDefinition]:
    """Four bands: low (members), normal (leads), urgent (admins), critical (nobody)."""
    bands = {}
    for name, low, high, usable_by in (
        ("low", 0, 99, ["member", "lead"]),
        ("normal", 100, 499, ["lead"]),
        ("urgent", 500, 999, ["admin"]),
        ("critical", 1000, 9999, []),
    ):
        bands[name] = m.PriorityDefinition.objects.create(
            name=name, min_priority=low, max_priority=high, usable_by=usable_by
        )
    return bands


def make_world() -> Any:
    """Two teams in one queue, one share each, bands, and one user per role.

    Team ``red`` has share ``red`` (2 x ml.g5.xlarge, 1 x ml.p4d.24xlarge); team ``blue``
    has share ``blue``. Users: red_lead, red_member, blue_lead, reviewer, admin, outsider.
    """
    from types import SimpleNamespace

    queue = make_queue("main", {"ml.g5.xlarge": 4, "ml.p4d.24xlarge": 2})
    red = TeamFactory(name="red")
    blue = TeamFactory(name="blue")
    red_share = make_share(queue, red, "red", {"ml.g5.xlarge": 2, "ml.p4d.24xlarge": 1})
    blue_share = make_share(queue, blue, "blue", {"ml.g5.xlarge": 2})
    return SimpleNamespace(
        queue=queue,
        red=red,
        blue=blue,
        red_share=red_share,
        blue_share=blue_share,
        red_lead=make_lead(red, "red_lead"),
        red_member=make_member(red, "red_member"),
        blue_lead=make_lead(blue, "blue_lead"),
        reviewer=make_reviewer("reviewer"),
        admin=make_admin("admin"),
        outsider=UserFactory(username="outsider"),
        bands=make_bands(),
    )


ROLE_NAMES = ("anonymous", "member", "own_lead", "other_lead", "reviewer", "admin")


def make_role_user(role: str, team: m.Team) -> Any:
    """One user per permission-matrix role relative to ``team`` (None for anonymous):
    member and own_lead belong to ``team``; other_lead leads a different team."""
    if role == "anonymous":
        return None
    if role == "member":
        return make_member(team, "matrix_member")
    if role == "own_lead":
        return make_lead(team, "matrix_lead")
    if role == "other_lead":
        return make_lead(TeamFactory(name="matrix-other-team"), "matrix_other_lead")
    if role == "reviewer":
        return make_reviewer("matrix_reviewer")
    if role == "admin":
        return make_admin("matrix_admin")
    raise ValueError(role)


def make_lending_world(capacity: int, lenders: dict[str, int], runs: dict[str, int]) -> Any:
    """One queue of ``capacity`` x ml.g5.xlarge, one team and its lead; LEND shares named
    by ``lenders`` (name -> limit); LEND_AND_BORROW shares (limit 1, unlimited borrowing)
    named by ``runs``, each with one job of that many instances (``<name>-run``, ten days
    of work) submitted ten minutes ago and started by a cycle then. The shares are
    attributes by name (dashes as underscores); ``t0`` is when the runs started."""
    from types import SimpleNamespace

    from scheduler.cycle.run import run_cycle

    g5 = "ml.g5.xlarge"
    queue = make_queue("q", {g5: capacity})
    team = TeamFactory(name="t")
    lead = make_lead(team, "lead")
    world: dict[str, Any] = {"queue": queue, "team": team, "lead": lead}
    for name, limit in lenders.items():
        world[name.replace("-", "_")] = make_share(queue, team, name, {g5: limit}, policy="LEND")
    t0 = timezone.now() - timedelta(seconds=600)
    for name, count in runs.items():
        share = make_share(queue, team, name, {g5: 1}, policy="LEND_AND_BORROW", borrow_limit=-1)
        world[name.replace("-", "_")] = share
        make_job(
            share,
            lead,
            name=f"{name}-run",
            preferences=[{"instance_type": g5, "count": count}],
            duration=10 * 24 * 3600,
            submitted_at=t0,
        )
    run_cycle(queue.pk, now=t0)
    return SimpleNamespace(t0=t0, **world)


def make_exhausted_job(share: m.Share, submitter: Any, **fields: Any) -> m.Job:
    """A job failed by its share's preemption retry limit, through the live scheduler:
    with no retries allowed, a higher-priority job of its share preempts it once. Opens
    its decision (docs/workloads.md#decisions)."""
    from scheduler.cycle.run import run_cycle

    share.preemption_retries = 0
    share.in_share_preemption = True
    share.save(update_fields=["preemption_retries", "in_share_preemption"])
    now = timezone.now()
    fields.setdefault("name", "exhausted")
    victim = make_job(
        share, submitter, priority=1, submitted_at=now - timedelta(seconds=20), **fields
    )
    run_cycle(share.queue_id, now=now - timedelta(seconds=10))
    make_job(share, submitter, name="urgent", priority=9, submitted_at=now - timedelta(seconds=5))
    run_cycle(share.queue_id, now=now)
    victim.refresh_from_db()
    assert victim.state == m.JobState.FAILED, victim.state
    return victim


def make_decision_world() -> Any:
    """Team vision's share ``train`` (one g5 and one g6 of a queue with two of each), its
    lead, a member, another team's lead, an admin, a workload, and a job of the workload
    that its retry limit failed, with its open decision (docs/workloads.md#decisions)."""
    from types import SimpleNamespace

    queue = make_queue("q", {"ml.g5.xlarge": 2, "ml.g6.xlarge": 2})
    team = TeamFactory(name="vision")
    share = make_share(queue, team, "train", {"ml.g5.xlarge": 1, "ml.g6.xlarge": 1})
    lead = make_lead(team, "lead")
    member = make_member(team, "member")
    workload = m.Workload.objects.create(team=team, name="vision/finetune")
    job = make_exhausted_job(share, member, workload=workload, duration=600)
    return SimpleNamespace(
        queue=queue,
        team=team,
        share=share,
        lead=lead,
        member=member,
        other_lead=make_lead(TeamFactory(name="nlp"), "nlp-lead"),
        admin=make_admin(),
        workload=workload,
        job=job,
        decision=m.Decision.objects.get(job=job),
    )
