"""Web test fixtures.

The pages cache answers derived from the stored state (``governance.selectors.state_cache``)
in the ``shared`` cache, Redis in production. Here it is a per-process memory cache,
emptied before each test, so tests run in parallel never see each other's entries and a
test's query counts do not depend on what an earlier test cached.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import caches


@pytest.fixture(autouse=True)
def _private_shared_cache(settings: Any) -> Iterator[None]:
    settings.CACHES = {
        **settings.CACHES,
        "shared": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "web-tests",
        },
    }
    caches["shared"].clear()
    yield
    caches["shared"].clear()
