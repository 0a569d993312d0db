"""``manage.py usage_rebuild``: recompute the usage history rollups from recorded job
events (``services.insight.usage_rebuild``), e.g. after loading history recorded before
the rollups existed."""

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from governance.models import JobQueue
from governance.services.insight import usage_rebuild

MAX_DAYS = 3660


class Command(BaseCommand):
    help = (
        "Rebuild the usage history (own, borrowed, lent, idle per share and type) of the "
        "given queues (all by default) over the last DAYS days from their jobs' recorded "
        "events, under the queues' current limits and capacity."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queue", type=int, action="append", help="queue id (repeatable)")
        parser.add_argument("--days", type=int, default=30, help="how far back (default 30)")

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["days"]
        if not 1 <= days <= MAX_DAYS:
            raise CommandError(f"--days must be between 1 and {MAX_DAYS}")
        queues = JobQueue.objects.order_by("id")
        if options["queue"]:
            queues = queues.filter(pk__in=options["queue"])
            missing = set(options["queue"]) - set(queues.values_list("pk", flat=True))
            if missing:
                raise CommandError(f"no such queue: {sorted(missing)}")
        now = timezone.now()
        for queue in queues:
            rows = usage_rebuild(queue_id=queue.pk, since=now - timedelta(days=days), until=now)
            self.stdout.write(f"{queue.name}: {rows} rollup rows written")
