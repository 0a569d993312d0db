"""``manage.py audit_verify``: check the audit trail's hash chain; exit 1 at a broken link."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from governance.models.audit import SITE_CHAIN
from governance.selectors.audit import verify_chain


class Command(BaseCommand):
    help = (
        "Walk every hash chain of the audit trail (one per queue and the site's) and name the "
        "first broken link (an entry changed, removed or inserted behind the application's "
        "back, a chain re-sealed so that it no longer leads to a head signed with the audit "
        "key, or a head missing or moved). Prints each chain's head. "
        "Exits 1 when one is found."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--expect",
            metavar="CHAIN:LINK:HASH",
            action="append",
            default=[],
            help="a chain's head printed by an earlier run and kept outside the database: "
            "the trail must still hold that link with that hash (repeatable, one per chain; "
            "LINK:HASH alone names the site chain)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        expect: dict[str, tuple[int, str]] = {}
        for given in options.get("expect") or []:
            chain, link, digest = parse_head(str(given))
            expect[chain] = (link, digest)
        report = verify_chain(expect=expect)
        if report.broken is not None:
            raise CommandError(
                f"audit chain broken after {report.checked} good entries: {report.broken}"
            )
        self.stdout.write(
            self.style.SUCCESS(
                f"audit chain intact: {report.checked} entries in {len(report.chains)} chains"
            )
        )
        for state in report.chains:
            unsigned = state.last_seq - state.signed_seq
            self.stdout.write(
                f"  head {state.chain}:{state.last_seq}:{state.last_hash} signed with the "
                f"audit key up to link {state.signed_seq}"
                + (f" ({unsigned} newer entries not signed yet)" if unsigned else "")
            )
        if report.unchecked_checkpoints:
            self.stdout.write(
                self.style.WARNING(
                    f"{report.unchecked_checkpoints} checkpoints were signed with a lost key "
                    "(AUDIT_LOST_KEY_IDS) and were not checked"
                )
            )


def parse_head(given: str) -> tuple[str, int, str]:
    """``CHAIN:LINK:HASH`` as printed after 'head' (``LINK:HASH``: the site chain)."""
    parts = given.rsplit(":", 2)
    chain, link, digest = parts if len(parts) == 3 else [SITE_CHAIN, *parts, ""][:3]
    if (
        not link.isdecimal()
        or len(link) > 18
        or len(digest) != 64
        or not 0 < len(chain) <= 40
        or not all(c.isalnum() or c in "-_." for c in chain)
    ):
        raise CommandError("--expect: give CHAIN:LINK:HASH as printed after 'head'")
    return chain, int(link), digest.lower()
