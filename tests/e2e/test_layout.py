"""The layout at 400 px and 1400 px (issue 13), in headless Chromium: no page is wider
than the window, the usage bars keep their numbers readable (no number under a bar, no
two headers on top of each other), the limit marker sits where the limit is, and the
navigation folds behind a Menu button on a narrow screen.

The demo world is scheduled in this process (``bridge.run_cycle``), so the bars show
running work; no worker is needed for pictures of a state.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from governance.models import Job, JobQueue, Share
from scheduler import bridge

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WIDTHS = {"narrow": 400, "wide": 1400}

# Run in the page: what is wrong with its layout, as sentences (empty when nothing is).
LAYOUT_PROBLEMS = """
() => {
  const problems = [];
  const root = document.scrollingElement;
  if (root.scrollWidth > window.innerWidth) {
    problems.push(`page is ${root.scrollWidth} px wide in a ${window.innerWidth} px window`);
  }
  const box = (el) => el.getBoundingClientRect();
  const overlap = (a, b) =>
    a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const shown = (el) => { const r = box(el); return r.width > 0 && r.height > 0; };
  for (const row of document.querySelectorAll(".usage-table tbody tr")) {
    const bar = row.querySelector(".bar");
    const numbers = [...row.querySelectorAll("td.num")];
    if (!bar) continue;
    const where = row.querySelector("td a")?.textContent || "a row";
    if (box(bar).width < 100) problems.push(`${where}: the bar is ${box(bar).width} px wide`);
    for (const cell of numbers) {
      if (!shown(cell)) { problems.push(`${where}: a number is hidden`); continue; }
      if (overlap(box(cell), box(bar))) problems.push(`${where}: the bar covers a number`);
      if (cell.scrollWidth > cell.clientWidth + 1)
        problems.push(`${where}: "${cell.textContent.trim()}" does not fit its cell`);
      const r = box(cell);
      if (r.right > window.innerWidth + 1) problems.push(`${where}: a number is off screen`);
    }
    for (let i = 0; i < numbers.length; i++)
      for (let j = i + 1; j < numbers.length; j++)
        if (overlap(box(numbers[i]), box(numbers[j])))
          problems.push(`${where}: two numbers overlap`);
    const mark = row.querySelector(".limit-mark");
    if (mark) {
      const at = parseFloat(mark.style.left) / 100;
      const expected = box(bar).left + at * box(bar).width;
      if (Math.abs(box(mark).left + 1 - expected) > 3)
        problems.push(`${where}: the limit marker is at ${box(mark).left}, not ${expected}`);
    }
  }
  for (const head of document.querySelectorAll("thead tr")) {
    if (box(head.closest("thead")).width <= 1) continue;  // visually hidden (stacked rows)
    const cells = [...head.querySelectorAll("th")].filter(shown);
    for (let i = 0; i + 1 < cells.length; i++)
      if (overlap(box(cells[i]), box(cells[i + 1])))
        problems.push(`headers overlap: ${cells[i].textContent} / ${cells[i + 1].textContent}`);
  }
  return problems;
}
"""


@pytest.fixture
def layout_world(transactional_db: Any, settings: Any) -> Any:
    from django.contrib.auth import get_user_model

    from governance import demo, demo_history
    from governance.services import jobs

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    demo.load()
    # The usage history charts too, as ./scripts/run's demo draws them (load_demo).
    # Without them the charts appeared only when the cycles happened to straddle a
    # minute, and their width went untested.
    demo_history.load_history_and_rollups()
    for queue in JobQueue.objects.all():
        bridge.run_cycle(queue.pk)
    share = Share.objects.get(name="vision-training")
    limits = {row.instance_type.name: row.count for row in share.limits.all()}
    type_name, limit = sorted(limits.items())[0]
    capacity = share.queue.capacities.get(instance_type__name=type_name).count
    hopeless = jobs.job_submit(
        actor=get_user_model().objects.get(username="lead-vision"),
        share=share,
        name="layout-too-big",
        preferences=[{"instance_type": type_name, "count": capacity + 1}],
        priority=1,
        duration=600,
    )
    return {"share": share, "job": hopeless, "limit": limit}


def check(page: Any, what: str) -> None:
    page.wait_for_load_state("networkidle")
    problems = page.evaluate(LAYOUT_PROBLEMS)
    assert problems == [], f"{what}: {problems}"


@pytest.mark.parametrize("width", list(WIDTHS))
def test_pages_fit_the_window_with_readable_bars(
    layout_world: Any, sign_in: Any, width: str
) -> None:
    share, job = layout_world["share"], layout_world["job"]
    admin = sign_in("admin")
    admin.set_viewport_size({"width": WIDTHS[width], "height": 900})

    admin.goto("/")
    expect(admin.locator(".usage-history .history-type").first).to_be_visible()
    check(admin, f"overview {width}")
    # Key numbers: every share row shows its limit, visibly, beside a bar of real width.
    row = admin.locator(".usage-table tbody tr", has=admin.get_by_role("link", name=share.name))
    expect(row.first.locator("td.num").first).to_be_visible()
    expect(row.first.locator("td.num").first).to_have_text(str(layout_world["limit"]))

    admin.goto(f"/queues/{share.queue_id}/")
    check(admin, f"queue {width}")
    expect(admin.get_by_text("Can never start as configured")).to_be_visible()

    admin.goto(f"/shares/{share.pk}/")
    check(admin, f"share page {width}")

    admin.goto(f"/shares/{share.pk}/edit/")
    check(admin, f"share editor {width}")
    expect(admin.get_by_role("button", name="Preview")).to_be_visible()
    admin.get_by_label("Reason for this change (required)").fill("layout check")
    count = admin.locator("#id_limit_count_0")
    count.fill("")
    count.press_sequentially("60")
    expect(admin.locator("#preview")).to_contain_text("Limits would add up to more than")
    check(admin, f"share editor with its preview {width}")

    # An agreement with its promises (the demo's, evaluated on its history) and review.
    agreement = share.agreements.get()
    admin.goto(f"/agreements/{agreement.pk}/")
    expect(admin.locator("#promises svg.promise-chart").first).to_be_visible()
    check(admin, f"agreement {width}")

    admin.goto(f"/jobs/{job.pk}/")
    check(admin, f"job {width}")
    expect(admin.get_by_text("This job can never start as configured.")).to_be_visible()

    reviewer = sign_in("reviewer")
    reviewer.set_viewport_size({"width": WIDTHS[width], "height": 900})
    reviewer.goto("/audit/")
    check(reviewer, f"audit {width}")
    expect(reviewer.locator("#audit-results tbody tr").first).to_be_visible()


def test_navigation_folds_behind_a_menu_on_a_narrow_screen(layout_world: Any, sign_in: Any) -> None:
    page = sign_in("admin")
    page.set_viewport_size({"width": 400, "height": 900})
    page.goto("/")
    header = page.locator("header.topbar")
    assert header.bounding_box()["height"] < 60  # not 260 px of links
    queues = page.get_by_role("link", name="Queues", exact=True)
    expect(queues).to_be_hidden()
    menu = page.locator("label.nav-toggle-label")
    expect(menu).to_contain_text("Menu")
    menu.click()
    expect(queues).to_be_visible()
    queues.click()
    expect(page).to_have_url(f"{page.url.split('/queues')[0].rstrip('/')}/queues/")
    page.set_viewport_size({"width": 1400, "height": 900})
    expect(page.get_by_role("link", name="Audit trail")).to_be_visible()
    expect(menu).to_be_hidden()
    assert Job.objects.filter(name="layout-too-big").exists()
