"""The layout at 400 px and 1400 px (issues 13 and 33), in headless Chromium: every page
fits its window (nothing wider, no action hidden off to the right or in a scrolling box),
nothing is cut (text clipped by its box, a select too narrow for its choice, chart text
past its chart), nothing overlaps (headers, numbers and bars, axis labels), messages are
never squeezed into a narrow column; the usage bars keep their numbers readable, the
limit marker sits where the limit is, and the navigation folds behind a Menu button on a
narrow screen.

The demo world is scheduled in this process (``run_cycle``), so the bars show
running work; no worker is needed for pictures of a state.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from governance.models import Job, JobQueue, Share
from scheduler.cycle.run import run_cycle

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WIDTHS = {"narrow": 400, "wide": 1400}

# Run in the page: what is wrong with its layout, as sentences (empty when nothing is).
LAYOUT_PROBLEMS = r"""
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
  const W = window.innerWidth;
  const words = (el) => (el.textContent || el.value || "").trim().replace(/\s+/g, " ").slice(0, 40);
  const visible = (el) => {
    if (!shown(el)) return false;
    for (let e = el; e; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.display === "none" || s.visibility === "hidden") return false;
      if (s.position === "absolute" && s.clip && s.clip !== "auto") return false;
    }
    return true;
  };
  const main = document.querySelector("main") || document.body;
  // Actions off to the right of the window, or hidden in a box that scrolls sideways.
  const actions = "button, input:not([type=hidden]), select, textarea, a.button, td:last-child a";
  for (const el of main.querySelectorAll(actions)) {
    if (!visible(el)) continue;
    const r = box(el);
    if (r.right > W + 1) {
      problems.push(`off screen: ${el.tagName.toLowerCase()} "${words(el)}"`);
      continue;
    }
    for (let p = el.parentElement; p && p !== main; p = p.parentElement) {
      const s = getComputedStyle(p);
      if (["auto", "scroll", "hidden"].includes(s.overflowX) && p.scrollWidth > p.clientWidth + 1) {
        const pr = box(p);
        if (r.right > pr.right + 1 || r.left < pr.left - 1)
          problems.push(`hidden in a scrolling box: ${el.tagName.toLowerCase()} "${words(el)}"`);
        break;
      }
    }
  }
  // Text cut by its box (an ellipsis, or overflow hidden).
  for (const el of main.querySelectorAll("*")) {
    if (el.closest("svg") || !visible(el)) continue;
    const s = getComputedStyle(el);
    if (!["hidden", "clip"].includes(s.overflowX) && s.textOverflow !== "ellipsis") continue;
    if (el.scrollWidth > el.clientWidth + 1 && el.textContent.trim())
      problems.push(`text cut: "${words(el)}" (${el.scrollWidth} px in ${el.clientWidth})`);
  }
  // A select too narrow for the choice it shows ("ml.p" for ml.p4d.24xlarge).
  const pen = document.createElement("canvas").getContext("2d");
  for (const sel of main.querySelectorAll("select:not([multiple])")) {
    const chosen = sel.selectedOptions[0];
    if (!visible(sel) || !chosen) continue;
    const s = getComputedStyle(sel);
    pen.font = `${s.fontWeight} ${s.fontSize} ${s.fontFamily}`;
    const room = sel.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight) - 16;
    if (pen.measureText(chosen.text).width > room + 1)
      problems.push(`select cut: "${chosen.text}"`);
  }
  // Chart text past its chart; labels of an axis on top of each other.
  for (const svg of main.querySelectorAll("svg")) {
    if (!visible(svg)) continue;
    for (const t of svg.querySelectorAll("text")) {
      const r = box(t), sr = box(svg);
      if (r.width && (r.right > sr.right + 1 || r.left < sr.left - 1))
        problems.push(`chart text cut: "${words(t)}"`);
    }
  }
  const axes = ".hc-x, .hc-y, .hbar-scale, .pt-axis, .legend";
  for (const axis of main.querySelectorAll(axes)) {
    const labels = [...axis.children].filter((c) => visible(c) && c.textContent.trim());
    for (let i = 0; i < labels.length; i++)
      for (let j = i + 1; j < labels.length; j++)
        if (overlap(box(labels[i]), box(labels[j])))
          problems.push(`labels overlap: "${words(labels[i])}" / "${words(labels[j])}"`);
    for (const label of labels) {
      const card = label.closest(".card") || main;
      if (box(label).right > box(card).right + 1 || box(label).left < box(card).left - 1)
        problems.push(`label past its card: "${words(label)}"`);
    }
  }
  // Messages squeezed into a narrow column (one word a line).
  for (const list of main.querySelectorAll(".errorlist")) {
    if (visible(list) && box(list).width < 200)
      problems.push(`message squeezed to ${Math.round(box(list).width)} px: "${words(list)}"`);
  }
  return problems;
}
"""


@pytest.fixture
def layout_world(transactional_db: Any, settings: Any) -> Any:
    from django.contrib.auth import get_user_model

    from governance import demo
    from governance.demo import history as demo_history
    from governance.services import jobs

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    demo.load()
    # The usage history charts too, as ./scripts/run's demo draws them (load_demo).
    # Without them the charts appeared only when the cycles happened to straddle a
    # minute, and their width went untested.
    demo_history.load_history_and_rollups()
    for queue in JobQueue.objects.all():
        run_cycle(queue.pk)
    share = Share.objects.get(name="vision-training")
    limits = {row.instance_type.name: row.count for row in share.limits.all()}
    type_name, limit = sorted(limits.items())[0]
    capacity = share.queue.capacities.get(instance_type__name=type_name).count
    lead = get_user_model().objects.get(username="lead-vision")
    hopeless = jobs.job_submit(
        actor=lead,
        share=share,
        name="layout-too-big",
        preferences=[{"instance_type": type_name, "count": capacity + 1}],
        priority=1,
        duration=600,
    )
    # A job with a deadline (docs/scheduling.md#deadlines): its page says by when it
    # must finish and whether each choice still can.
    due = jobs.job_submit(
        actor=lead,
        share=share,
        name="layout-deadline",
        preferences=[{"instance_type": type_name, "count": limit}],
        priority=1,
        duration=3600,
        deadline=timezone.now() + timedelta(hours=3),
    )
    return {"share": share, "job": hopeless, "deadline_job": due, "limit": limit}


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


def _every_page() -> list[tuple[str, str]]:
    """(who, path) of every page, each taken as a role that uses it."""
    from django.contrib.auth import get_user_model

    from governance.models import (
        Agreement,
        Decision,
        InstanceType,
        PriorityDefinition,
        PriorityException,
        ShareChangeRequest,
        Team,
        WhatIf,
        Workload,
    )

    queue = JobQueue.objects.get(name="gpu-fleet")
    share = Share.objects.get(name="vision-training")
    pending = Job.objects.filter(state="PENDING").order_by("pk").first()
    running = Job.objects.filter(state="RUNNING").order_by("pk").first()
    assert pending is not None and running is not None
    vision = Team.objects.get(name="vision")
    workload = Workload.objects.filter(team=vision).order_by("pk").first()
    deadline = Job.objects.filter(deadline__isnull=False).order_by("pk").first()
    promised = Agreement.objects.filter(promises__isnull=False).order_by("pk").first()
    assert workload is not None and deadline is not None and promised is not None
    ids = {
        "team": Team.objects.order_by("pk").first().pk,
        "exception": PriorityException.objects.order_by("pk").first().pk,
        "agreement": Agreement.objects.order_by("pk").first().pk,
        "band": PriorityDefinition.objects.order_by("pk").first().pk,
        "type": InstanceType.objects.order_by("pk").first().pk,
        "user": get_user_model().objects.get(username="lead-vision").pk,
        "whatif": WhatIf.objects.get().pk,
        "decision": Decision.objects.order_by("pk").first().pk,
        "workload": Workload.objects.get(name="language/finetune").pk,
    }
    return [
        ("admin", "/"),
        ("admin", "/queues/"),
        ("admin", f"/queues/{queue.pk}/"),
        ("admin", f"/shares/{share.pk}/"),
        ("admin", f"/shares/{share.pk}/edit/"),
        ("admin", f"/shares/{share.pk}/ledger/"),
        ("lead-vision", f"/shares/{share.pk}/request/"),
        ("admin", "/change-requests/"),
        ("admin", f"/change-requests/{ShareChangeRequest.objects.order_by('pk').first().pk}/"),
        ("admin", f"/queues/{queue.pk}/slurm/"),
        ("admin", "/plans/"),
        ("admin", "/plans/new/"),
        ("lead-vision", "/teams/"),
        ("lead-vision", f"/teams/{ids['team']}/"),
        ("lead-vision", f"/teams/{vision.pk}/workloads/new/"),
        ("lead-vision", f"/workloads/{workload.pk}/"),
        ("lead-vision", f"/workloads/{workload.pk}/edit/"),
        ("admin", "/jobs/"),
        ("lead-vision", "/jobs/new/"),
        ("admin", f"/jobs/{pending.pk}/"),
        ("admin", f"/jobs/{running.pk}/"),
        ("lead-vision", f"/jobs/{deadline.pk}/"),
        ("lead-vision", f"/decisions/{ids['decision']}/"),
        ("admin", "/account/tokens/"),
        ("reviewer", "/exceptions/"),
        ("lead-vision", "/exceptions/new/"),
        ("reviewer", f"/exceptions/{ids['exception']}/"),
        ("admin", "/priorities/"),
        ("admin", "/priorities/new/"),
        ("admin", f"/priorities/{ids['band']}/edit/"),
        ("admin", "/agreements/"),
        ("admin", "/agreements/new/"),
        ("admin", f"/agreements/{ids['agreement']}/"),
        ("admin", f"/agreements/{ids['agreement']}/edit/"),
        ("admin", f"/agreements/{promised.pk}/"),
        ("admin", f"/agreements/{promised.pk}/edit/"),
        ("reviewer", "/audit/"),
        ("reviewer", "/signals/"),
        ("admin", f"/queues/{queue.pk}/whatif/"),
        ("admin", f"/whatif/{ids['whatif']}/"),
        ("admin", "/notifications/"),
        ("admin", "/admin/"),
        ("admin", "/admin/types/new/"),
        ("admin", f"/admin/types/{ids['type']}/"),
        ("admin", "/admin/queues/new/"),
        ("admin", f"/admin/queues/{queue.pk}/"),
        ("admin", "/admin/teams/new/"),
        ("admin", f"/admin/teams/{ids['team']}/"),
        ("admin", "/admin/shares/new/"),
        ("admin", "/admin/users/new/"),
        ("admin", f"/admin/users/{ids['user']}/"),
        ("admin", "/docs/admin-guide/"),
        # certified configurations side by side, and the template builder
        ("reviewer", f"/workloads/{ids['workload']}/"),
        ("lead-language", f"/workloads/{ids['workload']}/template/"),
    ]


@pytest.fixture
def whatif_done(layout_world: Any) -> None:
    """A finished what-if on the demo's history, for its result page."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from governance.services import whatif
    from scheduler import tasks

    queue = JobQueue.objects.get(name="gpu-fleet")
    share = Share.objects.filter(queue=queue).order_by("name").first()
    now = timezone.now()
    run = whatif.whatif_request(
        actor=get_user_model().objects.get(username="admin"),
        queue=queue,
        start=now - timedelta(hours=6),
        stop=now,
        proposal={"shares": {share.name: {"borrow_limit": 0}}, "capacity": {}},
    )
    tasks.run_whatif(run.pk)


@pytest.mark.parametrize("width", list(WIDTHS))
def test_every_page_fits_with_nothing_cut_or_overlapping(
    layout_world: Any, whatif_done: None, sign_in: Any, width: str
) -> None:
    pages: dict[str, Any] = {}
    found: dict[str, list[str]] = {}
    for who, path in _every_page():
        if who not in pages:
            pages[who] = sign_in(who)
            pages[who].set_viewport_size({"width": WIDTHS[width], "height": 900})
        page = pages[who]
        response = page.goto(path)
        assert response is not None and response.status == 200, path
        page.wait_for_load_state("networkidle")
        problems = page.evaluate(LAYOUT_PROBLEMS)
        if problems:
            found[path] = problems
    assert found == {}, f"at {WIDTHS[width]} px: {found}"


@pytest.mark.parametrize("width", list(WIDTHS))
def test_forms_with_their_messages_keep_them_readable(
    layout_world: Any, sign_in: Any, width: str
) -> None:
    """The job form's type column shows the whole name of the type chosen (it was 55 px:
    'ml.p' for both ml.p4d and ml.p5), and a row's messages are on a line across the
    table (they were one word a line in the count column), here and in the share editor."""
    share = Share.objects.get(name="vision-training")
    types = sorted(share.limits.values_list("instance_type__name", flat=True))
    longest = max(types, key=len)
    lead = sign_in("lead-vision")
    lead.set_viewport_size({"width": WIDTHS[width], "height": 900})
    lead.goto("/jobs/new/")
    lead.evaluate("document.querySelector('form[data-share-types]').noValidate = true")
    lead.select_option("#id_share", str(share.pk))
    lead.select_option('select[name="pref_type_0"]', longest)
    check(lead, f"job form with {longest} chosen, {width}")
    type_box = lead.locator('select[name="pref_type_0"]').bounding_box()
    assert type_box["width"] >= 150
    lead.fill("#id_name", "layout-errors")
    lead.fill('input[name="pref_count_0"]', "0")
    lead.select_option('select[name="pref_type_1"]', longest)  # the same type twice
    lead.fill('input[name="pref_count_1"]', "1")
    lead.get_by_role("button", name="Submit job").click()
    expect(lead.locator("tr.row-errors .errorlist").first).to_be_visible()
    check(lead, f"job form with its messages, {width}")

    admin = sign_in("admin")
    admin.set_viewport_size({"width": WIDTHS[width], "height": 900})
    admin.goto(f"/shares/{share.pk}/edit/")
    admin.locator("#id_limit_count_0").fill("-4")
    admin.get_by_label("Reason for this change (required)").fill("layout check")
    admin.get_by_role("button", name="Save share").click()
    expect(admin.locator("tr.row-errors .errorlist").first).to_be_visible()
    check(admin, f"share editor with its messages, {width}")


def test_plan_timeline_labels_now_where_its_line_is(layout_world: Any, sign_in: Any) -> None:
    """The 'now' label stands at the red line (it was centred while the line was at the
    left), and a short or ended plan's name is whole (it was cut to 'vis')."""
    admin = sign_in("admin")
    admin.goto("/plans/")
    line = admin.locator(".pt-now").first.bounding_box()
    label = admin.locator(".pt-now-label").first.bounding_box()
    assert label["x"] - 3 <= line["x"] <= label["x"] + label["width"] + 3
    check(admin, "plans")
