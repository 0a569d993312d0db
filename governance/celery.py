"""The Celery application: workers run the scheduler, beat runs the safety net."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "governance.settings")

app = Celery("governance")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["scheduler", "governance"])
