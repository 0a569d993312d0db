"""Live tests: a real Celery worker subprocess, real Redis, the test database.

The worker inherits this process's environment when the session fixture starts it, so
the simulated fleet's pace is set here, before any fixture runs: 100 simulated seconds
per real second lets a 100-second job finish in one second.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

LIVE_TIME_FACTOR = 100.0
os.environ["DEMO_TIME_FACTOR"] = str(LIVE_TIME_FACTOR)


@pytest.fixture(autouse=True)
def _live_settings(settings: Any) -> None:
    settings.DEMO_TIME_FACTOR = LIVE_TIME_FACTOR
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def wait_for(check: Callable[[], Any], timeout: float = 20.0, step: float = 0.05) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {check.__doc__ or check}")
        time.sleep(step)
