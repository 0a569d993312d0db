"""Full-page screenshots of the main pages into docs/screenshots/, 400 and 1400 px wide.

    .venv/bin/python -m scripts.screenshots                 # starts what it needs
    .venv/bin/python -m scripts.screenshots --base-url http://127.0.0.1:8000

Without ``--base-url`` it runs ``manage.py migrate`` and ``load_demo`` on ``DATABASE_URL``
(else the embedded PostgreSQL/Redis under ``DATA_DIR``, as ``./scripts/run`` does), then
starts ``runserver --insecure`` on a free port and a Celery worker (so the demo's jobs are
scheduled and the feed has decisions), and stops both at the end. With ``--base-url`` it
starts nothing: the server there must hold the demo data (passwords equal user names).

Each page is saved twice, ``<page>-narrow.png`` (400 px) and ``<page>-wide.png`` (1400 px).
Each page is taken as the role that uses it: the admin for the overview, queue, share
editor (with its live preview showing) and agreements; a member for a job; a lead for
the team view (own team first, pending jobs with estimated starts), one of its workloads
and a job with a deadline submitted on the form; the reviewer for the
exceptions review queue, the audit trail and Signals (on the demo's history); the admin
again for a what-if run on that history, the capacity plans, a lending ledger, the share
change requests (list and one), an agreement with its promises, and the admin pages. Headless
Chromium is Debian's
``/usr/bin/chromium``; Playwright never downloads a browser here.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Every page is taken at both widths the layout is checked at (tests/e2e/test_layout.py).
WIDTHS: dict[str, Any] = {
    "narrow": {"width": 400, "height": 900},
    "wide": {"width": 1400, "height": 1000},
}
WORKER = [sys.executable, "-m", "celery", "-A", "governance", "worker"]
WORKER += ["--pool", "solo", "--loglevel", "WARNING"]
# Scheduling and what-if replays (the what-if picture waits for one): both queues.
WORKER += ["--queues", f"celery,{os.environ.get('WHATIF_QUEUE') or 'whatif'}"]


def say(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except Exception:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer within {timeout:.0f} s") from None
            time.sleep(0.3)


def _stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def local_server(worker: bool) -> Iterator[str]:
    """migrate + load_demo + runserver (and a Celery worker) on the configured database."""
    from scripts.common import data_dir, services

    env = dict(os.environ)
    # Real-time pace: the demo's running jobs stay running while the pictures are taken.
    env.setdefault("DEMO_TIME_FACTOR", "1")
    # One sign-in per demo user and width, from one address: above the per-address limit.
    env.setdefault("THROTTLE_SIGN_IN_RATE", "1000/min")
    with services(env, data_dir()):
        manage = [sys.executable, "manage.py"]
        say("migrate and load the demo data")
        subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        subprocess.run([*manage, "load_demo"], cwd=ROOT, env=env, check=True)
        port = free_port()
        children: list[subprocess.Popen[bytes]] = []
        log = open(os.devnull, "wb")  # noqa: SIM115 - closed below
        try:
            say(f"runserver on 127.0.0.1:{port}")
            children.append(
                subprocess.Popen(
                    [*manage, "runserver", f"127.0.0.1:{port}", "--noreload", "--insecure"],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            )
            if worker:
                say("a Celery worker, so the demo's jobs get scheduled")
                children.append(
                    subprocess.Popen(
                        WORKER,
                        cwd=ROOT,
                        env=env,
                        stdout=log,
                        stderr=log,
                        start_new_session=True,
                    )
                )
            base = f"http://127.0.0.1:{port}"
            wait_http(f"{base}/login/")
            if worker:
                time.sleep(4)  # the first cycles admit the demo's jobs
            yield base
        finally:
            for child in reversed(children):
                _stop(child)
            log.close()


def shoot(base: str, names: set[str] | None) -> list[Path]:
    saved: list[Path] = []
    for width, viewport in WIDTHS.items():
        saved += _shoot(base, names, width, viewport)
    return saved


def _shoot(base: str, names: set[str] | None, width: str, viewport: Any) -> list[Path]:
    from playwright.sync_api import expect, sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        pages: dict[str, Any] = {}

        def as_user(username: str) -> Any:
            if username not in pages:
                context = browser.new_context(base_url=base, viewport=viewport)
                context.set_default_timeout(15_000)
                page = context.new_page()
                page.goto("/login/")
                page.fill("#id_username", username)
                page.fill("#id_password", username)
                page.get_by_role("button", name="Sign in").click()
                page.wait_for_url(lambda url: "/login/" not in url)
                pages[username] = page
            return pages[username]

        def save(name: str, page: Any) -> None:
            page.wait_for_load_state("networkidle")
            path = OUT / f"{name}-{width}.png"
            page.screenshot(path=str(path), full_page=True)
            saved.append(path)
            say(f"{path.relative_to(ROOT)}  ({page.url})")

        def overview() -> None:
            page = as_user("admin")
            page.goto("/")
            save("overview", page)

        def queue() -> None:
            page = as_user("admin")
            page.goto("/queues/")
            page.get_by_role("link", name="gpu-fleet").first.click()
            save("queue", page)

        def share_editor() -> None:
            page = as_user("admin")
            page.goto("/queues/")
            page.get_by_role("link", name="gpu-fleet").first.click()
            page.get_by_role("link", name="vision-training").first.click()
            page.get_by_role("link", name="Edit share").click()
            borrow = page.get_by_label("Borrow limit (%)")
            borrow.fill("")
            borrow.press_sequentially("0")
            page.get_by_label("Reason for this change (required)").fill(
                "Vision stops borrowing while language catches up."
            )
            expect(page.locator("#preview .diff")).to_contain_text("Borrow limit")
            save("share-editor", page)

        def job() -> None:
            page = as_user("member-vision")
            page.goto("/jobs/")
            page.get_by_role("link", name="detector-v7-train").first.click()
            save("job", page)

        def deadline() -> None:
            # A job with a deadline, submitted on the form as a lead would: its page says
            # by when it must finish and whether each choice still can.
            page = as_user("lead-vision")
            page.goto("/jobs/new/")
            share = page.locator("#id_share option", has_text="vision-training").first
            page.select_option("#id_share", share.get_attribute("value"))
            page.get_by_label("Name", exact=True).fill("report-before-review")
            page.get_by_label("Preference 1").select_option("ml.p4d.24xlarge")
            page.get_by_label("Count 1").fill("1")
            page.get_by_label("Expected run time 1 (seconds)").fill("7200")
            page.get_by_label("Preference 2").select_option("ml.g5.48xlarge")
            page.get_by_label("Count 2").fill("2")
            due = time.gmtime(time.time() + 6 * 3600)
            page.get_by_label("Deadline date").fill(time.strftime("%Y-%m-%d", due))
            page.get_by_label("Deadline time").fill(time.strftime("%H:%M", due))
            page.get_by_label("Time zone").fill("UTC")
            page.get_by_role("button", name="Submit job").click()
            expect(page.locator("#job-status")).to_be_visible()
            save("deadline", page)

        def workload() -> None:
            page = as_user("lead-vision")
            page.goto("/teams/")
            page.get_by_role("link", name="vision/finetune").first.click()
            save("workload", page)

        def ledger() -> None:
            page = as_user("admin")
            page.goto("/queues/")
            page.get_by_role("link", name="inference-pool").first.click()
            page.get_by_role("link", name="speech-serving").first.click()
            page.get_by_role("link", name="Lending ledger").click()
            save("ledger", page)

        def change_requests() -> None:
            page = as_user("admin")
            page.goto("/change-requests/")
            save("change-requests", page)
            page.locator("main table.change-requests td a").first.click()
            save("change-request", page)

        def agreement() -> None:
            # The speech agreement's promise, judged on the demo's history (broken).
            page = as_user("admin")
            page.goto("/agreements/")
            page.get_by_role("link", name="Speech evaluation allocation").click()
            expect(page.locator("#promises")).to_be_visible()
            save("agreement", page)

        def team() -> None:
            page = as_user("lead-vision")
            page.goto("/teams/")
            expect(page.locator(".team-block").first).to_contain_text("Pending jobs")
            save("team", page)

        def exceptions() -> None:
            page = as_user("reviewer")
            page.goto("/exceptions/")
            save("exceptions", page)

        def agreements() -> None:
            page = as_user("lead-vision")
            page.goto("/agreements/")
            save("agreements", page)

        def audit() -> None:
            page = as_user("reviewer")
            page.goto("/audit/")
            save("audit", page)

        def signals() -> None:
            page = as_user("reviewer")
            page.goto("/signals/")
            page.locator('form.filters select[name="queue"]').select_option(label="gpu-fleet")
            page.locator('form.filters select[name="preset"]').select_option("7d")
            page.get_by_role("button", name="Show").click()
            expect(page.locator("#signals-results")).to_contain_text("gpu-fleet, from")
            save("signals", page)

        def whatif() -> None:
            page = as_user("admin")
            page.goto("/queues/")
            page.get_by_role("link", name="gpu-fleet").first.click()
            page.get_by_role("link", name=re.compile("What-if")).click()
            share = page.locator("fieldset", has=page.get_by_text("Share language-pretraining"))
            share.locator('input[name$="-borrow_limit"]').fill("0")
            page.get_by_role("button", name="Run the what-if").click()
            expect(page.locator(".whatif-summary")).to_be_visible(timeout=120_000)
            save("whatif", page)

        def plans() -> None:
            page = as_user("admin")
            page.goto("/plans/")
            save("plans", page)

        def administration() -> None:
            page = as_user("admin")
            page.goto("/admin/")
            save("admin", page)

        shots: dict[str, Callable[[], None]] = {
            "overview": overview,
            "queue": queue,
            "share-editor": share_editor,
            "job": job,
            "deadline": deadline,
            "team": team,
            "workload": workload,
            "ledger": ledger,
            "change-requests": change_requests,
            "exceptions": exceptions,
            "agreements": agreements,
            "agreement": agreement,
            "audit": audit,
            "signals": signals,
            "whatif": whatif,
            "plans": plans,
            "admin": administration,
        }
        failures = []
        for name, take in shots.items():
            if names and name not in names:
                continue
            try:
                take()
            except Exception as exc:  # one broken page must not cost the others
                failures.append(name)
                say(f"{name}: FAILED {type(exc).__name__}: {str(exc).splitlines()[0]}")
        browser.close()
    if failures:
        raise SystemExit(f"screenshots failed: {', '.join(failures)}")
    return saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", help="a running server with the demo data")
    parser.add_argument("--no-worker", action="store_true", help="start no Celery worker")
    parser.add_argument("only", nargs="*", help="take only these (e.g. overview audit)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "governance.settings")
    names = set(args.only) or None
    if args.base_url:
        shoot(args.base_url.rstrip("/"), names)
        return
    with local_server(worker=not args.no_worker) as base:
        shoot(base, names)


if __name__ == "__main__":
    main()
