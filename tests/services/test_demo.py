"""The demo loads through the services, once, and shows every exception state."""

from pathlib import Path

import pytest

from governance import demo
from governance.models import AuditEntry, ExceptionState, JobQueue, PriorityException, Share


@pytest.mark.django_db
def test_demo_loads_once_with_every_exception_state(tmp_path: Path) -> None:
    logins = demo.load(tmp_path)
    assert demo.already_loaded()
    assert (tmp_path / "demo_logins.txt").read_text().splitlines() == logins
    aws = JobQueue.objects.get(name="aws-worked-example")
    policies = dict(Share.objects.filter(queue=aws).values_list("name", "policy"))
    assert policies == {"background": "LEND_AND_BORROW", "medium": "LEND", "protected": "RESERVE"}
    assert Share.objects.get(queue=aws, name="background").borrow_limit == 200
    states = set(PriorityException.objects.values_list("state", flat=True))
    assert states == set(ExceptionState.values)
    # Every write went through a service, so every created object has its audit entry.
    assert AuditEntry.objects.filter(event_type="share.created").count() == Share.objects.count()
