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
        self.lock = threading.Lock()
        self.completed = 0

    def run_job(self, run: dict[str, Any], stop: threading.Event) -> None:
        job, number = run["job"], run["run"]
        base = f"/api/agents/jobs/{job}"
        began = time.monotonic()  # the run is ours from the claim: its work starts now
        try:
            self.client.call("POST", f"{base}/report/", {"run": number, "kind": "started"})
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
                    self.client.call(
                        "POST", f"{base}/report/", {"run": number, "kind": "heartbeat"}
                    )
                    next_beat = now + self.heartbeat
                wake = min(next_beat, began + (duration - resume) / self.speedup)
                if next_checkpoint is not None:
                    wake = min(wake, began + (next_checkpoint - resume) / self.speedup)
                if stop.wait(max(0.0, wake - now)):
                    self.client.call("POST", f"{base}/stopped/", {"run": number})
                    return
            self.client.call("POST", f"{base}/complete/", {"run": number})
            with self.lock:
                self.completed += 1
        except urllib.error.HTTPError as error:
            if error.code != 409:  # 409: the run is over (preempted): just drop it
                raise
        finally:
            with self.lock:
                self.running.pop(job, None)

    def poll_once(self) -> None:
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
            return
        claimed = self.client.call(
            "POST", f"/api/agents/queues/{self.queue}/claim/", {"agent": self.name, "limit": free}
        )
        for run in claimed:
            stop = threading.Event()
            with self.lock:
                self.running[run["job"]] = stop
            threading.Thread(target=self.run_job, args=(run, stop), daemon=True).start()

    def serve(self, poll: float, until_idle: float | None) -> None:
        idle_since: float | None = None
        while True:
            self.poll_once()
            with self.lock:
                busy = bool(self.running)
            if until_idle is not None:
                if busy:
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since >= until_idle:
                    return
            time.sleep(poll)


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
    parser.add_argument("--poll", type=float, default=0.05, help="seconds between polls")
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
    agent.serve(args.poll, args.until_idle)
    print(f"{agent.name}: {agent.completed} runs completed")


if __name__ == "__main__":
    main()
