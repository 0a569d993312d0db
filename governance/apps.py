from django.apps import AppConfig
from django.db.backends.signals import connection_created


class GovernanceConfig(AppConfig):
    name = "governance"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from governance import dbadapters

        connection_created.connect(dbadapters.install, dispatch_uid="governance-adapters")
