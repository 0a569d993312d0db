"""Issue 13, done when: an admin sets up a new queue with two types, two teams, two
shares and a reviewer entirely in the browser, then a lead submits a job that runs; the
audit trail shows every step with names.

It starts from an empty installation: one admin made by ``manage.py create_admin`` (the
only step outside the browser, as in docs/admin-guide.md), no demo data. A real Celery
worker schedules the job, and the simulated fleet runs it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from governance.models import AuditEntry, Job, JobState, Share
from tests.e2e.conftest import UI_TIMEOUT_MS, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORDS = {
    "ada": "ada-admin-pass-phrase",
    "lena": "lena-lead-pass-phrase",
    "mia": "mia-lead-pass-phrase",
    "rob": "rob-reviewer-pass-phrase",
}


@pytest.fixture
def empty_install(
    transactional_db: Any, celery_worker_process: Any, settings: Any, monkeypatch: Any
) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    monkeypatch.setenv("ADMIN_PASSWORD", PASSWORDS["ada"])
    call_command("create_admin", "ada")


@pytest.fixture
def signed_in(browser: Any, live_server: Any) -> Iterator[Callable[[str], Any]]:
    """``signed_in(username)``: a page in its own browser context, signed in through the
    sign-in form with the password the admin gave that user."""
    contexts: list[Any] = []

    def _sign_in(username: str) -> Any:
        context = browser.new_context(
            base_url=live_server.url, viewport={"width": 1400, "height": 1000}
        )
        context.set_default_timeout(UI_TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.goto("/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", PASSWORDS[username])
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: "/login/" not in url)
        return page

    yield _sign_in
    for context in contexts:
        context.close()


def open_admin(page: Any) -> None:
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Admin").click()
    expect(page.locator("h1")).to_have_text("Admin")


def saved(page: Any, message: str) -> None:
    expect(page.locator(".messages")).to_contain_text(message)


def create_type(page: Any, name: str, accelerators: str, price: str) -> None:
    open_admin(page)
    page.get_by_role("link", name="New instance type").click()
    page.get_by_label("Name").fill(name)
    page.get_by_label("Accelerators").fill(accelerators)
    page.get_by_label("Hourly price").fill(price)
    page.get_by_label("Reason").fill(f"The provider offers {name}.")
    page.get_by_role("button", name="Create instance type").click()
    saved(page, f"Instance type {name} created.")


def create_user(page: Any, username: str, roles: list[str]) -> None:
    open_admin(page)
    page.get_by_role("link", name="New user").click()
    page.get_by_label("Username").fill(username)
    page.get_by_label("Email").fill(f"{username}@example.com")
    page.get_by_label("Password").fill(PASSWORDS[username])
    for role in roles:
        page.locator(f'input[name="roles"][value="{role}"]').check()
    page.get_by_label("Reason").fill(f"{username} joins.")
    page.get_by_role("button", name="Create user").click()
    saved(page, f"User {username} created.")


def create_team(page: Any, name: str, lead: str) -> None:
    open_admin(page)
    page.get_by_role("link", name="New team").click()
    page.get_by_label("Name").fill(name)
    page.locator("#id_leads").select_option([lead])
    page.get_by_label("Reason").fill(f"Team {name} starts on the research queue.")
    page.get_by_role("button", name="Create team").click()
    saved(page, f"Team {name} created.")


def create_share(
    page: Any, name: str, team: str, limits: dict[str, str], policy: str, borrow: str = ""
) -> None:
    open_admin(page)
    page.get_by_role("link", name="New share").click()
    page.get_by_label("Queue").select_option(label="research")
    page.get_by_label("Team").select_option(label=team)
    page.get_by_label("Share name").fill(name)
    for i, (type_name, count) in enumerate(limits.items()):
        page.locator(f'select[name="limit_type_{i}"]').select_option(type_name)
        page.locator(f'input[name="limit_count_{i}"]').fill(count)
    page.get_by_label("Policy").select_option(policy)
    page.get_by_label("Borrow limit (%)").fill(borrow)
    page.get_by_label("Reason (required)").fill(f"{team}'s entitlement in research.")
    page.get_by_role("button", name="Create share").click()
    saved(page, f"Share {name} created.")


def test_an_admin_sets_up_a_queue_in_the_browser_and_a_lead_runs_a_job(
    empty_install: None, signed_in: Any
) -> None:
    admin = signed_in("ada")

    # Two instance types, then the people: two leads and a reviewer.
    create_type(admin, "ml.g5.xlarge", "1", "1.408")
    create_type(admin, "ml.g6.xlarge", "1", "0.805")
    create_user(admin, "lena", [])
    create_user(admin, "mia", [])
    create_user(admin, "rob", ["reviewer"])

    # The queue, run by the simulated fleet, with capacity of both types.
    open_admin(admin)
    admin.get_by_role("link", name="New queue").click()
    admin.get_by_label("Name").fill("research")
    admin.get_by_label("Description").fill("The research cluster.")
    admin.get_by_label("Executor").select_option("simulated")
    admin.get_by_label("ml.g5.xlarge").fill("2")
    admin.get_by_label("ml.g6.xlarge").fill("1")
    admin.get_by_label("Reason").fill("The research cluster comes online.")
    admin.get_by_role("button", name="Create queue").click()
    saved(admin, "Queue research created.")

    # Two teams, each with its lead, and a share for each.
    create_team(admin, "alpha", "lena")
    create_team(admin, "beta", "mia")
    create_share(
        admin,
        "alpha-main",
        "alpha",
        {"ml.g5.xlarge": "1", "ml.g6.xlarge": "1"},
        "LEND_AND_BORROW",
        "100",
    )
    expect(admin).to_have_url(re.compile(r"/shares/\d+/$"))
    create_share(admin, "beta-main", "beta", {"ml.g5.xlarge": "1"}, "RESERVE")

    # The admin page now lists it all by name.
    open_admin(admin)
    for text in ("research", "2 \u00d7 ml.g5.xlarge", "alpha-main", "beta-main", "lena", "rob"):
        expect(admin.locator("main")).to_contain_text(text)

    # Lena, alpha's lead, signs in with the password the admin gave her and submits a job.
    lead = signed_in("lena")
    lead.goto("/jobs/new/")
    share = Share.objects.get(name="alpha-main")
    lead.locator("#id_share").select_option(str(share.pk))
    lead.locator("#id_name").fill("alpha-first-run")
    lead.locator("#id_priority").fill("10")
    lead.locator('select[name="pref_type_0"]').select_option("ml.g5.xlarge")
    lead.locator("#id_count").fill("1")
    lead.locator("#id_duration").fill("360000")
    lead.get_by_role("button", name="Submit job").click()
    expect(lead).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="alpha-first-run")
    assert job.submitter.get_username() == "lena"

    # The worker admits it and the simulated fleet runs it; the job page says so.
    wait_for(lambda: Job.objects.get(pk=job.pk).state == JobState.RUNNING, timeout=30)
    lead.reload()
    expect(lead.locator("main")).to_contain_text("Running")

    # The reviewer can read the audit trail; every step is there, by name, with its actor.
    reviewer = signed_in("rob")
    reviewer.goto("/audit/")
    rows = reviewer.locator("#audit-results tbody tr")
    steps: list[tuple[str, str, str | None]] = [
        ("instance_type.created", "ml.g5.xlarge", "ada"),
        ("instance_type.created", "ml.g6.xlarge", "ada"),
        ("user.created", "lena", "ada"),
        ("user.created", "mia", "ada"),
        ("user.created", "rob", "ada"),
        ("queue.created", "research", "ada"),
        ("team.created", "alpha", "ada"),
        ("team.created", "beta", "ada"),
        ("share.created", "alpha-main", "ada"),
        ("share.created", "beta-main", "ada"),
        ("job.submitted", "alpha-first-run", "lena"),
        ("job.admitted", "alpha-first-run", None),  # the scheduler: no person
    ]
    for event, name, actor in steps:
        row = rows.filter(has=reviewer.locator(f"span.badge:text-is('{event}')")).filter(
            has_text=name
        )
        expect(row).to_have_count(1)
        if actor is not None:
            expect(row).to_contain_text(actor)
    # The reasons typed in the forms are on the entries too.
    expect(rows.filter(has_text="The research cluster comes online.")).to_have_count(1)
    recorded = set(AuditEntry.objects.values_list("event_type", flat=True))
    assert {event for event, _, _ in steps} <= recorded
