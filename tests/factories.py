"""Test data builders. They write models directly: they set up a world, they are not users."""

from __future__ import annotations

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

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", "pw")


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


def make_job(share: m.Share, submitter: Any, **fields: Any) -> m.Job:
    fields.setdefault("name", "job")
    fields.setdefault("preferences", [{"instance_type": "ml.g5.xlarge", "count": 1}])
    fields.setdefault("submitted_at", timezone.now())
    return m.Job.objects.create(queue=share.queue, share=share, submitter=submitter, **fields)
