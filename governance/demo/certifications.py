"""The demo's certified configurations (docs/workloads.md#certified-configurations): two
workloads with a template of two certified configurations each and the runs that tell
whether the fallback performs as benchmarked.

- ``vision/finetune``: 1 x p4d first, 2 x g5.48xlarge when the p4d are busy; the runs on
  the fallback take what its benchmark said.
- ``language/finetune``: 1 x p4d first, 1 x trn1.32xlarge second; its runs on the trn1
  take 40% longer than certified, so the workload page flags it as drifting.

The runs are written as played history (``demo.records``), ending in the days
before the demo loads, after the certifications were granted.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from governance.demo import records
from governance.models import Certification, JobQueue, Workload
from governance.services import certifications as cert_services
from governance.services import templates

# (team, share, [(type, count, benchmark seconds, utilization, reason), ...], actual/benchmark
# of the fallback's runs)
DEMO_TEMPLATES: list[tuple[str, str, list[tuple[str, int, int, str, str]], float]] = [
    (
        "vision",
        "vision-training",
        [
            ("ml.p4d.24xlarge", 1, 2400, "92.0", "fastest: 40 min per fine-tune"),
            (
                "ml.g5.48xlarge",
                2,
                3000,
                "88.5",
                "when the p4d are busy: 1.25x slower, about the same cost per run",
            ),
        ],
        1.0,
    ),
    (
        "language",
        "language-pretraining",
        [
            ("ml.p4d.24xlarge", 1, 3000, "90.0", "fastest, and the reference run's type"),
            (
                "ml.trn1.32xlarge",
                1,
                3600,
                "84.0",
                "Trainium when the p4d are busy: 1.2x slower, a third cheaper",
            ),
        ],
        1.4,
    ),
]
RUNS_PER_CONFIGURATION = 6
# Small, fixed variation of run times around their mean (no randomness: the demo's
# figures are the same at every load).
SPREAD = (0.97, 1.02, 0.99, 1.04, 0.98, 1.01)


def load_certifications(admin: Any, leads: dict[str, Any], fleet: JobQueue) -> None:
    """Certify the configurations (leads propose, the demo's reviewer certifies), build
    the templates, and write each configuration's runs as history."""
    now = timezone.now()
    start = now - timedelta(days=3)
    jobs: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    submitters: dict[str, Any] = {}
    for team, share, configurations, fallback_ratio in DEMO_TEMPLATES:
        workload = Workload.objects.get(team__name=team, name=f"{team}/finetune")
        entries = []
        certs: list[Certification] = []
        for type_name, count, seconds, utilization, reason in configurations:
            # The team's lead proposes: whoever certifies must not be the proposer.
            cert = cert_services.certification_propose(
                actor=leads[team],
                workload=workload,
                instance_type=type_name,
                count=count,
                runtime=seconds,
                converged=True,
                utilization=utilization,
                failure_rate="1.5",
                output_valid=True,
                environment="train:2.4 (production image), s3 data path, torchrun",
                notes="Reference fine-tune: loss curve and evaluation score within 0.5% of "
                "the reference run.",
            )
            cert = cert_services.certification_decide(
                actor=admin,
                certification=cert,
                certify=True,
                note="Benchmark run with the production image, data path and launcher.",
            )
            # Certified before the runs below.
            Certification.objects.filter(pk=cert.pk).update(decided_at=start - timedelta(hours=1))
            certs.append(cert)
            entries.append({"certification": cert.pk, "reason": reason})
        templates.template_set(
            actor=admin,
            workload=workload,
            entries=entries,
            max_pending=4 * 3600,
            deadline_offset=12 * 3600,
        )
        # The demo's own actor, like every job the demo writes.
        submitters[share] = admin
        for place, cert in enumerate(certs):
            ratio = fallback_ratio if place > 0 else 1.0
            for i in range(RUNS_PER_CONFIGURATION):
                key = f"{team}-finetune-{place}-{i}"
                at = (i * 10 + place * 5 + 1) * 3600 * 1000
                length = round(cert.runtime * ratio * SPREAD[i] * 1000)
                prefs = [
                    {"instance_type": c.key[1], "count": c.count, "runtime": c.runtime}
                    for c in certs
                ]
                jobs.append(
                    {
                        "id": key,
                        "share": share,
                        "submit_at": at,
                        "priority": 10,
                        "preferences": prefs,
                        "duration": length,
                        "workload": workload.pk,
                        "template": {
                            "entries": [
                                {"position": n + 1, "certification": c.pk, "reason": e["reason"]}
                                for n, (c, e) in enumerate(zip(certs, entries, strict=True))
                            ],
                            "skipped": [],
                        },
                    }
                )
                events.append(
                    {
                        "type": "admitted",
                        "job": key,
                        "at": at + 60_000,
                        "instance_type": cert.key[1],
                        "count": cert.count,
                        "preference": place,
                    }
                )
                events.append({"type": "completed", "job": key, "at": at + 60_000 + length})
    events.sort(key=lambda e: (e["at"], e["type"] != "completed"))
    records.demo_history_record(
        actor=admin,
        queue=fleet,
        start=start,
        factor=1.0,
        jobs=jobs,
        events=events,
        submitters=submitters,
        prefix="certified-run-",
    )
