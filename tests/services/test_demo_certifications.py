"""The demo's certified configurations (docs/workloads.md): two workloads with templates;
vision's fallback runs as benchmarked, language's second choice drifts (40% slower than
certified), which its page shows."""

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from governance import demo
from governance.models import Workload
from governance.selectors import certifications as selectors


@pytest.mark.django_db
def test_one_fallback_matches_its_benchmark_and_the_other_drifts(tmp_path: Path) -> None:
    demo.load(tmp_path)
    vision = Workload.objects.get(name="vision/finetune")
    language = Workload.objects.get(name="language/finetune")
    for workload in (vision, language):
        template = selectors.template_of(workload.pk)
        assert template is not None and len(template.entries.all()) == 2
    rows = {r.configuration: r for r in selectors.configurations(vision.pk)}
    assert rows["ml.g5.48xlarge x2"].drift["drifting"] is False
    assert rows["ml.g5.48xlarge x2"].drift["p50"] == pytest.approx(1.0, abs=0.05)
    drifting = {r.configuration: r for r in selectors.configurations(language.pk)}
    second = drifting["ml.trn1.32xlarge x1"].drift
    assert second["drifting"] is True and second["runs"] == 6
    assert second["p50"] == pytest.approx(1.4, abs=0.05)
    assert drifting["ml.p4d.24xlarge x1"].drift["drifting"] is False

    client = Client()
    client.force_login(get_user_model().objects.get(username="lead-language"))
    page = client.get(f"/workloads/{language.pk}/").content.decode()
    assert 'id="drift-alert"' in page
    assert "Drifting: ml.trn1.32xlarge x1 runs take 1.39\u00d7" in page
    calm = client.get(f"/workloads/{vision.pk}/").content.decode()
    assert 'id="drift-alert"' not in calm
