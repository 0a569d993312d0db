from django.apps import AppConfig


class GovernanceConfig(AppConfig):
    name = "governance"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Connects the receiver that keeps the database's identity on each new connection
        # (a key part of the cached page fragments), before the first one opens.
        from governance.web import fragments  # noqa: F401
