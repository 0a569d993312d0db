"""The notifications page: unread items in the navigation, reading them, preferences."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from governance.models import Notification, NotificationPreference
from governance.services import exceptions
from tests.factories import make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def w() -> Any:
    world = make_world()
    exceptions.exception_file(
        actor=world.red_lead,
        team=world.red,
        share=world.red_share,
        priority=2000,
        justification="release blocked",
        expires_at=timezone.now() + timedelta(days=2),
    )
    return world


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_navigation_counts_unread_and_reading_clears_it(w: Any) -> None:
    client = client_for(w.reviewer)
    page = client.get("/").content.decode()
    assert 'aria-label="1 unread"' in page
    listing = client.get("/notifications/").content.decode()
    assert "Exception to review: team red asks priority 2000" in listing
    note = Notification.objects.get(recipient=w.reviewer)
    response = client.post("/notifications/read/", {"id": note.pk, "next": note.url})
    assert response.status_code == 302 and response["Location"] == note.url
    assert 'aria-label="1 unread"' not in client.get("/").content.decode()
    # Someone else's notification cannot be marked read by id.
    other = Notification.objects.get(recipient=w.admin)
    client.post("/notifications/read/", {"id": other.pk})
    other.refresh_from_db()
    assert other.read_at is None


def test_preferences_are_saved_and_bad_ones_named(w: Any) -> None:
    client = client_for(w.red_lead)
    bad = client.post(
        "/notifications/", {"webhook_kinds": ["job_preempted"], "webhook_url": "not a url"}
    )
    assert bad.status_code == 400
    assert "Must be an http(s) URL" in bad.content.decode()
    assert not NotificationPreference.objects.exists()
    good = client.post("/notifications/", {"email_kinds": ["exception_decided"]})
    assert good.status_code == 302
    assert NotificationPreference.objects.get(user=w.red_lead).email_kinds == ["exception_decided"]


def test_the_api_lists_only_ones_own(w: Any) -> None:
    api = APIClient()
    api.force_authenticate(w.admin)
    body = api.get("/api/notifications/").json()
    assert [n["kind"] for n in body["results"]] == ["exception_needs_review"]
    assert api.post("/api/notifications/read/", {}, format="json").json() == {"marked": 1}
    api.force_authenticate(w.red_member)
    assert api.get("/api/notifications/").json()["results"] == []
    bad = api.patch("/api/notifications/preferences/", {"email_kinds": ["x"]}, format="json")
    assert bad.status_code == 400 and "email_kinds" in bad.json()


def test_the_preference_boxes_render_as_django_does_and_once_per_ticks() -> None:
    """The kinds' checkboxes are rendered once per name, ticks and attributes, then served
    as kept: the same HTML as Django's ``CheckboxSelectMultiple`` for every ticking."""
    from django import forms

    from governance.web.notifications import KIND_CHOICES, KeptCheckboxes

    kinds = [value for value, _ in KIND_CHOICES]
    for ticked in ([], kinds[:1], kinds[1:3], kinds):
        kept = KeptCheckboxes(choices=KIND_CHOICES)
        plain = forms.CheckboxSelectMultiple(choices=KIND_CHOICES)
        first = kept.render("email_kinds", ticked, {"id": "id_email_kinds"})
        assert first == plain.render("email_kinds", ticked, {"id": "id_email_kinds"})
        assert kept.render("email_kinds", ticked, {"id": "id_email_kinds"}) is first  # kept
    assert "checked" not in KeptCheckboxes(choices=KIND_CHOICES).render("webhook_kinds", [], {})


def test_the_cached_page_shows_each_change_at_once_and_only_ones_own(w: Any) -> None:
    """The page is served from a cached fragment per user: a new notification, a read
    mark, saved preferences and an email address set in the admin site each show on the
    next view, and nobody is served another's list."""
    client = client_for(w.reviewer)
    first = client.get("/notifications/").content.decode()
    assert "Mark all read" in first and "(you have none set)" in first
    assert "Exception to review" in first
    client.post("/notifications/read/", {})
    assert "Mark all read" not in client.get("/notifications/").content.decode()
    Notification.objects.create(
        recipient=w.reviewer,
        kind="exception_decided",
        key="fresh",
        title="Fresh news for the reviewer",
        created_at=timezone.now(),
    )
    page = client.get("/notifications/").content.decode()
    assert "Fresh news for the reviewer" in page and "Mark all read" in page
    assert 'id="id_email_kinds_2" checked' not in page  # job_preempted: not by default
    client.post("/notifications/", {"email_kinds": ["job_preempted"]})
    page = client.get("/notifications/").content.decode()
    assert 'id="id_email_kinds_2" checked' in page
    w.reviewer.email = "reviewer@example.org"
    w.reviewer.save(update_fields=["email"])
    assert "(you have none set)" not in client.get("/notifications/").content.decode()
    others = client_for(w.admin).get("/notifications/").content.decode()
    assert "Fresh news for the reviewer" not in others and "Exception to review" in others
    token = client.cookies["csrftoken"].value
    assert len(token) == 32 and token not in others  # each session's own CSRF token
