"""URL map: the REST API under /api/, the HTMX pages at the root."""

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static
from django.urls import include, path

from governance.api.throttles import posts_per_address
from governance.web import account
from governance.web.metrics import metrics

handler400 = "governance.guards.bad_request"
handler403 = "governance.guards.permission_denied"
handler404 = "governance.guards.page_not_found"
handler500 = "governance.guards.server_error"


class SignInView(auth_views.LoginView):
    """Django's sign-in, telling an empty installation (no user at all yet) how to make
    its first admin (docs/admin-guide.md), since nobody could sign in otherwise."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["no_users_yet"] = not get_user_model().objects.exists()
        return context


def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Browsers ask for /favicon.ico whatever the page's <link rel="icon"> says: send
    them to the static file (served by whitenoise, or runserver in development)."""
    return HttpResponseRedirect(static("favicon.ico"))


urlpatterns = [
    path("favicon.ico", favicon),
    path("django-admin/", admin.site.urls),
    path("api/", include("governance.api.urls")),
    path("metrics", metrics, name="metrics"),
    # Sign-in and password-reset POSTs are limited per address (THROTTLE_SIGN_IN_RATE,
    # shared with the token endpoint, and THROTTLE_PASSWORD_RESET_RATE).
    path("login/", posts_per_address("sign_in")(SignInView.as_view()), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Django's password reset by email (the console backend prints the mail in development).
    path(
        "password-reset/",
        posts_per_address("password_reset")(auth_views.PasswordResetView.as_view()),
        name="password_reset",
    ),
    path(
        "password-reset/sent/",
        auth_views.PasswordResetDoneView.as_view(),
        name="password_reset_done",
    ),
    path(
        "password-reset/<uidb64>/<token>/",
        account.PasswordResetConfirm.as_view(),
        name="password_reset_confirm",
    ),
    path(
        "password-reset/done/",
        auth_views.PasswordResetCompleteView.as_view(),
        name="password_reset_complete",
    ),
    path("", include("governance.web.urls")),
]
