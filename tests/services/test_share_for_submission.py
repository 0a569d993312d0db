"""``selectors.shares.share_for_submission``: the one statement every submission reads
its share with, built without the ORM's compiler, must give what the ORM gives."""

from __future__ import annotations

import pytest

from governance.models import JobQueue, PriorityDefinition, Share, Team
from governance.selectors.priorities import band_limits
from governance.selectors.shares import share_for_submission
from tests.factories import field_values, make_job, make_share, make_world

pytestmark = pytest.mark.django_db


def test_the_share_its_queue_and_team_are_the_orms_field_for_field() -> None:
    w = make_world()
    shown = make_share(
        w.queue,
        w.blue,
        "shown",
        {"ml.p4d.24xlarge": 1, "ml.g5.xlarge": 3},
        policy="LEND_AND_BORROW",
        borrow_limit=50,
        preemption_retries=2,
        certified_only=True,
    )
    found = share_for_submission(shown.pk, w.blue_lead.pk)
    assert found is not None
    share, role, types, bands, new_job_id = found
    orm = Share.objects.select_related("queue", "team").get(pk=shown.pk)
    assert field_values(share) == field_values(orm)
    assert field_values(share.queue) == field_values(JobQueue.objects.get(pk=orm.queue_id))
    assert field_values(share.team) == field_values(Team.objects.get(pk=orm.team_id))
    assert (role, types) == ("lead", ["ml.g5.xlarge", "ml.p4d.24xlarge"])
    assert sorted(bands) == sorted(band_limits()) and len(bands) >= 2
    # A model built from the row behaves as a fetched one: saved, it updates its row.
    assert not share._state.adding and share._state.db == "default"
    assert str(share) == f"{w.queue.name}/shown"
    # The id the job will have: the jobs' sequence's next value, never one a job holds.
    taken = share_for_submission(shown.pk, w.blue_lead.pk)
    assert taken is not None and taken.new_job_id > new_job_id
    later = make_job(shown, w.blue_lead)
    assert later.pk > taken.new_job_id


def test_the_role_is_that_of_the_user_in_the_shares_team_and_none_otherwise() -> None:
    w = make_world()
    red = w.red_share.pk
    assert share_for_submission(red, w.red_member.pk)[1:3] == (  # type: ignore[index]
        "member",
        ["ml.g5.xlarge", "ml.p4d.24xlarge"],
    )
    for outsider in (w.blue_lead.pk, w.admin.pk, None):
        assert share_for_submission(red, outsider)[1] is None  # type: ignore[index]
    assert share_for_submission(10**9, w.red_member.pk) is None
    bare = make_share(w.queue, w.red, "no-limits")
    bare.limits.all().delete()
    assert share_for_submission(bare.pk, w.red_lead.pk)[1:3] == ("lead", [])  # type: ignore[index]
    PriorityDefinition.objects.all().delete()  # a fresh installation: no bands
    assert share_for_submission(bare.pk, w.red_lead.pk).bands == []  # type: ignore[union-attr]
