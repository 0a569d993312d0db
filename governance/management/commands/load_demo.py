"""``manage.py load_demo``: load the demo data once (a second run does nothing)."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from governance import demo
from governance.demo import history


class Command(BaseCommand):
    help = (
        "Load the demo queues, teams, users, shares, agreements, jobs and exceptions once, "
        "and a few days of the fleet's history played through the engine."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if demo.already_loaded():
            self.stdout.write("Demo data already loaded.")
        else:
            demo.load(settings.DATA_DIR)
            self.stdout.write(self.style.SUCCESS("Demo data loaded."))
        if settings.DEMO_SLURM and demo.load_slurm():
            self.stdout.write(self.style.SUCCESS("Demo queue on the local Slurm loaded."))
        written = history.load_history_and_rollups()
        if written:
            self.stdout.write(
                self.style.SUCCESS(f"Demo history: {written} jobs of the last days played.")
            )
