"""``manage.py signals QUEUE [--from ISO] [--to ISO] [--group-by share|team] [--csv]``: a
queue's signals over a window (docs/signals.md), the same answer as ``/api/signals/``."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from governance.api.tables import csv_text
from governance.management.commands.export_history import add_window_arguments, queue_and_window
from governance.selectors import scheduling
from governance.selectors.windows import GROUP_BY


class Command(BaseCommand):
    help = (
        "A queue's signals over [from, to) as the API gives them: JSON, or with --csv the "
        "flat table of ?format=csv."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_window_arguments(parser)
        parser.add_argument("--group-by", choices=GROUP_BY, default="share")
        parser.add_argument("--csv", action="store_true", help="a flat table instead of JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        queue, window = queue_and_window(options)
        answer = scheduling.queue_signals(
            queue, window.start, window.stop, group_by=options["group_by"]
        )
        if options["csv"]:
            self.stdout.write(csv_text(scheduling.signals_rows(answer)), ending="")
        else:
            self.stdout.write(json.dumps(answer, indent=1))
