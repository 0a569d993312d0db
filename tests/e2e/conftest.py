"""Browser journeys: headless Chromium (Debian's, never a downloaded one) driving a live
server, with a real Celery worker scheduling the test database.

Playwright's sync API runs an asyncio loop in the test thread, so Django's async-unsafe
guard would refuse the ORM calls the tests make to set up and check data: it is lifted
for the session here (the tests are still synchronous, one thread touching the ORM).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# How long a browser assertion waits for the page (the live regions poll every 2 s).
UI_TIMEOUT_MS = 10_000


def _skip_reason() -> str | None:
    if not CHROMIUM.exists() and not shutil.which("chromium"):
        return f"headless Chromium is not installed ({CHROMIUM} is absent); CI installs it"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is not installed"
    return None


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    reason = _skip_reason()
    if reason is None:
        return
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM) if CHROMIUM.exists() else shutil.which("chromium"),
            headless=True,
            args=CHROMIUM_ARGS,
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def sign_in(browser: Any, live_server: Any) -> Iterator[Callable[[str], Any]]:
    """``sign_in(username)`` -> a Page in its own browser context (own cookies), signed in.

    Demo passwords equal user names.
    """
    contexts: list[Any] = []

    def _sign_in(username: str) -> Any:
        context = browser.new_context(
            base_url=live_server.url,
            viewport={"width": 1400, "height": 1000},
            accept_downloads=True,
        )
        context.set_default_timeout(UI_TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.goto("/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", username)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: "/login/" not in url)
        return page

    yield _sign_in
    for context in contexts:
        context.close()


@pytest.fixture
def demo_world(transactional_db: Any, celery_worker_process: Any, settings: Any) -> Any:
    """The demo world, plus a one-instance queue where a raised priority must preempt.

    ``e2e-fleet`` has one ml.g5.xlarge, owned by vision's ``e2e-share`` (in-share
    preemption on): ``e2e-runner`` (priority 50) runs on it, ``e2e-urgent`` (priority 10)
    waits. Everything is written through the services, so the worker schedules it.
    """
    from django.contrib.auth import get_user_model

    from governance import demo
    from governance.models import Team
    from governance.services import capacity, jobs, shares

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    demo.load()
    User = get_user_model()
    admin = User.objects.get(username="admin")
    vision = Team.objects.get(name="vision")
    queue = capacity.queue_create(
        actor=admin,
        name="e2e-fleet",
        capacity={"ml.g5.xlarge": 1},
        description="One instance: a raised priority preempts in the share.",
    )
    share = shares.share_create(
        actor=admin,
        queue=queue,
        team=vision,
        name="e2e-share",
        policy="RESERVE",
        limits={"ml.g5.xlarge": 1},
        in_share_preemption=True,
        reason="Browser journeys.",
    )
    one_g5 = [{"instance_type": "ml.g5.xlarge", "count": 1}]
    runner = jobs.job_submit(
        actor=User.objects.get(username="member-vision"),
        share=share,
        name="e2e-runner",
        preferences=one_g5,
        priority=50,
        duration=10 * 24 * 3600,  # never finishes during the test
        checkpoint_interval=600,
    )
    urgent = jobs.job_submit(
        actor=User.objects.get(username="lead-vision"),
        share=share,
        name="e2e-urgent",
        preferences=one_g5,
        priority=10,
        duration=10 * 24 * 3600,
        checkpoint_interval=600,
    )
    return SimpleNamespace(queue=queue, share=share, runner=runner, urgent=urgent)


def wait_for(check: Callable[[], Any], timeout: float = 15.0, step: float = 0.1) -> Any:
    """Poll ``check`` until truthy; fail after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {check.__doc__ or check}")
        time.sleep(step)
