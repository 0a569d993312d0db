"""The Slurm executor as a cycle outside a pass sees it (``SlurmExecutor``).

A cycle a change to the queue asked for has nothing to hand Slurm: it only decides, and
the next pass (``pass_.py``) reports, submits and stops. A pass hands its own cycle a
``pass_.PassExecutor``, which carries what the pass read of Slurm and does the Slurm side
at the cycle's hooks. This module imports nothing of the pass, so looking a queue's
executor up (``scheduler.executors.registry``) loads no Slurm code.
"""

from __future__ import annotations

from scheduler.executors.base import BaseExecutor


class SlurmExecutor(BaseExecutor):
    """A Slurm queue's executor outside a pass: Slurm's runs are reported by the passes,
    so a cycle only decides (at the clock's pace)."""
