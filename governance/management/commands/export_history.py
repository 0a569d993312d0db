"""``manage.py export_history QUEUE --from ISO --to ISO [--output FILE]``: a queue's
recorded history as a scenario file (docs/signals.md) that ``python -m scheduler.simulate``
replays and ``manage.py whatif`` takes."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from governance.models import JobQueue
from governance.selectors import scheduling
from governance.selectors.windows import Window, parse_window
from governance.services.errors import ValidationFailed


def find_queue(key: str) -> JobQueue:
    """A queue by id or by name."""
    found = (
        JobQueue.objects.filter(pk=int(key)).first()
        if key.isdecimal() and len(key) < 12
        else JobQueue.objects.filter(name=key).first()
    )
    if found is None:
        raise CommandError(f"no queue with id or name {key!r}")
    return found


def add_window_arguments(parser: CommandParser) -> None:
    """QUEUE, --from and --to, as the commands that read a queue's window take them."""
    parser.add_argument("queue", help="queue id or name")
    parser.add_argument("--from", dest="start", help="ISO date-time (default: to - 1 day)")
    parser.add_argument("--to", dest="stop", help="ISO date-time (default: now)")


def queue_and_window(options: dict[str, Any]) -> tuple[JobQueue, Window]:
    """The queue and the window the arguments of :func:`add_window_arguments` name."""
    queue = find_queue(options["queue"])
    try:
        window = parse_window({"from": options["start"], "to": options["stop"]})
    except ValidationFailed as exc:
        raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.errors.items())) from exc
    return queue, window


class Command(BaseCommand):
    help = (
        "Export a queue's history over [from, to) as {scenario, recorded, teams}: the "
        "scenario in milliseconds from 'from', replayable by python -m scheduler.simulate."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_window_arguments(parser)
        parser.add_argument("--output", help="file to write (default: standard output)")

    def handle(self, *args: Any, **options: Any) -> None:
        queue, window = queue_and_window(options)
        data = scheduling.queue_history(queue, window.start, window.stop)
        if options["output"]:
            with open(options["output"], "w", encoding="utf-8") as handle:
                json.dump(data, handle, indent=1)
            self.stdout.write(
                f"wrote {options['output']}: {len(data['scenario']['jobs'])} jobs, "
                f"{len(data['recorded']['events'])} events"
            )
        else:
            json.dump(data, sys.stdout if self.stdout is None else self.stdout, indent=1)
            self.stdout.write("")
