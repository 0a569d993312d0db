#!/usr/bin/env python
"""An example agent for a queue run by external agents (docs/agents.md).

It claims admitted runs, "runs" each one by sleeping through its work (a real agent
would launch the job on its cluster instead), heartbeats, checkpoints, stops runs the
scheduler preempted, and reports completion. It needs only the standard library.

    python examples/agent.py --url http://127.0.0.1:8000 --token TOKEN --queue 3 \
        --name agent-1 --slots 16 --speedup 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import threading
import time
import urllib.error
import urllib.request
from typing import Any


class Client:
    def __init__(self, url: str, token: str) -> None:
        self.url = url.rstrip("/")
        self.token = token

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")


class Agent:
    def __init__(
        self, client: Client, queue: int, name: str, slots: int, speedup: float, heartbeat: float
    ) -> None:
        self.client = client
        self.queue = queue
        self.name = name
        self.slots = slots
        self.speedup = speedup
        self.heartbeat = heartbeat
        self.running: dict[int, threading.Event] = {}
        # Set when a slot frees with no next run in hand: the poll loop claims at once.
        self.slot_freed = threading.Event()
        self.lock = threading.Lock()
        self.completed = 0

    def run_job(self, run: dict[str, Any], stop: threading.Event) -> None:
        """Run ``run``, then the next runs the server hands back with its completion."""
        current: dict[str, Any] | None = run
        while current is not None:
            job = current["job"]
            try:
                following = self._run_one(current, stop)
            except urllib.error.HTTPError as error:
                if error.code != 409:  # 409: the run is over (preempted): just drop it
                    with self.lock:
                        self.running.pop(job, None)
                    raise
                following = []
            # Swap the finished run for the next one in one step, so the poll loop never
            # sees a free slot that this thread is about to fill.
            stop = threading.Event()
            current = following[0] if following else None
            with self.lock:
                self.running.pop(job, None)
                if current is not None:
                    self.running[current["job"]] = stop
            for extra in following[1:]:
                self._spawn(extra)
            if current is None:
                self.slot_freed.set()

    def _run_one(self, run: dict[str, Any], stop: threading.Event) -> list[dict[str, Any]]:
        """Work through one run; returns the runs claimed with its completion."""
        job, number = run["job"], run["run"]
        base = f"/api/agents/jobs/{job}"
        # The run is ours and started from the claim (``start``: the claim recorded the
        # ``started`` report), so its work starts now, with no round trip in between.
        began = time.monotonic()
        # Work advances with the clock (``speedup`` units per second) and the thread
        # sleeps until the next thing to do: finishing, a checkpoint or a heartbeat.
        # Polling in small steps made a 1 s job take ~1.15 s and burnt the CPU the
        # server needs when many runs share a machine.
        resume = float(run["resume_from"])
        duration = float(run["duration"] or 0)
        interval = run["checkpoint_interval"]
        next_beat = began + self.heartbeat
        next_checkpoint = (math.floor(resume / interval) + 1) * interval if interval else None
        while True:
            now = time.monotonic()
            work = min(duration, resume + (now - began) * self.speedup)
            if work >= duration:
                break
            if next_checkpoint is not None and work >= next_checkpoint:
                self.client.call(
                    "POST",
                    f"{base}/report/",
                    {"run": number, "kind": "checkpoint", "progress": next_checkpoint},
                )
                next_checkpoint += interval
                continue
            if now >= next_beat:
                self.client.call("POST", f"{base}/report/", {"run": number, "kind": "heartbeat"})
                next_beat = now + self.heartbeat
            wake = min(next_beat, began + (duration - resume) / self.speedup)
            if next_checkpoint is not None:
                wake = min(wake, began + (next_checkpoint - resume) / self.speedup)
            if stop.wait(max(0.0, wake - now)):
                self.client.call("POST", f"{base}/stopped/", {"run": number})
                return []
        # Complete and claim the next run in one round trip: the server reassigns the
        # freed instance at once and hands this slot its next run (or none).
        answer = self.client.call(
            "POST",
            f"{base}/complete/",
            {"run": number, "agent": self.name, "claim_next": 1, "start": True},
        )
        with self.lock:
            self.completed += 1
        return list(answer.get("next") or [])

    def _spawn(self, run: dict[str, Any]) -> None:
        stop = threading.Event()
        with self.lock:
            self.running[run["job"]] = stop
        threading.Thread(target=self.run_job, args=(run, stop), daemon=True).start()

    def poll_once(self) -> bool:
        """Act on stop orders, claim runs for free slots; True when every slot is busy."""
        stops = self.client.call("GET", f"/api/agents/queues/{self.queue}/stops/?agent={self.name}")
        for order in stops:
            with self.lock:
                event = self.running.get(order["job"])
            if event is not None:
                event.set()
            else:  # not ours any more (finished or never started here): acknowledge
                with contextlib.suppress(urllib.error.HTTPError):
                    self.client.call(
                        "POST", f"/api/agents/jobs/{order['job']}/stopped/", {"run": order["run"]}
                    )
        with self.lock:
            free = self.slots - len(self.running)
        if free <= 0:
            return True
        claimed = self.client.call(
            "POST",
            f"/api/agents/queues/{self.queue}/claim/",
            {"agent": self.name, "limit": free, "start": True},
        )
        for run in claimed:
            self._spawn(run)
        return len(claimed) >= free

    def serve(self, poll: float, busy_poll: float, until_idle: float | None) -> None:
        idle_since: float | None = None
        while True:
            full = self.poll_once()
            with self.lock:
                busy = bool(self.running)
            if until_idle is not None:
                if busy:
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since >= until_idle:
                    return
            # With every slot busy, completions bring the next runs: poll only for stop
            # orders, at a slower pace that spares the server.
            if self.slot_freed.wait(busy_poll if full else poll):
                self.slot_freed.clear()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--token", required=True)
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--name", default="agent-1")
    parser.add_argument("--slots", type=int, default=16, help="runs held at once")
    parser.add_argument("--speedup", type=float, default=1.0, help="work units per second")
    parser.add_argument(
        "--poll", type=float, default=0.05, help="seconds between polls with free slots"
    )
    parser.add_argument(
        "--busy-poll",
        type=float,
        default=0.5,
        help="seconds between polls (for stop orders) while every slot is busy",
    )
    parser.add_argument("--heartbeat", type=float, default=5.0, help="seconds between heartbeats")
    parser.add_argument(
        "--until-idle",
        type=float,
        default=None,
        help="exit after this many idle seconds (for scripts and benchmarks)",
    )
    args = parser.parse_args()
    agent = Agent(
        Client(args.url, args.token),
        args.queue,
        args.name,
        args.slots,
        args.speedup,
        args.heartbeat,
    )
    agent.serve(args.poll, args.busy_poll, args.until_idle)
    print(f"{agent.name}: {agent.completed} runs completed")


if __name__ == "__main__":
    main()
