"""``manage.py audit_verify``: check the audit trail's hash chain; exit 1 at a broken link."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from governance.selectors.audit import verify_chain


class Command(BaseCommand):
    help = (
        "Walk the audit trail's hash chain and name the first broken link (an entry changed, "
        "removed or inserted behind the application's back, the chain re-sealed so that it no "
        "longer leads to a head signed with the audit key, or the head missing or moved). "
        "Exits 1 when one is found."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--expect",
            metavar="LINK:HASH",
            help="a head printed by an earlier run and kept outside the database: the trail "
            "must still hold that link with that hash",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        expect = None
        if options.get("expect"):
            link, _, digest = str(options["expect"]).partition(":")
            if not link.isdecimal() or len(link) > 18 or len(digest) != 64:
                raise CommandError("--expect: give LINK:HASH as printed after 'head'")
            expect = (int(link), digest.lower())
        report = verify_chain(expect=expect)
        if report.broken is not None:
            raise CommandError(
                f"audit chain broken after {report.checked} good entries: {report.broken}"
            )
        self.stdout.write(
            self.style.SUCCESS(
                f"audit chain intact: {report.checked} entries, "
                f"head {report.last_seq}:{report.last_hash}"
            )
        )
        unsigned = report.last_seq - report.signed_seq
        self.stdout.write(
            f"signed with the audit key up to link {report.signed_seq}"
            + (f" ({unsigned} newer entries not signed yet)" if unsigned else "")
        )
        if report.unchecked_checkpoints:
            self.stdout.write(
                self.style.WARNING(
                    f"{report.unchecked_checkpoints} checkpoints were signed with a lost key "
                    "(AUDIT_LOST_KEY_IDS) and were not checked"
                )
            )
