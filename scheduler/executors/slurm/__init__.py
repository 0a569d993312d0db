"""The ``slurm`` executor: a real Slurm cluster runs the admitted jobs (docs/slurm.md).

``cli`` drives Slurm's command-line tools (no Django); ``submit`` turns a run into an
``sbatch`` call; ``pass_`` is one pass of one queue, which drives the rest: ``read``
(Slurm), then the scheduling cycle with the pass's executor (``pass_.PassExecutor``),
which reports what happened through the run services (``report``), runs the drift guard
and follows node states into capacity (``drift``), and once committed stops preempted or
cancelled runs and submits new admissions (``orders``). ``executor`` is what a cycle
outside a pass calls.
"""
