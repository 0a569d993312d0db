"""Drift of certified configurations computed from recorded runs
(docs/workloads.md#drift) against values computed by hand: the workload page's figures,
the leads told once when it starts, and the ``certification_drift`` signal."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from governance.models import Certification, JobEvent, JobState, Notification
from governance.selectors import certifications as selectors
from governance.services import certifications as svc
from scheduler import history, signals
from tests.certification_world import G5, P4, certified, make_cert_world
from tests.factories import make_job

pytestmark = pytest.mark.django_db

# Certified: 1000 s on 2 x g5. Runs of 1400, 1300, 1500, 1450, 1350 and 1200 s: ratios
# sorted 1.2, 1.3, 1.35, 1.4, 1.45, 1.5; p50 = rank ceil(3.0) = 3rd = 1.35, p90 = rank
# ceil(5.4) = 6th = 1.5; six runs, p50 above 1.2: drifting.
RUNS = (1400, 1300, 1500, 1450, 1350, 1200)


@pytest.fixture
def world():
    w = make_cert_world()
    w.cert = certified(w, instance_type=G5, count=2, runtime=1000)
    Certification.objects.filter(pk=w.cert.pk).update(decided_at=timezone.now() - timedelta(days=2))
    w.cert.refresh_from_db()
    return w


def run(world, seconds, *, ended, instance_type=G5, count=2, preempted_first=False):
    """A completed job of the workload whose last admission was ``seconds`` before it ended."""
    job = make_job(
        world.red_share,
        world.red_member,
        workload=world.workload,
        state=JobState.SUCCEEDED,
        finished_at=ended,
        submitted_at=ended - timedelta(seconds=seconds + 600),
    )
    admitted = {"instance_type": instance_type, "count": count, "preference": 0, "plan": None}
    if preempted_first:
        JobEvent.objects.create(
            job=job, at=ended - timedelta(seconds=seconds + 300), type="admitted", data=admitted
        )
        JobEvent.objects.create(
            job=job, at=ended - timedelta(seconds=seconds + 200), type="preempted"
        )
    JobEvent.objects.create(
        job=job, at=ended - timedelta(seconds=seconds), type="admitted", data=admitted
    )
    JobEvent.objects.create(job=job, at=ended, type="completed")
    return job


def test_drift_from_recorded_runs_matches_the_hand_computed_figures(world):
    now = timezone.now()
    for i, seconds in enumerate(RUNS):
        run(world, seconds, ended=now - timedelta(hours=i + 1), preempted_first=(i == 0))
    # neither counts: another configuration, and a run before the certification
    run(world, 5000, ended=now - timedelta(hours=1), instance_type=P4, count=1)
    run(world, 9000, ended=world.cert.decided_at - timedelta(hours=1))
    runs = selectors.completed_runs(world.workload.pk)
    figure = selectors.drift_of(world.cert, runs)
    assert figure == {
        "p50": pytest.approx(1.35),
        "p90": pytest.approx(1.5),
        "runs": 6,
        "drifting": True,
    }

    rows = {r.configuration: r for r in selectors.configurations(world.workload.pk)}
    g5 = rows["ml.g5.xlarge x2"]
    # the runs chosen on it (the one before certification too): 1200 ... 1500 and 9000,
    # p50 = 4th of 7 = 1400 s; cost at 1.41 $/h: 2 x 1.41 x 1400 / 3600 = 1.0967 -> 1.10
    assert g5.runs == 7 and g5.runtime_p50 == pytest.approx(1400)
    assert str(g5.cost_p50) == "1.10"
    # the benchmark: 2 x 1.41 x 1000 / 3600 = 0.783 -> 0.78
    assert str(g5.benchmark_cost) == "0.78"
    assert rows["ml.p4d.24xlarge x1"].status == "not certified"


def test_fewer_than_five_runs_never_drift(world):
    now = timezone.now()
    for i, seconds in enumerate(RUNS[:4]):
        run(world, seconds, ended=now - timedelta(hours=i + 1))
    figure = selectors.drift_of(world.cert, selectors.completed_runs(world.workload.pk))
    assert figure["runs"] == 4 and figure["drifting"] is False


def test_the_leads_are_told_once_when_drift_starts(world):
    now = timezone.now()
    for i, seconds in enumerate(RUNS):
        run(world, seconds, ended=now - timedelta(hours=i + 1))
    assert svc.certifications_drift_check(now=now) == 1
    assert svc.certifications_drift_check(now=now + timedelta(minutes=1)) == 0
    told = Notification.objects.filter(kind="certification_drift")
    assert [n.recipient.username for n in told] == ["red_lead"]
    assert "1.35x the certified time" in told[0].title


def test_the_certification_drift_signal_of_a_window(world):
    now = timezone.now()
    for i, seconds in enumerate(RUNS):
        run(world, seconds, ended=now - timedelta(hours=i + 1))
    answer = history.window_signals(world.red_share.queue, now - timedelta(days=1), now, now=now)
    [row] = answer["queue"]["certification_drift"]
    assert row["workload"] == "vision/detector-finetune"
    assert row["configuration"] == "ml.g5.xlarge x2"
    assert (row["runs"], row["drifting"]) == (6, True)
    assert row["p50"] == pytest.approx(1.35) and row["p90"] == pytest.approx(1.5)


def test_the_signal_from_a_recording_by_hand():
    recording = signals.Recording(
        scenario={"jobs": [{"id": "a", "share": "s"}, {"id": "b", "share": "s"}]},
        events=[
            {"type": "admitted", "job": "a", "at": 0, "instance_type": "g", "count": 2},
            {"type": "completed", "job": "a", "at": 110},
            {"type": "admitted", "job": "b", "at": 50, "instance_type": "g", "count": 2},
            {"type": "completed", "job": "b", "at": 140},
        ],
        teams={"s": "t"},
        certified={
            "a": {"workload": "w", "configurations": {"g x2": 100}},
            "b": {"workload": "w", "configurations": {"g x2": 100}},
        },
    )
    runs = signals.certified_runs(recording, 0, 200)
    [row] = signals.certification_drift_figure(runs, ["s"])
    # ratios 0.9 and 1.1: p50 = 1st of 2 = 0.9, p90 = 2nd = 1.1
    assert row == {
        "workload": "w",
        "configuration": "g x2",
        "p50": 0.9,
        "p90": 1.1,
        "runs": 2,
        "drifting": False,
    }


def test_the_signal_in_the_api_and_on_the_signals_page(world):
    from django.test import Client
    from rest_framework.test import APIClient

    now = timezone.now()
    for i, seconds in enumerate(RUNS):
        run(world, seconds, ended=now - timedelta(hours=i + 1))
    window = {
        "queue": world.red_share.queue_id,
        "from": (now - timedelta(days=1)).isoformat(),
        "to": now.isoformat(),
    }
    api = APIClient()
    api.force_authenticate(world.red_lead)
    body = api.get("/api/signals/", window).json()
    [row] = body["queue"]["certification_drift"]
    assert (row["configuration"], row["runs"], row["drifting"]) == ("ml.g5.xlarge x2", 6, True)
    page = Client()
    page.force_login(world.red_lead)
    html = page.get("/signals/", window).content.decode()
    assert "vision/detector-finetune ml.g5.xlarge x2: 1.35x / 1.50x (6 runs, drifting)" in html


def test_the_runs_are_read_in_one_query_however_many(world, django_assert_num_queries):
    """Each run's last admission comes from one query (``DISTINCT ON`` the job): not the
    runs' ids first and every admission of them after."""
    now = timezone.now()
    for i, seconds in enumerate(RUNS):
        run(world, seconds, ended=now - timedelta(hours=i + 1), preempted_first=True)
    with django_assert_num_queries(1):
        runs = selectors.completed_runs(world.workload.pk)
    assert sorted(r.seconds for r in runs) == sorted(float(s) for s in RUNS)
