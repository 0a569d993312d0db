"""The node epilog (scripts/slurm/notify-product) against a stand-in for the product's
hook: the epilogs of one node call one at a time, and an epilog whose job the last answer
listed as reported does not call. Needs no Slurm: only sh, curl and flock."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import ROOT

SCRIPT = str(ROOT / "scripts" / "slurm" / "notify-product")
pytestmark = pytest.mark.skipif(
    not (shutil.which("curl") and shutil.which("flock")), reason="needs curl and flock"
)


class Hook:
    """Answers each call after ``delay`` seconds, listing ``reported`` as the jobs whose
    end the pass recorded; keeps the job ids it was called for."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.reported: list[int] = []
        self.delay = 0.0
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                assert self.headers["Authorization"] == "Bearer secret"
                hook.calls.append(body["slurm_job_id"])
                time.sleep(hook.delay)
                answer = json.dumps(
                    {"known": True, "queue": 1, "executor_pass": {"reported": hook.reported}}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/slurm/job-ended/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def hook(tmp_path: Path) -> Iterator[tuple[Hook, Path]]:
    server = Hook()
    config = tmp_path / "hook.env"
    config.write_text(
        f"GOV_HOOK_URL={server.url}\nGOV_HOOK_TOKEN=secret\nGOV_HOOK_TIMEOUT=5\n"
        f"GOV_HOOK_STATE_DIR={tmp_path / 'state'}\n"
    )
    yield server, config
    server.server.shutdown()


def epilog(config: Path, job: int, node: str = "n1") -> subprocess.Popen[bytes]:
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": str(job), "SLURMD_NODENAME": node}
    return subprocess.Popen(["sh", SCRIPT, str(config)], env=env)


def test_an_epilog_whose_job_the_last_answer_listed_does_not_call(
    hook: tuple[Hook, Path],
) -> None:
    server, config = hook
    server.reported = [11, 12]
    assert epilog(config, 11).wait(10) == 0
    assert epilog(config, 12).wait(10) == 0  # listed by the answer to job 11's call
    server.reported = [13]
    assert epilog(config, 13).wait(10) == 0  # not listed: it calls
    assert epilog(config, 12, node="n2").wait(10) == 0  # another node keeps its own list
    assert server.calls == [11, 13, 12]


def test_the_epilogs_of_a_node_call_one_at_a_time(hook: tuple[Hook, Path]) -> None:
    """Four jobs of a node end together: the first epilog calls, the others wait for its
    answer, which lists their jobs too, and exit without calling."""
    server, config = hook
    server.reported = [21, 22, 23, 24]
    server.delay = 0.5
    first = epilog(config, 21)
    time.sleep(0.2)  # its call is under way
    others = [epilog(config, job) for job in (22, 23, 24)]
    assert all(p.wait(10) == 0 for p in [first, *others])
    assert server.calls == [21]


def test_a_product_that_does_not_answer_costs_the_epilog_nothing(tmp_path: Path) -> None:
    """Nothing listens: the epilog exits 0 (a failing epilog drains the node)."""
    config = tmp_path / "hook.env"
    config.write_text(
        "GOV_HOOK_URL=http://127.0.0.1:9/api/slurm/job-ended/\nGOV_HOOK_TOKEN=secret\n"
        f"GOV_HOOK_TIMEOUT=2\nGOV_HOOK_STATE_DIR={tmp_path / 'state'}\n"
    )
    assert epilog(config, 31).wait(10) == 0
