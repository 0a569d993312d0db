"""``manage.py whatif``: replay a queue's window (or an exported history file) as it was
and with a proposed configuration, and print the per-share differences (docs/signals.md).

    manage.py whatif QUEUE --from ISO --to ISO --set beta.borrow_limit=0 --capacity ml.g5.xlarge=4
    manage.py whatif --file history.json --set beta.limits='{"ml.g5.xlarge": 2}' [--json]
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from governance.management.commands.export_history import find_queue
from governance.selectors import scheduling
from governance.selectors.windows import parse_window
from governance.services.errors import ValidationFailed
from governance.services.whatif import clean_proposal

COLUMNS = ("jobs_finished", "wait_p50", "wait_p90", "turnaround_p50", "preemptions", "goodput")


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_proposal(sets: list[str], capacities: list[str]) -> dict[str, Any]:
    shares: dict[str, dict[str, Any]] = {}
    capacity: dict[str, Any] = {}
    for item in sets:
        key, sep, value = item.partition("=")
        share, dot, field = key.rpartition(".")
        if not sep or not dot or not share or not field:
            raise CommandError(f"--set {item!r}: write SHARE.FIELD=VALUE")
        shares.setdefault(share, {})[field] = _value(value)
    for item in capacities:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CommandError(f"--capacity {item!r}: write TYPE=COUNT")
        capacity[name] = _value(value)
    return {"shares": shares, "capacity": capacity}


class Command(BaseCommand):
    help = "Replay a queue's history (or a history file) with a proposed configuration."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue", nargs="?", help="queue id or name")
        parser.add_argument("--file", help="a history file (manage.py export_history)")
        parser.add_argument("--from", dest="start", help="ISO date-time (default: to - 1 day)")
        parser.add_argument("--to", dest="stop", help="ISO date-time (default: now)")
        parser.add_argument(
            "--set", action="append", default=[], help="SHARE.FIELD=VALUE (JSON or text)"
        )
        parser.add_argument("--capacity", action="append", default=[], help="TYPE=COUNT")
        parser.add_argument("--json", action="store_true", help="print the whole result")

    def handle(self, *args: Any, **options: Any) -> None:
        proposal = parse_proposal(options["set"], options["capacity"])
        try:
            if options["file"]:
                with open(options["file"], encoding="utf-8") as handle:
                    data = json.load(handle)
            elif options["queue"]:
                queue = find_queue(options["queue"])
                window = parse_window({"from": options["start"], "to": options["stop"]})
                proposal = clean_proposal(queue, proposal)
                data = scheduling.queue_history(queue, window.start, window.stop)
            else:
                raise CommandError("give a QUEUE or --file")
            result = scheduling.whatif_replay(data, proposal)
            if not options["file"]:  # what really happened, beside the replay as it was
                result["recorded"] = scheduling.queue_signals(queue, window.start, window.stop)
        except (OSError, json.JSONDecodeError) as exc:
            raise CommandError(f"{options['file']}: {exc}") from exc
        except ValidationFailed as exc:
            raise CommandError(
                "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.errors.items())
            ) from exc
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=1))
            return
        self.stdout.write(
            f"replayed {result['events']['baseline']} events as it was and "
            f"{result['events']['proposed']} with the proposal; proposed - as it was:"
        )
        self.stdout.write(f"{'share':<24}" + "".join(f"{c:>16}" for c in (*COLUMNS, "cost")))
        for share, diff in result["differences"].items():
            cells = [diff[c] for c in COLUMNS] + [diff["cost"]]
            self.stdout.write(
                f"{share:<24}" + "".join(f"{'—' if v is None else round(v, 4):>16}" for v in cells)
            )
