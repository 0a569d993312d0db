"""The demo's recordings give the same figures for a one-day window whichever way they
are read: the API (JSON and CSV), the Signals page, ``manage.py signals``, and a history
file exported from before the queue's first submission read by
``python -m scheduler.signals`` (docs/signals.md). The day starts in the middle of the
fleet's played history, so jobs are running, waiting and preempted across its start."""

from __future__ import annotations

import json
from datetime import timedelta
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from governance import demo
from governance.api.tables import csv_text
from governance.demo import history as demo_history
from governance.models import Job, JobQueue
from governance.selectors.filters import Links
from governance.web.presenters import signals as web_signals
from scheduler import signals
from tests.factories import make_admin

pytestmark = pytest.mark.django_db


def _figures(group: dict[str, Any]) -> dict[str, Any]:
    """A group's figures, without what only a live queue knows (its id, name, audit)."""
    return {k: v for k, v in group.items() if k not in ("id", "name", "policy_changes")}


def test_one_days_figures_are_the_same_every_way(
    tmp_path: Path, settings: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    settings.DEMO_TIME_FACTOR = 60
    demo.load(tmp_path)
    demo_history.load_history(now=timezone.now(), days=2)
    stop = timezone.now().replace(microsecond=0)
    start = stop - timedelta(days=1)
    window = {"from": start.isoformat(), "to": stop.isoformat()}
    client = Client()
    client.force_login(make_admin())

    for name in ("gpu-fleet", "aws-worked-example"):
        queue = JobQueue.objects.get(name=name)
        query = {"queue": queue.pk, **window}
        api = client.get("/api/signals/", query).json()
        if name == "gpu-fleet":  # the day cuts through the played history
            assert api["queue"]["jobs_finished"]["total"] > 0
            assert api["queue"]["fallback"]["by_preference"]  # first starts in the day
            assert Job.objects.filter(
                queue=queue, submitted_at__lt=start, finished_at__gt=start
            ).exists()
            assert api["queue"]["preemptions_suffered"]["total"] > 0

        # CSV: the same figures, flat
        body = client.get("/api/signals/", {**query, "format": "csv"}).content.decode()
        assert body == csv_text(signals.flat_rows(api))

        # the Signals page shows every figure of the same answer
        html = unescape(client.get("/signals/", query).content.decode())
        links = Links(queue.pk, start, stop)
        for row in web_signals.figure_rows(api, links, queue.pk):
            for cell in row.cells:
                assert f">{cell.text}</a>" in html, (name, row.name, cell.text)

        # manage.py signals
        capsys.readouterr()
        call_command("signals", name, "--from", window["from"], "--to", window["to"])
        assert json.loads(capsys.readouterr().out) == api
        call_command("signals", name, "--from", window["from"], "--to", window["to"], "--csv")
        assert capsys.readouterr().out == body

        # a history file from before the first submission, read for the day
        first = Job.objects.filter(queue=queue).order_by("submitted_at").first()
        assert first is not None
        origin = first.submitted_at.replace(microsecond=0) - timedelta(seconds=1)
        target = tmp_path / f"{name}.json"
        call_command(
            "export_history",
            name,
            "--from",
            origin.isoformat(),
            "--to",
            window["to"],
            "--output",
            str(target),
        )
        capsys.readouterr()
        lo = (start - origin).total_seconds()
        hi = (stop - origin).total_seconds()
        assert signals.main([str(target), "--from", str(lo), "--to", str(hi)]) == 0
        from_file = json.loads(capsys.readouterr().out)
        assert _figures(from_file["queue"]) == _figures(api["queue"]), name
        assert [_figures(g) for g in from_file["groups"]] == [_figures(g) for g in api["groups"]], (
            name
        )
