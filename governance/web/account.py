"""The signed-in user's own API tokens: make one (shown once), see them, revoke them; and
the password reset link's last step, which sets the password through the user service."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import SetPasswordForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from governance.services import tokens
from governance.services import users as user_services
from governance.services.errors import ServiceError
from governance.web.errors import apply_service_errors


class ResetPasswordForm(SetPasswordForm):
    """The reset link's form: the new password is set by ``users.user_reset_password``,
    which revokes the user's API tokens, signs out their sessions and is audited."""

    def save(self, commit: bool = True) -> Any:
        return user_services.user_reset_password(
            user=self.user.pk, password=self.cleaned_data["new_password1"]
        )


class PasswordResetConfirm(auth_views.PasswordResetConfirmView):
    form_class = ResetPasswordForm


class TokenForm(forms.Form):
    hours = forms.IntegerField(
        required=False,
        min_value=1,
        label="Expires after (hours)",
        help_text="Empty: the longest allowed.",
    )


@login_required
@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    """List the user's live tokens; POST makes a new one and shows it this once."""
    form = TokenForm(request.POST or None)
    new_token = None
    if request.method == "POST" and form.is_valid():
        try:
            _, new_token = tokens.token_create(
                actor=request.user, hours=form.cleaned_data["hours"], via="page"
            )
            form = TokenForm()
        except ServiceError as error:
            apply_service_errors(form, error)
    return render(
        request,
        "account/tokens.html",
        {
            "form": form,
            "new_token": new_token,
            "tokens": tokens.tokens_of(request.user),
            "max_hours": tokens.max_token_hours(),
        },
        status=400 if form.errors else 200,
    )


@login_required
@require_POST
def token_revoke(request: HttpRequest, key: str) -> HttpResponse:
    try:
        tokens.token_revoke(actor=request.user, token_key=key)
        messages.success(request, f"Token {key}… revoked: it no longer works.")
    except ServiceError as error:
        messages.error(request, " ".join(m for ms in error.errors.values() for m in ms))
    return redirect("web:tokens")
