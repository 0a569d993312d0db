"""Sign-in hardening: lockout (django-axes), throttles, expiring and revocable tokens,
password reset by email, and the security headers."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from governance.api.throttles import SignInThrottle, UserThrottle
from governance.models import AuditEntry, AuditEvent
from tests.factories import UserFactory, field_values

pytestmark = pytest.mark.django_db

TOKEN_URL = "/api/auth/token/"


@pytest.fixture
def alice() -> Any:
    return UserFactory(username="alice", password="correct-horse", email="alice@example.org")


def web_sign_in(client: Client, password: str) -> Any:
    return client.post("/login/", {"username": "alice", "password": password})


def token_sign_in(client: APIClient, password: str) -> Any:
    return client.post(TOKEN_URL, {"username": "alice", "password": password}, format="json")


def test_five_wrong_passwords_lock_the_web_sign_in(alice: Any, settings: Any) -> None:
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert web_sign_in(client, "wrong").status_code == 200  # the form again
    assert web_sign_in(client, "wrong").status_code == 429  # the last failure allowed
    response = web_sign_in(client, "correct-horse")
    assert response.status_code == 429
    assert "Too many failed sign-ins" in response.content.decode()
    assert "_auth_user_id" not in client.session
    # The token endpoint shares the count: the same username and address stay locked.
    response = token_sign_in(APIClient(), "correct-horse")
    assert response.status_code == 429
    assert "Too many failed sign-ins" in response.json()["detail"][0]


def test_wrong_passwords_at_the_token_endpoint_lock_it(alice: Any, settings: Any) -> None:
    client = APIClient()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = token_sign_in(client, "wrong")
        assert response.status_code == 400
        assert "non_field_errors" in response.json()
    assert token_sign_in(client, "wrong").status_code == 429
    assert token_sign_in(client, "correct-horse").status_code == 429
    assert not AuthToken.objects.filter(user=alice).exists()


def test_a_success_before_the_limit_resets_the_count(alice: Any, settings: Any) -> None:
    client = APIClient()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        token_sign_in(client, "wrong")
    assert token_sign_in(client, "correct-horse").status_code == 200
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        token_sign_in(client, "wrong")
    assert token_sign_in(client, "correct-horse").status_code == 200


def test_the_token_endpoint_is_throttled_per_address(alice: Any, monkeypatch: Any) -> None:
    monkeypatch.setitem(SignInThrottle.THROTTLE_RATES, "sign_in", "3/min")
    client = APIClient()
    for _ in range(3):
        assert token_sign_in(client, "correct-horse").status_code == 200
    response = token_sign_in(client, "correct-horse")
    assert response.status_code == 429
    assert "detail" in response.json()


def test_web_sign_in_is_limited_per_address_whatever_the_username(
    alice: Any, monkeypatch: Any
) -> None:
    """Password spraying: one address tries many usernames (each below django-axes's
    per-username lockout); the address is refused, another address is not."""
    monkeypatch.setitem(SignInThrottle.THROTTLE_RATES, "sign_in", "3/min")
    client = Client()
    for name in ("bob", "carol", "dave"):
        assert client.post("/login/", {"username": name, "password": "x"}).status_code == 200
    response = web_sign_in(client, "correct-horse")
    assert response.status_code == 429
    assert "Too many attempts from your address" in response.content.decode()
    assert int(response["Retry-After"]) > 0
    assert "_auth_user_id" not in client.session
    assert client.get("/login/").status_code == 200  # the form itself still shows
    elsewhere = Client(REMOTE_ADDR="192.0.2.7")
    assert web_sign_in(elsewhere, "correct-horse").status_code == 302
    # The token endpoint counts in the same place: this address is refused there too.
    assert token_sign_in(APIClient(), "correct-horse").status_code == 429


def test_password_reset_is_limited_per_address(alice: Any, monkeypatch: Any) -> None:
    """Mail bombing: one address asks for reset mails again and again."""
    monkeypatch.setitem(SignInThrottle.THROTTLE_RATES, "password_reset", "2/hour")
    client = Client()
    for _ in range(2):
        assert client.post("/password-reset/", {"email": "alice@example.org"}).status_code == 302
    response = client.post("/password-reset/", {"email": "alice@example.org"})
    assert response.status_code == 429
    assert len(mail.outbox) == 2


def test_signed_in_users_are_throttled(alice: Any, monkeypatch: Any) -> None:
    monkeypatch.setitem(UserThrottle.THROTTLE_RATES, "user", "5/min")
    client = APIClient()
    client.force_authenticate(alice)
    for _ in range(5):
        assert client.get("/api/queues/").status_code == 200
    response = client.get("/api/queues/")
    assert response.status_code == 429
    assert response["Retry-After"]


def test_token_contract_and_expiry(alice: Any, settings: Any) -> None:
    response = token_sign_in(APIClient(), "correct-horse")
    assert response.status_code == 200
    token = response.json()["token"]
    stored = AuthToken.objects.get(user=alice)
    expected = timezone.now() + timedelta(hours=settings.API_TOKEN_TTL_HOURS)
    assert abs((stored.expiry - expected).total_seconds()) < 60
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/queues/").status_code == 200
    AuthToken.objects.filter(pk=stored.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    response = client.get("/api/queues/")
    assert response.status_code == 401
    assert "detail" in response.json()
    assert AuditEntry.objects.filter(event_type=AuditEvent.TOKEN_CREATED, actor=alice).exists()


def test_old_style_tokens_do_not_work(alice: Any) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b")
    assert client.get("/api/queues/").status_code == 401


def test_the_token_page_creates_shows_once_and_revokes(alice: Any) -> None:
    page = Client()
    page.force_login(alice)
    response = page.post("/account/tokens/", {"hours": "2"})
    assert response.status_code == 200
    token = re.search(r'id="new-token">([0-9a-f]{64})<', response.content.decode())
    assert token is not None
    stored = AuthToken.objects.get(user=alice)
    assert stored.expiry < timezone.now() + timedelta(hours=2, minutes=1)
    listing = page.get("/account/tokens/").content.decode()
    assert stored.token_key in listing and token.group(1) not in listing
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.group(1)}")
    assert api.get("/api/queues/").status_code == 200
    # Another user cannot revoke it.
    other = Client()
    other.force_login(UserFactory(username="mallory"))
    other.post(f"/account/tokens/{stored.token_key}/revoke/")
    assert AuthToken.objects.filter(pk=stored.pk).exists()
    page.post(f"/account/tokens/{stored.token_key}/revoke/")
    assert not AuthToken.objects.filter(pk=stored.pk).exists()
    assert api.get("/api/queues/").status_code == 401
    assert AuditEntry.objects.filter(event_type=AuditEvent.TOKEN_REVOKED, actor=alice).exists()


def test_the_token_page_bounds_hours(alice: Any, settings: Any) -> None:
    page = Client()
    page.force_login(alice)
    response = page.post("/account/tokens/", {"hours": str(settings.API_TOKEN_TTL_HOURS + 1)})
    assert response.status_code == 400
    assert not AuthToken.objects.filter(user=alice).exists()


def test_password_reset_by_email(alice: Any) -> None:
    client = Client()
    response = client.post("/password-reset/", {"email": "alice@example.org"})
    assert response.status_code == 302
    [message] = mail.outbox
    link = re.search(r"http://testserver(/password-reset/\S+/)", message.body)
    assert link is not None
    form = client.get(link.group(1), follow=True)
    assert form.status_code == 200
    response = client.post(
        form.redirect_chain[-1][0],
        {"new_password1": "a-new-long-passphrase", "new_password2": "a-new-long-passphrase"},
    )
    assert response.status_code == 302
    assert token_sign_in(APIClient(), "a-new-long-passphrase").status_code == 200
    assert token_sign_in(APIClient(), "correct-horse").status_code == 400


def test_a_password_reset_revokes_tokens_and_sessions_and_is_audited(alice: Any) -> None:
    """Someone holding alice's token or signed-in browser keeps nothing once she resets."""
    _, stolen_token = AuthToken.objects.create(user=alice)
    thief_api = APIClient()
    thief_api.credentials(HTTP_AUTHORIZATION=f"Token {stolen_token}")
    thief_page = Client()
    assert web_sign_in(thief_page, "correct-horse").status_code == 302
    assert thief_api.get("/api/queues/").status_code == 200
    assert thief_page.get("/").status_code == 200
    client = Client()
    client.post("/password-reset/", {"email": "alice@example.org"})
    link = re.search(r"http://testserver(/password-reset/\S+/)", mail.outbox[0].body)
    assert link is not None
    form = client.get(link.group(1), follow=True)
    passwords = {"new_password1": "a-new-long-passphrase", "new_password2": "a-new-long-passphrase"}
    assert client.post(form.redirect_chain[-1][0], passwords).status_code == 302
    assert thief_api.get("/api/queues/").status_code == 401
    assert thief_page.get("/").status_code == 302  # back to the sign-in page
    assert not AuthToken.objects.filter(user=alice).exists()
    [entry] = AuditEntry.objects.filter(event_type=AuditEvent.USER_UPDATED, subject_id=alice.pk)
    assert entry.actor_id == alice.pk
    assert entry.after == {"password": "reset", "tokens_revoked": 1, "sessions": "signed out"}
    assert "a-new-long-passphrase" not in str(entry.after)


def test_security_headers(alice: Any) -> None:
    client = Client()
    client.force_login(alice)
    response = client.get("/")
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"


def test_a_token_is_checked_whole_and_for_an_active_user(alice: Any) -> None:
    """The key (the token's first characters) only finds the row: a token sharing it but
    not its digest is refused, as is a deactivated user's, and bytes that are not UTF-8
    are an invalid token, not an error."""
    from governance.selectors import tokens as token_selectors

    instance, token = AuthToken.objects.create(user=alice)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/queues/").status_code == 200
    forged = token[:-1] + ("0" if token[-1] != "0" else "1")
    client.credentials(HTTP_AUTHORIZATION=f"Token {forged}")
    assert client.get("/api/queues/").status_code == 401
    client.credentials(HTTP_AUTHORIZATION="Token \xe9\xff")
    assert client.get("/api/queues/").status_code == 401
    # The rows read as knox's queryset reads them, user included, field for field.
    (read,) = token_selectors.with_key(instance.token_key)
    orm = AuthToken.objects.select_related("user").get(token_key=instance.token_key)
    assert field_values(read) == field_values(orm)
    assert field_values(read.user) == field_values(orm.user)
    alice.is_active = False
    alice.save()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/queues/").status_code == 401
