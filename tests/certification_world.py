"""A world for certified configurations: make_world's teams, a workload of team red, and
helpers that propose and certify its configurations (docs/workloads.md)."""

from __future__ import annotations

from typing import Any

from governance.models import Certification
from governance.services import certifications as cert_services
from governance.services import workloads as workload_services
from tests.factories import make_reviewer, make_world

G5 = "ml.g5.xlarge"
P4 = "ml.p4d.24xlarge"


def make_cert_world() -> Any:
    world = make_world()
    world.workload = workload_services.workload_create(
        actor=world.red_lead, team=world.red, name="vision/detector-finetune"
    )
    world.reviewer2 = make_reviewer("reviewer2")
    return world


def propose(world: Any, **fields: Any) -> Certification:
    values: dict[str, Any] = {
        "actor": world.red_lead,
        "workload": world.workload,
        "instance_type": G5,
        "count": 2,
        "runtime": 3600,
        "converged": True,
        "utilization": 87.5,
        "failure_rate": 1.25,
        "output_valid": True,
        "environment": "train:2.4",
        "notes": "loss within 0.5% of the reference; eval mAP matches",
    }
    values.update(fields)
    return cert_services.certification_propose(**values)


def certified(world: Any, **fields: Any) -> Certification:
    cert = propose(world, **fields)
    return cert_services.certification_decide(
        actor=world.reviewer, certification=cert, certify=True, note="benchmark reviewed"
    )
