"""Production mode passes ``manage.py check --deploy`` (docs/operations.md, "Production
settings"), and refuses to start without a real SECRET_KEY."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # Without what this test process has in its environment and a deployment would not
    # (pytest-playwright sets DJANGO_ALLOW_ASYNC_UNSAFE for the browser tests).
    unset = {"SECRET_KEY", "DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    environment = {k: v for k, v in os.environ.items() if k not in unset}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_in_production_mode() -> None:
    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        PRODUCTION="true",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="gpu.example.org",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_mode_needs_a_secret_key() -> None:
    result = manage("check", PRODUCTION="true", ALLOWED_HOSTS="gpu.example.org")
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_development_mode_is_what_check_deploy_warns_about() -> None:
    """Without PRODUCTION the same check fails: the production settings do the work."""
    result = manage("check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode != 0
    assert "SESSION_COOKIE_SECURE" in result.stdout + result.stderr
