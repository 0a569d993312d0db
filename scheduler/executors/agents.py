"""The agent executor: agents next to a cluster pull their runs (docs/agents.md).

Nothing for the cycle to call: an agent claims the runs the cycle admitted, reports
their starts, checkpoints and ends, and acknowledges stop orders, all through the agent
API (``governance/api/agents.py``) and the run services; a complete-and-claim runs the
cycle in its request. So this executor is the reporting default, named.
"""

from __future__ import annotations

from scheduler.executors.base import BaseExecutor


class AgentExecutor(BaseExecutor):
    """Runs reported by agents over the API: the cycle only decides."""
