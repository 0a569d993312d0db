"""``manage.py audit_verify``: check the audit trail's hash chain; exit 1 at a broken link."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from governance.selectors.audit import verify_chain


class Command(BaseCommand):
    help = (
        "Walk the audit trail's hash chain and name the first broken link (an entry changed, "
        "removed or inserted behind the application's back). Exits 1 when one is found."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        report = verify_chain()
        if report.broken is not None:
            raise CommandError(
                f"audit chain broken after {report.checked} good entries: {report.broken}"
            )
        self.stdout.write(
            self.style.SUCCESS(
                f"audit chain intact: {report.checked} entries, head {report.last_hash}"
            )
        )
