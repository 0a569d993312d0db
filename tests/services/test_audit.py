"""The audit trail read side: who may read it and in which order (writes are covered by
each service's tests)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent
from governance.selectors import audit as selectors
from governance.services import audit
from governance.services.errors import PermissionDenied
from tests.factories import make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def w() -> Any:
    return make_world()


@pytest.mark.parametrize("who", ["reviewer", "admin"])
def test_reviewers_and_admins_read_newest_first(w: Any, who: str) -> None:
    at = timezone.now()
    first = audit.record(
        event_type=AuditEvent.TEAM_CREATED, actor=w.admin, subject=w.red, at=at - timedelta(1)
    )
    second = audit.record(event_type=AuditEvent.TEAM_CREATED, actor=w.admin, subject=w.blue, at=at)
    third = audit.record(event_type=AuditEvent.TEAM_UPDATED, actor=None, subject=w.blue, at=at)
    assert list(selectors.audit_entries(getattr(w, who))) == [third, second, first]


@pytest.mark.parametrize("who", ["red_lead", "red_member", "blue_lead", "outsider"])
def test_others_may_not_read(w: Any, who: str) -> None:
    with pytest.raises(PermissionDenied):
        selectors.audit_entries(getattr(w, who))


def test_entries_are_append_only(w: Any) -> None:
    from governance.models.audit import AppendOnlyError

    entry = audit.record(event_type=AuditEvent.TEAM_CREATED, actor=w.admin, subject=w.red)
    with pytest.raises(AppendOnlyError):
        entry.save()
    with pytest.raises(AppendOnlyError):
        entry.delete()
    assert AuditEntry.objects.count() == 1
