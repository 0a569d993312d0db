"""``services.inserts.insert`` writes the row ``save()`` writes, for the models a
submission writes through it (the job, its event, its audit entry); ``insert_many`` the
rows ``bulk_create`` writes, for a cycle's events and audit entries."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, cast

import pytest
from django.db import DataError, IntegrityError, connection, transaction
from django.db.models import Model
from django.db.models.functions import Now
from django.db.models.signals import post_save, pre_save
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent, Job, JobEvent
from governance.models.audit import AppendOnlyError
from governance.services import audit, inserts
from governance.services.inserts import insert, insert_many, insert_together
from tests.factories import field_values, make_job, make_world

pytestmark = pytest.mark.django_db

# Filled by the database for each row: the key, and the audit chain's seal (at commit).
OWN = frozenset({"id", "chain", "chain_seq", "prev_hash", "hash"})


def _stored(obj: Model) -> dict[str, Any]:
    return field_values(type(obj)._default_manager.get(pk=obj.pk), skip=OWN)


def _twice(build: Any) -> tuple[Model, Model]:
    """The same object written by ``save()`` and by ``insert``."""
    saved, inserted = build(), build()
    saved.save()
    insert(inserted)
    assert inserted.pk is not None and inserted.pk != saved.pk
    assert not inserted._state.adding and inserted._state.db == "default"
    return saved, inserted


def test_a_job_with_every_kind_of_value_is_stored_as_save_stores_it() -> None:
    w = make_world()
    now = timezone.now()

    def job() -> Job:
        return Job(
            queue=w.queue,
            share=w.red_share,
            submitter=w.red_member,
            name="train 'quoted' \\ name",
            preferences=[{"instance_type": "ml.g5.xlarge", "count": 2, "runtime": 60}],
            program={"command": ["python", "-c", "print('hi')"], "env": {"A": 'b"c'}},
            max_cost=Decimal("12.50"),
            deadline=now,
            submitted_at=now,
            count=None,
        )

    saved, inserted = _twice(job)
    assert _stored(saved) == _stored(inserted)
    assert _stored(inserted)["template"] == {}  # a default, as save() gives it


def test_an_event_and_an_audit_entry_are_stored_as_save_stores_them() -> None:
    w = make_world()
    job = make_job(w.red_share, w.red_member)
    at = timezone.now()
    saved, inserted = _twice(
        lambda: JobEvent(job=job, at=at, type="submitted", message="m", data={"p": [1, None]})
    )
    assert _stored(saved) == _stored(inserted)

    def entry() -> AuditEntry:
        return audit.entry_for(
            event_type=AuditEvent.JOB_SUBMITTED,
            actor=w.red_member,
            subject=job,
            after={"priority": 3, "name": "j"},
            job_id=job.pk,
            at=at,
        )

    saved_entry, inserted_entry = _twice(entry)
    assert _stored(saved_entry) == _stored(inserted_entry)


def test_what_insert_does_not_cover_goes_to_save() -> None:
    w = make_world()
    job = make_job(w.red_share, w.red_member)
    event = JobEvent(job=job, at=Now(), type="submitted", message="m")
    insert(event)  # an expression: save() writes it
    assert JobEvent.objects.get(pk=event.pk).at is not None
    entry = audit.record(
        event_type=AuditEvent.JOB_SUBMITTED, actor=w.red_member, subject=job, job_id=job.pk
    )
    with pytest.raises(AppendOnlyError):  # an entry already written: save() refuses it
        insert(entry)


def test_the_models_a_submission_writes_take_the_built_insert(monkeypatch: Any) -> None:
    """No receiver of ``pre_save``/``post_save`` sends them to ``save()`` (the speed of a
    submission depends on it), and one connected later would: its signal is sent."""
    for model in (Job, JobEvent, AuditEntry):
        assert not pre_save.has_listeners(model) and not post_save.has_listeners(model)
    w = make_world()
    job = make_job(w.red_share, w.red_member)

    def refused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("save() was called")

    monkeypatch.setattr(JobEvent, "save", refused)
    event = JobEvent(job=job, at=timezone.now(), type="submitted", message="m")
    insert(event)
    assert JobEvent.objects.filter(pk=event.pk).exists()
    monkeypatch.undo()

    heard: list[Any] = []

    def receiver(sender: Any, instance: Any, **kwargs: Any) -> None:
        heard.append(instance)

    post_save.connect(receiver, sender=JobEvent)
    try:
        later = JobEvent(job=job, at=timezone.now(), type="submitted", message="m")
        insert(later)
    finally:
        post_save.disconnect(receiver, sender=JobEvent)
    assert heard == [later]


def test_many_events_and_entries_are_stored_as_bulk_create_stores_them() -> None:
    w = make_world()
    jobs = [make_job(w.red_share, w.red_member) for _ in range(3)]
    at = timezone.now()

    def events() -> list[JobEvent]:
        return [
            JobEvent(job=j, at=at, type="admitted", message="it's \\ fine", data={"run": i})
            for i, j in enumerate(jobs)
        ]

    def entries() -> list[AuditEntry]:
        return [
            audit.job_entry(
                event_type=AuditEvent.JOB_ADMITTED,
                actor=None,
                job=j,
                before={"state": "pending"},
                after={"state": "running", "note": 'a "quoted" word'},
                at=at,
            )
            for j in jobs
        ]

    for build in (events, entries):
        bulk, built = build(), build()
        type(bulk[0])._default_manager.bulk_create(bulk)
        insert_many(built)
        assert all(not obj._state.adding and obj.pk is not None for obj in built)
        # in the order given, each as bulk_create stored its twin
        assert [o.pk for o in built] == sorted(o.pk for o in built)
        assert [_stored(o) for o in built] == [_stored(o) for o in bulk]


def test_more_rows_than_one_statement_takes_are_all_written(monkeypatch: Any) -> None:
    monkeypatch.setattr(inserts, "MANY_ROWS", 4)
    w = make_world()
    job = make_job(w.red_share, w.red_member)
    at = timezone.now()
    built = [JobEvent(job=job, at=at, type="progress", message=str(i)) for i in range(10)]
    insert_many(built)
    stored = JobEvent.objects.filter(pk__in=[e.pk for e in built]).order_by("pk")
    assert [e.message for e in stored] == [str(i) for i in range(10)]
    insert_many([])  # nothing to write: no statement


def test_what_insert_many_does_not_cover_goes_to_bulk_create() -> None:
    w = make_world()
    job = make_job(w.red_share, w.red_member)
    built = [
        JobEvent(job=job, at=timezone.now(), type="submitted", message="m"),
        JobEvent(job=job, at=Now(), type="admitted", message="m"),  # an expression
    ]
    insert_many(built)
    assert JobEvent.objects.filter(job=job).count() == 2
    assert all(e.pk is not None for e in built)


def _submission(w: Any, job_id: int | None, entries: int = 1, now: Any = None) -> list[Model]:
    """A job (with the key it will have, when given), its event and ``entries`` audit
    entries, not yet written: what a submission writes."""
    now = now or timezone.now()
    job = Job(
        id=job_id,
        queue=w.queue,
        share=w.red_share,
        submitter=w.red_member,
        name="together 'quoted'",
        preferences=[{"instance_type": "ml.g5.xlarge", "count": 1}],
        program={"command": ["true"]},
        max_cost=Decimal("3.50"),
        submitted_at=now,
    )
    event = JobEvent(job=job, at=now, type="submitted", message="m", data={"priority": 0})
    built = [
        audit.job_entry(
            event_type=AuditEvent.JOB_SUBMITTED,
            actor=w.red_member,
            job=job,
            after={"id": job_id, "n": n},
            at=now,
        )
        for n in range(entries)
    ]
    return [job, event, *built]


def _next_job_id() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval(pg_get_serial_sequence('governance_job', 'id'))")
        return int(cursor.fetchone()[0])


def test_rows_of_several_models_are_written_in_one_statement_as_save_writes_them() -> None:
    w = make_world()
    now = timezone.now()
    together = _submission(w, _next_job_id(), entries=2, now=now)
    with CaptureQueriesContext(connection) as queries:
        insert_together(together)
    assert len(queries) == 1
    saved = _submission(w, _next_job_id(), entries=2, now=now)
    for obj in saved:
        obj.save(force_insert=True)
    naming_the_job = {"job_id", "subject_id", "subject_repr", "after"}
    for mine, theirs in zip(together, saved, strict=True):
        assert not mine._state.adding and mine.pk is not None
        stored = _stored(mine)
        assert {k: v for k, v in stored.items() if k not in naming_the_job} == {
            k: v for k, v in _stored(theirs).items() if k not in naming_the_job
        }
    job, event, entry = together[0], together[1], together[2]
    assert _stored(event)["job_id"] == job.pk
    assert _stored(entry)["subject_id"] == str(job.pk) and _stored(entry)["job_id"] == job.pk
    # A model's rows keep their order: the keys follow it, and the seal links them in it.
    first, second = (AuditEntry.objects.get(pk=e.pk) for e in together[2:])
    assert first.pk < second.pk
    assert [
        e.after["n"] for e in AuditEntry.objects.filter(job_id=together[0].pk).order_by("id")
    ] == [0, 1]


def test_a_row_the_database_refuses_leaves_none_of_the_others() -> None:
    w = make_world()
    built = _submission(w, _next_job_id())
    cast(Job, built[0]).priority = -1  # the jobs' check constraint refuses it
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_together(built)
    assert not Job.objects.filter(name="together 'quoted'").exists()
    assert not AuditEntry.objects.filter(job_id=built[0].pk).exists()


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_statement_is_one_of_its_own() -> None:
    """A submission holds no transaction: its one statement commits the rows together or
    none of them."""
    w = make_world()
    refused = _submission(w, _next_job_id())
    cast(JobEvent, refused[1]).type = "x" * 500  # longer than the column: refused
    with pytest.raises(DataError):
        insert_together(refused)
    assert not Job.objects.filter(pk=refused[0].pk).exists()
    assert not AuditEntry.objects.filter(job_id=refused[0].pk).exists()
    accepted = _submission(w, _next_job_id())
    insert_together(accepted)
    assert connection.get_autocommit()  # nothing left open: the rows are committed
    assert JobEvent.objects.filter(job_id=accepted[0].pk).count() == 1


def test_what_insert_together_does_not_cover_is_saved_in_turn_in_a_transaction() -> None:
    w = make_world()
    built = _submission(w, None)
    cast(JobEvent, built[1]).at = Now()  # an expression: save() writes it
    insert_together(built)
    assert all(obj.pk is not None and not obj._state.adding for obj in built)
    assert JobEvent.objects.get(pk=built[1].pk).job_id == built[0].pk
    insert_together([])  # nothing to write: no statement
