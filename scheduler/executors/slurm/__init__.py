"""The ``slurm`` executor: a real Slurm cluster runs the admitted jobs (docs/slurm.md).

``cli`` drives Slurm's command-line tools (no Django); ``submit`` turns a run into an
``sbatch`` call; ``sync`` is one pass of one queue: read Slurm, report what happened
through the run services, follow node states into capacity, run the scheduling cycle,
then submit new admissions and stop preempted or cancelled runs.
"""
