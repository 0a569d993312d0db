"""``selectors.jobs.jobs_with_share``: the read a cycle takes the jobs it admits and
completes with, built without the ORM's compiler, must give what the ORM gives."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from governance.models import InstanceType, Job, JobState
from governance.selectors.jobs import jobs_with_share
from tests.factories import field_values, make_job, make_world


def _orm(ids: list[int]) -> list[Job]:
    return list(
        Job.objects.select_related("share__team", "instance_type", "queue")
        .filter(pk__in=ids)
        .order_by("pk")
    )


@pytest.mark.django_db
def test_jobs_their_share_team_queue_and_type_are_the_orms_field_for_field() -> None:
    w = make_world()
    g5 = InstanceType.objects.get(name="ml.g5.xlarge")
    running = make_job(
        w.red_share,
        w.red_member,
        name="quoted 'name' \\",
        preferences=[{"instance_type": "ml.g5.xlarge", "count": 2, "runtime": 60}],
        program={"command": ["python", "-c", "print('hi')"], "env": {"A": 'b"c'}},
        max_cost=Decimal("3.25"),
        state=JobState.RUNNING,
        instance_type=g5,
    )
    pending = make_job(w.blue_share, w.blue_lead)  # no instance type yet
    ids = [pending.pk, running.pk, 10**9]  # in any order, one that does not exist
    found = jobs_with_share(ids)
    expected = _orm(ids)
    assert [j.pk for j in found] == [j.pk for j in expected] == sorted([pending.pk, running.pk])
    for job, orm in zip(found, expected, strict=True):
        assert field_values(job) == field_values(orm)
        assert field_values(job.share) == field_values(orm.share)
        assert field_values(job.share.team) == field_values(orm.share.team)
        assert field_values(job.queue) == field_values(orm.queue)
        if orm.instance_type is None:
            assert job.instance_type is None
        else:
            assert field_values(job.instance_type) == field_values(orm.instance_type)
        assert not job._state.adding and job._state.db == "default"
    read = {j.pk: j for j in found}[running.pk]
    assert read.program == {"command": ["python", "-c", "print('hi')"], "env": {"A": 'b"c'}}
    with CaptureQueriesContext(connection) as queries:  # the related objects are loaded
        assert read.share.team.name and read.queue.name and read.instance_type
    assert len(queries) == 0
    assert jobs_with_share([]) == []


@pytest.mark.django_db(transaction=True)
def test_lock_takes_the_jobs_rows_alone() -> None:
    """``lock``: a second transaction cannot take the jobs' rows until the first ends, but
    may still lock their share's (``FOR UPDATE OF`` the jobs only)."""
    w = make_world()
    job = make_job(w.red_share, w.red_member)
    seen: dict[str, bool] = {}

    def other() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '200ms'")
            cursor.execute(
                "SELECT 1 FROM governance_share WHERE id = %s FOR UPDATE", [w.red_share.pk]
            )
            seen["share"] = True
            try:
                with transaction.atomic():
                    cursor.execute(
                        "SELECT 1 FROM governance_job WHERE id = %s FOR UPDATE", [job.pk]
                    )
                seen["job"] = True
            except Exception:
                seen["job"] = False
        connection.close()

    with transaction.atomic():
        assert [j.pk for j in jobs_with_share([job.pk], lock=True)] == [job.pk]
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert seen == {"share": True, "job": False}
