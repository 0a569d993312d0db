"""URL map: the REST API under /api/, the HTMX pages at the root."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("django-admin/", admin.site.urls),
    path("api/", include("governance.api.urls")),
    path("", include("governance.web.urls")),
]
