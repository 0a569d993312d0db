"""``./scripts/run`` is safe to start on a shared machine: it listens on this machine only
unless ``HOST`` says otherwise, signs with a key of its own data folder (never one
written in the code) and says its demo logins are for a local demo."""

from __future__ import annotations

import os
import runpy
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import devserver

ROOT = Path(__file__).resolve().parent.parent


def test_the_web_server_listens_on_this_machine_only_unless_host_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for environ, bind in (({}, "127.0.0.1"), ({"HOST": "0.0.0.0"}, "0.0.0.0")):
        env = devserver.run_env(environ, tmp_path, 8123)
        assert env["WEB_BIND"] == bind
        # what gunicorn reads from that environment (the web program's command line)
        monkeypatch.setattr(os, "environ", env)
        conf = runpy.run_path(str(ROOT / "scripts" / "gunicorn_conf.py"))
        assert conf["bind"] == f"{bind}:8123"


def test_the_banner_says_demo_logins_are_for_a_local_demo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "demo_logins.txt").write_text("admin / admin\n")
    devserver.banner("127.0.0.1", 8000, tmp_path)
    shown = capsys.readouterr().out
    assert "http://localhost:8000/" in shown
    assert "for a local demo only" in shown and "WARNING" not in shown
    devserver.banner("0.0.0.0", 8000, tmp_path)
    assert "WARNING: HOST=0.0.0.0 lets other machines reach these logins" in (
        capsys.readouterr().out
    )


def _secret_key(data_dir: Path, **env: str) -> str:
    environment = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "PRODUCTION")}
    environment.update(DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="governance.settings")
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.SECRET_KEY)"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


def test_without_secret_key_each_data_folder_makes_its_own_once(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    key = _secret_key(first)
    assert len(key) >= 50
    assert _secret_key(first) == key  # kept: sessions survive a restart
    assert _secret_key(second) != key  # no two installations share one
    kept = first / "secret_key"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert kept.read_text().strip() == key
    assert "insecure" not in key
    assert _secret_key(tmp_path / "three", SECRET_KEY="from-the-environment") == (
        "from-the-environment"
    )
    assert not (tmp_path / "three" / "secret_key").exists()


def test_a_web_worker_is_forked_with_the_preloaded_application_out_of_the_collectors_sight() -> (
    None
):
    import gc

    conf = runpy.run_path(str(ROOT / "scripts" / "gunicorn_conf.py"))
    assert conf["preload_app"] is True  # the application is built in the master
    gc.unfreeze()
    try:
        conf["pre_fork"](None, None)
        assert gc.get_freeze_count() > 10_000  # this process's modules, Django's included
    finally:
        gc.unfreeze()


def test_a_worker_ready_for_tasks_has_its_start_up_objects_out_of_the_collectors_sight() -> None:
    import gc

    from celery import signals

    from governance.celery import app

    gc.unfreeze()
    try:
        signals.worker_ready.send(sender=None, app=app)
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
