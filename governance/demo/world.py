"""Demo data worth looking at, written through the services like any other change.

Two queues: the AWS worked example (three shares of one ml.g5.xlarge each) and a
realistic fleet of four teams on five instance types, with priority bands, an agreement
per share, exceptions in every state, a capacity plan for vision on the contended
ml.p5.48xlarge (active now, named first by vision's training jobs) and users for each
role. With DEMO_SLURM a third queue runs on the local Slurm (``load_slurm``). Passwords equal user
names: this is a demo.
"""

from __future__ import annotations

import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from governance.demo import certifications, records
from governance.models import JobQueue, Share, Team, Workload
from governance.roles import ADMIN_GROUP, AGENT_GROUP, REVIEWER_GROUP
from governance.services import (
    agreements,
    capacity,
    change_requests,
    exceptions,
    jobs,
    plans,
    priorities,
    shares,
    teams,
)
from governance.services import slurm as slurm_services
from governance.services import users as user_services
from governance.services import workloads as workload_services

MARKER_QUEUE = "aws-worked-example"
DEMO_PLAN = "vision-p5-reserved"
SLURM_QUEUE = "slurm-local"
LENDING_QUEUE = "inference-pool"

INSTANCE_TYPES: list[dict[str, Any]] = [
    {"name": "ml.g5.xlarge", "accelerators": 1, "speed": 1.0, "hourly_price": "1.4080"},
    {"name": "ml.p5.48xlarge", "accelerators": 8, "speed": 3.0, "hourly_price": "98.3200"},
    {"name": "ml.p4d.24xlarge", "accelerators": 8, "speed": 2.0, "hourly_price": "37.6900"},
    {"name": "ml.g6.48xlarge", "accelerators": 8, "speed": 1.4, "hourly_price": "13.3500"},
    {"name": "ml.g5.48xlarge", "accelerators": 8, "speed": 1.2, "hourly_price": "20.3600"},
    {"name": "ml.trn1.32xlarge", "accelerators": 16, "speed": 1.6, "hourly_price": "24.7800"},
]

TEAMS = ["vision", "language", "speech", "platform"]

# (team, share name, policy, borrow limit, limits, in-share preemption, retries)
FLEET_SHARES: list[tuple[str, str, str, int | None, dict[str, int], bool, int | None]] = [
    (
        "vision",
        "vision-training",
        "LEND_AND_BORROW",
        100,
        {"ml.p5.48xlarge": 2, "ml.p4d.24xlarge": 2, "ml.g5.48xlarge": 4},
        True,
        3,
    ),
    (
        "language",
        "language-pretraining",
        "LEND_AND_BORROW",
        -1,
        {"ml.p5.48xlarge": 2, "ml.p4d.24xlarge": 2, "ml.trn1.32xlarge": 4},
        True,
        None,
    ),
    (
        "speech",
        "speech-inference-eval",
        "LEND",
        None,
        {"ml.g6.48xlarge": 4, "ml.g5.48xlarge": 2},
        False,
        2,
    ),
    (
        "platform",
        "platform-release",
        "RESERVE",
        None,
        {"ml.p4d.24xlarge": 2, "ml.g6.48xlarge": 4, "ml.trn1.32xlarge": 2},
        False,
        0,
    ),
]

FLEET_CAPACITY = {
    "ml.p5.48xlarge": 4,
    "ml.p4d.24xlarge": 6,
    "ml.g6.48xlarge": 8,
    "ml.g5.48xlarge": 8,
    "ml.trn1.32xlarge": 6,
}

BANDS: list[dict[str, Any]] = [
    {
        "name": "routine",
        "min_priority": 0,
        "max_priority": 99,
        "usable_by": ["member", "lead"],
        "criteria": "Experiments, sweeps and batch processing that can wait for idle capacity.",
    },
    {
        "name": "elevated",
        "min_priority": 100,
        "max_priority": 499,
        "usable_by": ["lead"],
        "criteria": "Work on a committed milestone within the next two weeks.",
    },
    {
        "name": "urgent",
        "min_priority": 500,
        "max_priority": 999,
        "usable_by": ["admin"],
        "criteria": "A release decision or a customer incident is blocked on this result.",
        "exception_owner": "reviewer",
    },
]


def _user(username: str, *groups: str, superuser: bool = False) -> Any:
    """A demo user (password = username) through the user service, so it is audited.

    The demo's passwords are deliberately trivial: they are set directly, past the
    password validators a real user's password must pass.
    """
    User = get_user_model()
    user: Any = User.objects.filter(username=username).first()
    if user is None:
        user = user_services.user_create(actor=None, username=username, roles=groups)
        user.set_password(username)
        user.is_staff = superuser
        user.is_superuser = superuser
        user.save(update_fields=["password", "is_staff", "is_superuser"])
    elif groups:
        wanted = sorted(set(user_services.user_roles(user)) | set(groups))
        user_services.user_set_roles(actor=None, user=user, roles=wanted)
    return user


DEMO_ACTOR = "demo"


def demo_actor() -> Any:
    """The demo's own system user: every change the demo makes is recorded under it, so
    the audit trail never shows a person doing what they did not do. It holds the admin
    role (the services then accept its changes to any team's work) but cannot sign in:
    no usable password, and deactivated."""
    User = get_user_model()
    user: Any = User.objects.filter(username=DEMO_ACTOR).first()
    if user is None:
        user = user_services.user_create(
            actor=None,
            username=DEMO_ACTOR,
            first_name="Demo",
            last_name="(automatic)",
            roles=[ADMIN_GROUP],
            reason="The demo data's system actor.",
        )
        user.set_unusable_password()
        user.save(update_fields=["password"])
        user_services.user_deactivate(
            actor=None, user=user, reason="The demo's system actor never signs in."
        )
        user.refresh_from_db()
    return user


def already_loaded() -> bool:
    return JobQueue.objects.filter(name=MARKER_QUEUE).exists()


@transaction.atomic
def load(data_dir: Path | None = None) -> list[str]:
    """Load the demo once; returns the login lines (also written to data_dir)."""
    _user("admin", ADMIN_GROUP, superuser=True)
    _user("reviewer", REVIEWER_GROUP)
    # Everything below is done by the demo's own actor, not by the people it signs in as
    # (only filing an exception or a change request stays with a team's lead: no one
    # else may file one).
    admin = reviewer = demo_actor()
    _user("agent", AGENT_GROUP)
    leads = {team: _user(f"lead-{team}") for team in TEAMS}
    members = {team: _user(f"member-{team}") for team in TEAMS}
    team_objs = {
        team: teams.team_create(
            actor=admin, name=team, leads=[f"lead-{team}"], members=[f"member-{team}"]
        )
        for team in TEAMS
    }

    for spec in INSTANCE_TYPES:
        capacity.instance_type_create(actor=admin, **spec)
    for band in BANDS:
        priorities.priority_definition_create(actor=admin, **band)

    # The AWS worked example: three shares of one ml.g5.xlarge each.
    aws = capacity.queue_create(
        actor=admin,
        name=MARKER_QUEUE,
        capacity={"ml.g5.xlarge": 3},
        description="AWS Batch quota management worked example: borrowing, reclaim, "
        "then in-share priority preemption.",
    )
    background = shares.share_create(
        actor=admin,
        queue=aws,
        team=team_objs["vision"],
        name="background",
        policy="LEND_AND_BORROW",
        borrow_limit=200,
        limits={"ml.g5.xlarge": 1},
        in_share_preemption=True,
    )
    medium = shares.share_create(
        actor=admin,
        queue=aws,
        team=team_objs["language"],
        name="medium",
        policy="LEND",
        limits={"ml.g5.xlarge": 1},
    )
    protected = shares.share_create(
        actor=admin,
        queue=aws,
        team=team_objs["speech"],
        name="protected",
        policy="RESERVE",
        limits={"ml.g5.xlarge": 1},
    )

    fleet = capacity.queue_create(
        actor=admin,
        name="gpu-fleet",
        capacity=FLEET_CAPACITY,
        description="The shared training fleet of the four ML teams.",
    )
    fleet_shares: dict[str, Share] = {}
    for team, name, policy, borrow, limits, inshare, retries in FLEET_SHARES:
        fleet_shares[team] = shares.share_create(
            actor=admin,
            queue=fleet,
            team=team_objs[team],
            name=name,
            policy=policy,
            borrow_limit=borrow,
            limits=limits,
            in_share_preemption=inshare,
            preemption_retries=retries,
            reason="Initial allocation, Q4 planning.",
        )

    # A capacity plan for vision on the fleet's most contended type (ml.p5.48xlarge:
    # the shares' limits take all 4), active now; vision's training jobs name it first.
    plans.plan_create(
        actor=admin,
        queue=fleet,
        share=fleet_shares["vision"],
        name=DEMO_PLAN,
        instance_type="ml.p5.48xlarge",
        count=2,
        start=timezone.now() - timedelta(hours=1),
        end=timezone.now() + timedelta(days=14),
        hourly_price="62.5000",
        reason="Reserved for the detector-v7 milestone at a committed-use price.",
    )

    _agreements(
        admin,
        leads,
        {"background": background, "medium": medium, "protected": protected, **fleet_shares},
    )
    _jobs_and_exceptions(admin, reviewer, leads, members, background, fleet_shares)
    _lending_pool(admin, leads, team_objs)
    _workloads(admin, team_objs)
    _recovery_and_decision(admin, team_objs, fleet_shares)
    certifications.load_certifications(admin, leads, fleet)

    roles = [
        ("admin", "admin: edits queues, shares and priority bands"),
        ("reviewer", "reviewer: decides exceptions, reads the audit trail"),
        *((f"lead-{t}", f"team lead of {t}") for t in TEAMS),
        *((f"member-{t}", f"member of {t}") for t in TEAMS),
        ("agent", "external agent protocol"),
    ]
    logins = [f"{name} / {name}".ljust(36) + f"({role})" for name, role in roles]
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "demo_logins.txt").write_text("\n".join(logins) + "\n")
    return logins


# Each team's workloads (docs/workloads.md): one tolerant, one protected. Both start
# unverified: only a resumed run's outcome verifies recovery, which the demo's activity
# has to produce.
DEMO_WORKLOADS = {
    "tolerant": (
        "finetune",
        "Resumes from the last checkpoint in the team's bucket; output valid when the "
        "evaluation set's score is within 0.5% of the uninterrupted reference run.",
    ),
    "protected": (
        "release-eval",
        "No checkpoints: a release evaluation must run start to finish on its own capacity.",
    ),
}


def _workloads(admin: Any, team_objs: dict[str, Team]) -> None:
    for team in TEAMS:
        for interruption, (name, assumptions) in DEMO_WORKLOADS.items():
            workload_services.workload_create(
                actor=admin,
                team=team_objs[team],
                name=f"{team}/{name}",
                interruption=interruption,
                recovery_assumptions=assumptions,
            )


def _recovery_and_decision(admin: Any, team_objs: dict[str, Team], fleet: dict[str, Share]) -> None:
    """A third workload per team whose recovery a resumed run verified (the evidence job
    on its page), beside the unverified and protected ones; and one open decision: a
    vision job its share's retry limit failed (docs/workloads.md#decisions)."""
    earlier = timezone.now() - timedelta(hours=6)
    for team in TEAMS:
        share = fleet[team]
        instance_type = sorted(shares.limits_map(share))[0]
        workload = workload_services.workload_create(
            actor=admin,
            team=team_objs[team],
            name=f"{team}/checkpointed-train",
            recovery_assumptions="Checkpoints every 10 minutes to the team's bucket; output "
            "valid when the final loss is within 1% of the reference run.",
        )
        records.demo_resumed_run(
            actor=admin,
            share=share,
            submitter=admin,
            workload=workload,
            instance_type=instance_type,
            at=earlier,
        )
    vision = fleet["vision"]
    finetune = Workload.objects.get(team=team_objs["vision"], name="vision/finetune")
    records.demo_exhausted_run(
        share=vision,
        submitter=admin,
        workload=finetune,
        instance_type=sorted(shares.limits_map(vision))[0],
        at=earlier + timedelta(hours=2),
    )


def _agreements(admin: Any, leads: dict[str, Any], by_name: dict[str, Share]) -> None:
    texts = {
        "background": (
            "Background share of the worked example",
            "Background work borrows freely (up to twice its limit) and accepts "
            "that lenders take their capacity back at any moment.",
            "Borrowed runs may be reclaimed without notice.",
            "Jobs checkpoint every 10 minutes; a reclaim costs at most that.",
        ),
        "medium": (
            "Medium share of the worked example",
            "Lends its idle instance, never borrows.",
            "Takes its instance back from borrowers when its own work arrives.",
            "None needed: it never runs on borrowed capacity.",
        ),
        "protected": (
            "Protected share of the worked example",
            "Keeps its instance idle for latency-sensitive work.",
            "Never lends, so never reclaims.",
            "Its jobs start within one scheduling cycle.",
        ),
        "vision": (
            "Vision training allocation",
            "Vision trains detection models on p5 and p4d; evaluation on g5. It may "
            "borrow up to 100% of each limit when others are idle.",
            "Accepts reclaim of borrowed runs; in-share preemption for releases.",
            "Checkpoints every 15 minutes; at most 3 preemptions per job.",
        ),
        "language": (
            "Language pre-training allocation",
            "Long pre-training runs on p5 and Trainium with unlimited borrowing.",
            "Borrowed capacity is reclaimed first, lowest priority first.",
            "Checkpoints hourly; unlimited retries.",
        ),
        "speech": (
            "Speech evaluation allocation",
            "Evaluation jobs on g6 and g5; lends idle capacity to the fleet.",
            "Never borrows, so is never reclaimed.",
            "Short jobs; two retries.",
        ),
        "platform": (
            "Platform release allocation",
            "Release-blocking validation; capacity is reserved and never lent.",
            "Nothing to reclaim: reserved idle capacity stays idle.",
            "A preempted release job fails at once (retries 0) so it is noticed.",
        ),
    }
    owners = {"background": "vision", "medium": "language", "protected": "speech"}
    # What the fleet's agreements promise, judged on the demo's played history once it is
    # loaded (history.load_history_and_rollups): vision's work is rarely lost to
    # preemption (kept), while speech, which lends its idle g6 and g5 capacity, was told
    # its own jobs would start within the hour: its evaluation jobs wait up to three hours
    # for capacity it lent (broken).
    promises: dict[str, list[tuple[str, str, float]]] = {
        "vision": [("goodput", ">=", 0.95)],
        "language": [("preemptions_per_finished_job", "<=", 0.25)],
        "speech": [("wait_to_start.entitled.p90", "<=", 3600)],
    }
    for key, share in by_name.items():
        title, body, reclaim, recovery = texts[key]
        team = owners.get(key, key)
        agreements.agreement_create(
            actor=admin,
            title=title,
            body=body,
            shares=[share.pk],
            reclaim_assumptions=reclaim,
            recovery_assumptions=recovery,
            owner=f"lead-{team}",
            editors=[],
            review_by=date.today() + timedelta(days=90),
            promises=[
                {
                    "figure": figure,
                    "share": share.pk,
                    "comparison": comparison,
                    "threshold": threshold,
                    "window_days": 7,
                }
                for figure, comparison, threshold in promises.get(key, [])
            ],
            reason="Recorded at the Q4 allocation review.",
        )


def _jobs_and_exceptions(
    admin: Any,
    reviewer: Any,
    leads: dict[str, Any],
    members: dict[str, Any],
    background: Share,
    fleet: dict[str, Share],
) -> None:
    one_g5 = [{"instance_type": "ml.g5.xlarge", "count": 1}]
    for name, priority in (("bg-high", 3), ("bg-med", 2), ("bg-low", 1)):
        jobs.job_submit(
            actor=admin,
            share=background,
            name=name,
            preferences=one_g5,
            priority=priority,
            duration=3600,
            checkpoint_interval=600,
        )
    # A preference is (type, count), or ("plan:NAME", count) for a capacity plan.
    specs = [
        (
            "vision",
            "detector-v7-train",
            40,
            [(f"plan:{DEMO_PLAN}", 2), ("ml.p5.48xlarge", 2), ("ml.p4d.24xlarge", 2)],
            14400,
        ),
        (
            "vision",
            "detector-v7-ablation",
            30,
            [(f"plan:{DEMO_PLAN}", 1), ("ml.p4d.24xlarge", 1)],
            7200,
        ),
        ("vision", "segmenter-sweep-a", 10, [("ml.g5.48xlarge", 2), ("ml.p4d.24xlarge", 1)], 3600),
        ("vision", "segmenter-sweep-b", 10, [("ml.g5.48xlarge", 2), ("ml.p4d.24xlarge", 1)], 3600),
        (
            "language",
            "llm-13b-pretrain",
            80,
            [("ml.p5.48xlarge", 2), ("ml.trn1.32xlarge", 4)],
            28800,
        ),
        ("language", "tokenizer-eval", 5, [("ml.trn1.32xlarge", 1)], 1800),
        ("speech", "asr-eval-nightly", 20, [("ml.g6.48xlarge", 2)], 2400),
        ("platform", "release-validation", 60, [("ml.p4d.24xlarge", 2)], 7200),
    ]
    submitted = {}
    for team, name, priority, prefs, duration in specs:
        submitted[name] = jobs.job_submit(
            actor=admin,
            share=fleet[team],
            name=name,
            priority=priority,
            preferences=[
                {"plan": t.removeprefix("plan:"), "count": c}
                if t.startswith("plan:")
                else {"instance_type": t, "count": c}
                for t, c in prefs
            ],
            duration=duration,
            checkpoint_interval=900,
            max_pending=86400,
        )
    soon = timezone.now() + timedelta(days=7)
    exceptions.exception_file(  # stays pending
        actor=leads["language"],
        team=fleet["language"].team,
        job=submitted["llm-13b-pretrain"],
        priority=600,
        justification="The 13B checkpoint gates the Q4 model launch review.",
        expires_at=soon,
        wanted_by=timezone.now() + timedelta(days=1),
    )
    approved = exceptions.exception_file(
        actor=leads["platform"],
        team=fleet["platform"].team,
        job=submitted["release-validation"],
        priority=700,
        justification="Release 4.2 is blocked on this validation run.",
        expires_at=soon,
    )
    exceptions.exception_approve(
        actor=reviewer, exception=approved, note="Release-blocking: approved for a week."
    )
    rejected = exceptions.exception_file(
        actor=leads["vision"],
        team=fleet["vision"].team,
        share=fleet["vision"],
        priority=550,
        justification="We would like all vision jobs to run faster this week.",
        expires_at=soon,
    )
    exceptions.exception_reject(
        actor=reviewer, exception=rejected, note="Not release-blocking; use the elevated band."
    )
    withdrawn = exceptions.exception_file(
        actor=leads["speech"],
        team=fleet["speech"].team,
        job=submitted["asr-eval-nightly"],
        priority=520,
        justification="Nightly eval needed for a partner demo.",
        expires_at=soon,
    )
    exceptions.exception_withdraw(actor=admin, exception=withdrawn, note="Demo moved; not needed.")
    # Expired for real: filed and approved with an expiry a second away, expired once it
    # has passed. Expiring it at a moment ahead of the clock dated its audit entries in
    # the future ("in 1 minute" on the audit trail).
    expires_at = timezone.now() + timedelta(seconds=1)
    expiring = exceptions.exception_file(
        actor=leads["vision"],
        team=fleet["vision"].team,
        job=submitted["detector-v7-train"],
        priority=510,
        justification="Customer incident: retrain the detector on fixed labels.",
        expires_at=expires_at,
    )
    exceptions.exception_approve(actor=admin, exception=expiring, note="Incident INC-2041.")
    time.sleep(max(0.0, (expires_at - timezone.now()).total_seconds()))
    exceptions.exception_expire_due()
    # Closed, as moot: asked for a job that was then cancelled before anyone decided.
    exceptions.exception_file(
        actor=leads["language"],
        team=fleet["language"].team,
        job=submitted["tokenizer-eval"],
        priority=520,
        justification="Tokenizer regression check before the vocabulary freeze.",
        expires_at=soon,
    )
    jobs.job_cancel(
        actor=admin,
        job=submitted["tokenizer-eval"],
        reason="The vocabulary freeze moved; the check runs next week.",
    )
    exceptions.exception_close_moot()


def _lending_pool(admin: Any, leads: dict[str, Any], team_objs: dict[str, Team]) -> None:
    """A lender whose capacity two teams borrow (the lending ledger, docs/ledger.md), and
    a lead's change request waiting for an admin.

    ``inference-pool`` has 6 x ml.g6.48xlarge, all of it under limits: speech lends 4,
    vision and language may hold 1 each and borrow beyond it. Vision's backfill (2) and
    language's eval sweep (3) borrow 1 and 2 of speech's idle instances, for days of work,
    so speech's ledger names both; when speech's own work arrives it takes them back.
    """
    g6 = "ml.g6.48xlarge"
    pool = capacity.queue_create(
        actor=admin,
        name=LENDING_QUEUE,
        capacity={g6: 6},
        description="Inference and evaluation capacity: speech lends what it does not use.",
    )
    specs = [
        ("speech", "speech-serving", "LEND", None, 4),
        ("vision", "vision-batch", "LEND_AND_BORROW", 200, 1),
        ("language", "language-eval", "LEND_AND_BORROW", -1, 1),
    ]
    pool_shares = {
        team: shares.share_create(
            actor=admin,
            queue=pool,
            team=team_objs[team],
            name=name,
            policy=policy,
            borrow_limit=borrow,
            limits={g6: limit},
            reason="Inference pool: speech's serving capacity, lent while idle.",
        )
        for team, name, policy, borrow, limit in specs
    }
    for team, name, count in (
        ("vision", "vision-embed-backfill", 2),
        ("language", "language-eval-sweep", 3),
    ):
        jobs.job_submit(
            actor=admin,
            share=pool_shares[team],
            name=name,
            priority=10,
            preferences=[{"instance_type": g6, "count": count}],
            duration=14 * 86400,
            checkpoint_interval=1800,
        )
    change_requests.change_request_file(  # stays pending: an admin's review list has it
        actor=leads["language"],
        share=pool_shares["language"],
        changes={"limits": {g6: 3}},
        justification="Our eval sweeps need 3 instances every night; borrowing them means "
        "speech takes them back whenever its serving load returns.",
    )


# A job of the Slurm demo: it works in steps of one second, checkpoints every 10 steps to
# $GOV_CHECKPOINT_DIR/progress and resumes from $GOV_RESUME_WORK (docs/slurm.md).
SLURM_DEMO_SCRIPT = """#!/bin/sh
work=${GOV_RESUME_WORK%.*}
total=$1
while [ "$work" -lt "$total" ]; do
  sleep 1
  work=$((work + 1))
  if [ $((work % 10)) -eq 0 ]; then echo "$work" > "$GOV_CHECKPOINT_DIR/progress"; fi
done
"""


@transaction.atomic
def load_slurm() -> bool:
    """With DEMO_SLURM: a queue run by the local Slurm of scripts/slurm/start (two types,
    one per partition, one GPU an instance), two teams' shares and a few jobs. Loaded
    once; False when it was already there."""
    if JobQueue.objects.filter(name=SLURM_QUEUE).exists():
        return False
    admin = get_user_model().objects.get(username="admin")
    members = {team: get_user_model().objects.get(username=f"member-{team}") for team in TEAMS}
    queue = capacity.queue_create(
        actor=admin,
        name=SLURM_QUEUE,
        executor="slurm",
        capacity={"ml.g5.xlarge": 8, "ml.g5.48xlarge": 8},
        description="The local Slurm of scripts/slurm/start: partition gpu-a runs "
        "ml.g5.xlarge, gpu-b runs ml.g5.48xlarge, one GPU an instance.",
    )
    slurm_services.slurm_config_set(
        actor=admin,
        queue=queue,
        config={
            "grace_seconds": 5,
            "types": {
                "ml.g5.xlarge": {"partition": "gpu-a", "gpus_per_instance": 1},
                "ml.g5.48xlarge": {"partition": "gpu-b", "gpus_per_instance": 1},
            },
            # Each team's jobs run as its own Unix user (scripts/slurm/start creates them).
            "teams": {team: {"user": f"gov-{team}"} for team in ("speech", "vision")},
        },
        reason="Demo: the local Slurm.",
    )
    team_objs = {team.name: team for team in Team.objects.filter(name__in=TEAMS)}
    owner = shares.share_create(
        actor=admin,
        queue=queue,
        team=team_objs["speech"],
        name="speech-slurm",
        policy="LEND",
        limits={"ml.g5.xlarge": 4, "ml.g5.48xlarge": 4},
    )
    borrower = shares.share_create(
        actor=admin,
        queue=queue,
        team=team_objs["vision"],
        name="vision-slurm",
        policy="LEND_AND_BORROW",
        borrow_limit=-1,
        limits={"ml.g5.xlarge": 4, "ml.g5.48xlarge": 4},
    )
    for share, user, name, count, seconds in (
        (borrower, members["vision"], "sweep-wide", 8, 600),
        (borrower, members["vision"], "sweep-narrow", 2, 300),
        (owner, members["speech"], "asr-finetune", 4, 900),
    ):
        jobs.job_submit(
            actor=user,
            share=share,
            name=name,
            preferences=[
                {"instance_type": "ml.g5.xlarge", "count": count},
                {"instance_type": "ml.g5.48xlarge", "count": count},
            ],
            duration=seconds,
            program={"script": SLURM_DEMO_SCRIPT.replace("$1", str(seconds))},
        )
    return True
