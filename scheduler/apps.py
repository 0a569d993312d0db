from typing import Any

from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"

    def ready(self) -> None:
        """Listen to the services' change announcements (``governance.services.hooks``):
        a queue that changed gets a cycle soon (or now), and the end of a Slurm job runs
        its queue's executor pass."""
        from governance.services import hooks

        # Loaded at start-up, as the receivers will need them (and Celery its tasks).
        from scheduler import tasks, triggers  # noqa: F401
        from scheduler.executors.slurm import pass_  # noqa: F401

        # Module-level receivers: a signal holds them weakly.
        hooks.cycle_wanted.connect(_request_cycle, dispatch_uid="scheduler.request_cycle")
        hooks.cycle_now.connect(_cycle_now, dispatch_uid="scheduler.cycle_now")
        hooks.slurm_job_ended.connect(_executor_pass, dispatch_uid="scheduler.executor_pass")


def _request_cycle(sender: Any, *, queue_id: int, **_: Any) -> object:
    from scheduler import triggers

    return triggers.request_cycle(queue_id)


def _cycle_now(sender: Any, *, queue_id: int, **_: Any) -> object:
    from scheduler import tasks

    return tasks.cycle_now(queue_id)


def _executor_pass(
    sender: Any, *, queue_id: int, slurm_job_id: int, defer: Any = None, **_: Any
) -> dict[str, object]:
    from scheduler.cycle.run import run_cycle
    from scheduler.executors.slurm import pass_

    return pass_.hook_pass(queue_id, slurm_job_id, cycle=run_cycle, defer=defer)
