"""The Signals page's shapes: charts drawn server-side as SVG geometry, and the figures
table, every figure with a link to the jobs or audit entries behind it.

It only arranges an answer of ``selectors.scheduling.queue_signals``; the figures
themselves are ``scheduler.signals``'. Charts carry their numbers as text beside the
bars, so they read without hovering.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from governance.models import Share, Team
from governance.selectors.filters import Links
from governance.templatetags.figures import count, duration, inst_hours, money, percent

# The ticks of a chart's scale: none, half and all of its largest bar.
TICKS = (0.0, 0.5, 1.0)


@dataclass
class Segment:
    width: float  # percent of the bar area
    css: str
    href: str
    title: str


@dataclass
class BarRow:
    label: str
    label_href: str
    text: str
    segments: list[Segment] = field(default_factory=list)


@dataclass
class Chart:
    """Bars drawn as HTML (they reflow at any width, their numbers never cut): a row per
    group with its label, its bar and its figures written beside it, and a labelled scale
    under the bars."""

    title: str
    note: str
    legend: list[tuple[str, str]]
    rows: list[BarRow]
    axis: str
    ticks: list[tuple[float, str]]


@dataclass
class Cell:
    text: str
    href: str
    group: str = ""  # its column's name, for the stacked rows of a narrow screen


@dataclass
class FigureRow:
    name: str
    words: str
    cells: list[Cell]


def _drift_text(figures: dict[str, Any]) -> str:
    """``certification_drift`` in words: "vision/detector-finetune ml.g5.xlarge x2: 1.40x /
    1.45x (6 runs, drifting)"; an em dash when no certified run completed."""
    rows = figures.get("certification_drift") or []
    return (
        "; ".join(
            f"{r['workload']} {r['configuration']}: {r['p50']:.2f}x / {r['p90']:.2f}x "
            f"({r['runs']} runs{', drifting' if r['drifting'] else ''})"
            for r in rows
        )
        or "—"
    )


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}".rstrip("0").rstrip(".")
        return text + unit
    return f"{value:,}{unit}"


def group_scopes(answer: dict[str, Any], queue_id: int) -> list[tuple[str, dict[str, Any]]]:
    """(label, filter for the jobs list and the audit trail) per group, the queue first."""
    key = "team" if answer["groups"] and "team" in answer["groups"][0] else "share"
    ids: dict[str, int] = {}
    if key == "share":
        ids = dict(Share.objects.filter(queue_id=queue_id).values_list("name", "pk"))
    else:
        names = [g["team"] for g in answer["groups"]]
        ids = dict(Team.objects.filter(name__in=names).values_list("name", "pk"))
    scopes: list[tuple[str, dict[str, Any]]] = [("whole queue", {})]
    for group in answer["groups"]:
        name = group[key]
        scopes.append((name, {key: ids[name]} if name in ids else {}))
    return scopes


def _bar_chart(
    title: str,
    note: str,
    legend: list[tuple[str, str]],
    rows: list[tuple[str, str, list[tuple[float, str, str, str]], str]],
    *,
    axis: str,
    tick: Callable[[float], str],
) -> Chart:
    """``rows``: (label, label link, [(value, css, link, title)], text beside the bar);
    ``axis`` names the scale's unit and ``tick`` writes a value on it."""
    largest = max((sum(v for v, *_ in parts) for _, _, parts, _ in rows), default=0.0)
    out = []
    for label, href, parts, text in rows:
        segments = [
            Segment(round(100 * value / largest, 2), css, link, f"{seg_title}")
            for value, css, link, seg_title in parts
            if value > 0 and largest > 0
        ]
        out.append(BarRow(label, href, text, segments))
    ticks = [(100 * at, tick(at * largest)) for at in TICKS] if largest > 0 else []
    return Chart(title, note, legend, out, axis=axis, ticks=ticks)


def charts(answer: dict[str, Any], links: Links, queue_id: int) -> list[Chart]:
    """The page's charts: usage, waits, preemptions and cost per group."""
    scopes = group_scopes(answer, queue_id)
    groups = [answer["queue"], *answer["groups"]]
    usage_rows = []
    wait_rows = []
    preempt_rows = []
    cost_rows = []
    for (label, scope), fig in zip(scopes, groups, strict=True):
        admitted = links.audit(scope, "job.admitted")
        preempted = links.audit(scope, "job.preempted")
        started = links.jobs(scope, "started")
        own = sum(v["own"] for v in fig["instance_seconds"].values()) / 3600
        borrowed = sum(v["borrowed"] for v in fig["instance_seconds"].values()) / 3600
        usage_rows.append(
            (
                label,
                admitted,
                [
                    (own, "own", admitted, f"{inst_hours(own)} own"),
                    (borrowed, "borrowed", admitted, f"{inst_hours(borrowed)} borrowed"),
                ],
                f"{inst_hours(own)} own · {inst_hours(borrowed)} borrowed",
            )
        )
        wait = fig["wait_to_start"]["all"]
        p50, p90 = wait["p50"] or 0, wait["p90"] or 0
        wait_rows.append(
            (
                label,
                started,
                [
                    (float(p50), "own", started, "median wait"),
                    (float(max(0, p90 - p50)), "wait-tail", started, "p90 beyond the median"),
                ],
                f"p50 {duration(wait['p50'])} · p90 {duration(wait['p90'])}",
            )
        )
        suffered = fig["preemptions_suffered"]
        preempt_rows.append(
            (
                label,
                preempted,
                [
                    (float(suffered["reclaim"]), "borrowed", preempted, "reclaim"),
                    (float(suffered["priority"]), "lent", preempted, "higher priority"),
                    (float(suffered["capacity_lost"]), "lost", preempted, "capacity lost"),
                ],
                f"{suffered['reclaim']} reclaim · {suffered['priority']} priority · "
                f"{suffered['capacity_lost']} capacity lost",
            )
        )
        cost = fig["cost"]["total"]
        cost_rows.append(
            (
                label,
                admitted,
                [
                    (cost["own"], "own", admitted, "own"),
                    (cost["borrowed"], "borrowed", admitted, "borrowed"),
                ],
                f"{money(cost['own'])} own · {money(cost['borrowed'])} borrowed",
            )
        )
    return [
        _bar_chart(
            "Instance-hours: own and borrowed",
            "Usage within each share's limit (own) and beyond it (borrowed): idle capacity "
            "turned into work. Bars link to the admissions behind them.",
            [("own", "own"), ("borrowed", "borrowed")],
            usage_rows,
            axis="instance-hours",
            tick=inst_hours,
        ),
        _bar_chart(
            "Wait to start",
            "Submission to first start for jobs first started in the window. Bars link to "
            "those jobs.",
            [("own", "median (p50)"), ("wait-tail", "up to p90")],
            wait_rows,
            axis="wait",
            tick=duration,
        ),
        _bar_chart(
            "Preemptions suffered",
            "Runs stopped in the window, by rule. Bars link to the audit entries.",
            [("borrowed", "reclaim"), ("lent", "higher priority"), ("lost", "capacity lost")],
            preempt_rows,
            axis="runs stopped",
            tick=count,
        ),
        _bar_chart(
            "Cost: own and borrowed",
            "Instance-seconds times the type's hourly price.",
            [("own", "own"), ("borrowed", "borrowed")],
            cost_rows,
            axis="dollars",
            tick=money,
        ),
    ]


def _types_text(per_type: dict[str, Any], render: Callable[[Any], str]) -> str:
    return "; ".join(f"{name}: {render(value)}" for name, value in per_type.items()) or "—"


def figure_rows(answer: dict[str, Any], links: Links, queue_id: int) -> list[FigureRow]:
    """One row per signal, one cell per group (the queue first), each with its link."""
    scopes = group_scopes(answer, queue_id)
    groups = [answer["queue"], *answer["groups"]]

    def row(
        name: str,
        words: str,
        text: Callable[[dict[str, Any]], str],
        href: Callable[[dict[str, Any]], str],
    ) -> FigureRow:
        return FigureRow(
            name,
            words,
            [
                Cell(text(fig), href(scope), label)
                for (label, scope), fig in zip(scopes, groups, strict=True)
            ],
        )

    def finished(fig: dict[str, Any]) -> str:
        f = fig["jobs_finished"]
        return (
            f"{f['total']} ({f['SUCCEEDED']} succeeded, {f['FAILED']} failed, "
            f"{f['TIMED_OUT']} timed out, {f['CANCELLED']} cancelled)"
        )

    def pcts(block: dict[str, Any]) -> str:
        return " / ".join(duration(block[k]) for k in ("p50", "p90", "p99") if k in block)

    def policy(fig: dict[str, Any]) -> str:
        changes = fig["policy_changes"]
        if changes is None:
            return "—"
        requests = changes.get("change_requests") or {}
        words = [
            f"{v} {k.replace('_', ' ')}" for k, v in changes.items() if isinstance(v, int) and v
        ]
        words += [f"{v} change requests {k}" for k, v in requests.items() if v]
        return ", ".join(words) or "none"

    def runtime(fig: dict[str, Any]) -> str:
        return (
            "; ".join(
                f"{label}: {r['jobs']} jobs, p50 {duration(r['run_time']['p50'])}, "
                f"cost p50 {money(r['cost_p50'])}"
                for label, r in fig["runtime_by_choice"].items()
            )
            or "—"
        )

    def fallback(fig: dict[str, Any]) -> str:
        by = fig["fallback"]["by_preference"]
        names = {"0": "first", "1": "second", "2": "third", "3": "fourth", "4": "fifth"}
        parts = [f"{n} on {names.get(k, k)} choice" for k, n in by.items()]
        return ", ".join(parts) + f"; {fig['fallback']['timed_out']} timed out" if parts else "—"

    def decisions(fig: dict[str, Any]) -> str:
        d = fig.get("decisions")
        if d is None:
            return "—"
        return (
            f"{d['opened']} opened, {d['decided']} decided, {d['overdue']} overdue; "
            f"{pcts(d['time_to_decide'])}"
        )

    rows = [
        row(
            "jobs_finished",
            "Jobs whose final event falls in the window",
            finished,
            lambda s: links.jobs(s, "finished"),
        ),
        row(
            "wait_to_start",
            "First start - submission, p50 / p90 / p99 (entitled starts | borrowing starts)",
            lambda f: (
                f"{pcts(f['wait_to_start']['all'])} "
                f"({pcts(f['wait_to_start']['entitled'])} | "
                f"{pcts(f['wait_to_start']['borrowing'])})"
            ),
            lambda s: links.jobs(s, "started"),
        ),
        row(
            "turnaround",
            "Completion - submission, p50 / p90 / p99 (only own | borrowed)",
            lambda f: (
                f"{pcts(f['turnaround']['all'])} "
                f"({pcts(f['turnaround']['only_own'])} | {pcts(f['turnaround']['borrowed'])})"
            ),
            lambda s: links.jobs(s, "finished", state="SUCCEEDED"),
        ),
        row(
            "preemptions_suffered",
            "Runs of the group stopped, by rule",
            lambda f: ", ".join(
                f"{v} {k.replace('_', ' ')}" for k, v in f["preemptions_suffered"].items()
            ),
            lambda s: links.audit(s, "job.preempted"),
        ),
        row(
            "preemptions_caused",
            "Runs stopped for the group's jobs",
            lambda f: ", ".join(
                f"{v} {k.replace('_', ' ')}" for k, v in f["preemptions_caused"].items()
            ),
            lambda s: links.audit({}, "job.preempted"),
        ),
        row(
            "lost_work",
            "Work lost by those preemptions",
            lambda f: duration(f["lost_work"]),
            lambda s: links.audit(s, "job.preempted"),
        ),
        row(
            "goodput",
            "Completed work / (completed work + lost work)",
            lambda f: percent(f["goodput"]),
            lambda s: links.jobs(s, "finished", state="SUCCEEDED"),
        ),
        row(
            "preemptions_per_finished_job",
            "Preemptions in their whole life, per finished job",
            lambda f: _fmt(f["preemptions_per_finished_job"]),
            lambda s: links.jobs(s, "finished"),
        ),
        row(
            "time_to_restart",
            "Preemption to the next start, p50 / p90",
            lambda f: pcts(f["time_to_restart"]),
            lambda s: links.audit(s, "job.admitted"),
        ),
        row(
            "fallback",
            "First starts by the choice taken",
            fallback,
            lambda s: links.jobs(s, "started"),
        ),
        row(
            "fallback_rate",
            "First starts not on the first choice",
            lambda f: percent(f["fallback_rate"]),
            lambda s: links.jobs(s, "started"),
        ),
        row(
            "deadlines",
            "Jobs with a deadline: met, late, timed out for it (met rate)",
            lambda f: (
                f"{f['deadlines']['met']} met, {f['deadlines']['late']} late, "
                f"{f['deadlines']['timed_out']} timed out ({percent(f['deadlines']['rate'])})"
            ),
            lambda s: links.jobs(s, "finished"),
        ),
        row(
            "decisions",
            "Retry exhaustions waiting for a decision: opened, decided, overdue; time to decide "
            "p50 / p90",
            decisions,
            lambda s: links.audit(s, "decision.opened"),
        ),
        row(
            "certification_drift",
            "Certified configurations: actual / certified run time, p50 / p90 (runs)",
            _drift_text,
            lambda s: links.jobs(s, "finished", state="SUCCEEDED"),
        ),
        row(
            "runtime_by_choice",
            "Last run of completed jobs, by type and count",
            runtime,
            lambda s: links.jobs(s, "finished", state="SUCCEEDED"),
        ),
        row(
            "instance_seconds",
            "Instance-hours, own + borrowed, per type",
            lambda f: _types_text(
                f["instance_seconds"],
                lambda v: f"{inst_hours(v['own'] / 3600)} + {inst_hours(v['borrowed'] / 3600)}",
            ),
            lambda s: links.audit(s, "job.admitted"),
        ),
        row(
            "cost",
            "Cost, own + borrowed",
            lambda f: (
                f"{money(f['cost']['total']['own'])} + {money(f['cost']['total']['borrowed'])}"
            ),
            lambda s: links.audit(s, "job.admitted"),
        ),
        row(
            "utilization",
            "Usage over the queue's capacity (borrowed part)",
            lambda f: _types_text(
                f["utilization"], lambda v: f"{percent(v['all'])} ({percent(v['borrowed'])})"
            ),
            lambda s: links.audit(s, "job.admitted"),
        ),
        row(
            "idle_lendable_seconds",
            "Idle capacity x time while a job that fitted it waited",
            lambda f: _types_text(f["idle_lendable_seconds"], lambda v: duration(v)),
            lambda s: links.jobs(s, "submitted"),
        ),
        row(
            "policy_changes",
            "Share edits, exceptions, change requests and priority changes",
            policy,
            lambda s: links.audit(s, "share.updated"),
        ),
    ]
    if answer["queue"].get(
        "plan_utilization"
    ):  # the queue has capacity plans (docs/scheduling.md#capacity-plans)
        rows += [
            row(
                "plan_utilization",
                "Capacity plans: usage over count x active time",
                lambda f: (
                    ", ".join(
                        f"{name} {percent(v)}" for name, v in sorted(f["plan_utilization"].items())
                    )
                    or "—"
                ),
                lambda s: links.jobs(s, "started"),
            ),
            row(
                "plan_first_rate",
                "Jobs naming a plan first that started on it",
                lambda f: percent(f["plan_first_rate"]),
                lambda s: links.jobs(s, "started"),
            ),
        ]
    return rows
