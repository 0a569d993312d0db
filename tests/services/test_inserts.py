"""``services.inserts.insert`` writes the row ``save()`` writes, for the models a
submission writes through it (the job, its event, its audit entry); ``insert_many`` the
rows ``bulk_create`` writes, for a cycle's events and audit entries."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.db.models import Model
from django.db.models.functions import Now
from django.db.models.signals import post_save, pre_save
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent, Job, JobEvent
from governance.models.audit import AppendOnlyError
from governance.services import audit, inserts
from governance.services.inserts import insert, insert_many
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
