"""Priority definitions page: everyone reads; admins create, edit and delete bands."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from governance.models import AuditEntry, AuditEvent, PriorityDefinition
from tests.factories import make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> Any:
    return make_world()


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def band_data(**changes: Any) -> dict[str, Any]:
    data = {
        "name": "extreme",
        "min_priority": 10000 - 1,
        "max_priority": 9999,
        "criteria": "",
        "usable_by": [],
        "exception_owner": "",
        "reason": "",
    }
    data.update(changes)
    return data


@pytest.mark.parametrize("role", ["red_member", "red_lead", "reviewer", "admin"])
def test_everyone_reads_the_bands(world: Any, role: str) -> None:
    response = client_for(getattr(world, role)).get(reverse("web:priorities"))
    assert response.status_code == 200
    body = response.content.decode()
    for name in ("low", "normal", "urgent", "critical"):
        assert name in body
    assert ("New band" in body) == (role == "admin")


@pytest.mark.parametrize("role", ["red_lead", "reviewer"])
def test_non_admins_cannot_change_bands(world: Any, role: str) -> None:
    c = client_for(getattr(world, role))
    assert c.get(reverse("web:priority_new")).status_code == 403
    assert c.post(reverse("web:priority_new"), band_data()).status_code == 403
    band = world.bands["low"]
    assert c.post(reverse("web:priority_edit", args=[band.pk]), band_data()).status_code == 403
    assert c.post(reverse("web:priority_delete", args=[band.pk])).status_code == 403
    assert PriorityDefinition.objects.count() == 4


def test_overlap_error_is_beside_min_and_max(world: Any) -> None:
    response = client_for(world.admin).post(
        reverse("web:priority_new"), band_data(min_priority=50, max_priority=150)
    )
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert "min_priority" in errors or "max_priority" in errors
    assert not PriorityDefinition.objects.filter(name="extreme").exists()


def test_admin_creates_edits_and_deletes(world: Any) -> None:
    c = client_for(world.admin)
    PriorityDefinition.objects.filter(name="critical").delete()
    response = c.post(
        reverse("web:priority_new"), band_data(min_priority=1000, usable_by=["admin"])
    )
    assert response.status_code == 302
    band = PriorityDefinition.objects.get(name="extreme")
    assert band.usable_by == ["admin"]
    assert AuditEntry.objects.filter(event_type=AuditEvent.PRIORITY_DEFINITION_CREATED).exists()
    response = c.post(
        reverse("web:priority_edit", args=[band.pk]),
        band_data(min_priority=1000, criteria="Outage.", reason="Clarified."),
    )
    assert response.status_code == 302
    band.refresh_from_db()
    assert band.criteria == "Outage."
    entry = AuditEntry.objects.get(event_type=AuditEvent.PRIORITY_DEFINITION_UPDATED)
    assert entry.reason == "Clarified."
    assert c.post(reverse("web:priority_delete", args=[band.pk])).status_code == 302
    assert not PriorityDefinition.objects.filter(pk=band.pk).exists()
    assert AuditEntry.objects.filter(event_type=AuditEvent.PRIORITY_DEFINITION_DELETED).exists()


def test_query_count_is_constant(world: Any) -> None:
    c = client_for(world.red_lead)

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert c.get(reverse("web:priorities")).status_code == 200
        return len(ctx.captured_queries)

    small = count()
    PriorityDefinition.objects.filter(name="critical").delete()
    for i in range(8):
        PriorityDefinition.objects.create(
            name=f"b{i}",
            min_priority=1000 + i * 100,
            max_priority=1099 + i * 100,
            usable_by=["admin"],
            exception_owner=world.reviewer,
        )
    assert count() == small
