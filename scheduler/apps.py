from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"

    def ready(self) -> None:
        """Listen to the services' change announcements (``governance.services.hooks``)."""
        from governance.services import hooks
        from scheduler import tasks, triggers
        from scheduler.executors.slurm import pass_

        hooks.register(
            request_cycle=triggers.request_cycle,
            run_cycle=tasks.cycle_now,
            executor_pass=pass_.hook_pass,
        )
