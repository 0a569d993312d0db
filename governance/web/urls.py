"""HTMX pages. Each page includes its live partials; one endpoint re-renders each partial.

Page modules register their routes here (namespace ``web``); the navigation in
``governance.web.nav`` links to ``web:overview``, ``web:queues``, ``web:jobs``,
``web:exceptions``, ``web:priorities``, ``web:agreements`` and ``web:audit``.
"""

from django.urls import path  # noqa: F401  (page modules add their paths below)

app_name = "web"

urlpatterns: list = []
