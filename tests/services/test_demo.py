"""The demo loads through the services, once, and shows every exception state."""

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

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


@pytest.mark.django_db
def test_the_demo_acts_under_its_own_actor_who_cannot_sign_in(tmp_path: Path) -> None:
    """Issue 13: the seed is recorded under "demo", not the people it signs in as; only
    filing an exception stays with a team's lead (no one else may file one)."""
    demo.load(tmp_path)
    actor = get_user_model().objects.get(username=demo.DEMO_ACTOR)
    assert not actor.is_active and not actor.has_usable_password()
    client = Client()
    answer = client.post("/login/", {"username": demo.DEMO_ACTOR, "password": demo.DEMO_ACTOR})
    assert answer.status_code != 302 and "_auth_user_id" not in client.session
    by_people = AuditEntry.objects.exclude(actor=None).exclude(actor=actor)
    assert set(by_people.values_list("event_type", flat=True)) == {"exception.filed"}
    assert set(by_people.values_list("actor__username", flat=True)) <= {
        f"lead-{team}" for team in demo.TEAMS
    }
    assert AuditEntry.objects.filter(actor=actor, event_type="share.created").exists()
