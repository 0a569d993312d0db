"""One scheduling cycle of one queue, in phases (docs/architecture.md#a-cycle):

``read`` (the database into a :class:`~scheduler.cycle.snapshot.QueueSnapshot`), ``decide``
(the engine plays the instant), ``apply`` (the decisions through ``services/runs.py``) and
``usage`` (the usage history), orchestrated by :func:`scheduler.cycle.run.run_cycle`, which
calls the queue's executor (``scheduler.executors.base.Executor``) between them.

Executors import only the public types (``snapshot``, ``result``); a driver that starts a
cycle with its own executor (the Slurm pass) is handed the entry point ``run.run_cycle`` by
whoever starts it (``tests/test_architecture.py``). Nothing is re-exported here, so
importing one module never drags in the others.
"""
