"""The cluster path as users walk it, with real Ray processes.

A head and two workers started with ``ray start`` on 127.0.0.1 (the workers
advertise the ``generator``/``judge`` resources), token authentication on
(``RAY_AUTH_MODE=token``, the token in a file of the test's own), ``ray job
submit --working-dir`` of ``jobs/cube_eval.py`` on a small fake-engine config;
one worker (the judge engine host's) is killed with ``kill -9`` in the middle
of the judge stage. The job (or a resubmit) completes with every row once.
The cluster has its own ports
and temp dir, and only its own processes are stopped, by id (``ray stop``
would stop every Ray on the machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cube_ray.pipeline import part_files
from tests.pipeline_helpers import (
    ROOT,
    assert_complete,
    fake_config,
    make_corpus,
    make_qa_file,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N_DOCS = 4
BIN = Path(sys.executable).parent
psutil = pytest.importorskip("psutil")


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class RayProcesses:
    """A Ray cluster of ``ray start`` processes that this test alone owns."""

    def __init__(self) -> None:
        # Short: Ray puts Unix sockets under it (at most 107 characters).
        self.temp_dir = Path(tempfile.mkdtemp(prefix="crj-", dir="/tmp"))
        token = self.token = self.temp_dir / "auth_token"
        token.write_text(secrets.token_hex(32))
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(
            {
                "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
                "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN_PATH": str(token),
                "RAY_USAGE_STATS_ENABLED": "0",
                # A killed node is declared dead in ~5 s, not ~30 s.
                "RAY_health_check_period_ms": "1000",
                "RAY_health_check_failure_threshold": "5",
                "PYTHONPATH": "",
            }
        )
        self.env = env
        self.gcs_port, self.dashboard_port = _free_ports(2)
        self.node_ports: dict[str, int] = {}

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _start(self, name: str, args: list[str]) -> None:
        """``ray start``, tried again when a loaded machine misses Ray's fixed
        30 s wait for the raylet to register (only this attempt's processes are
        ended before the next)."""
        for attempt in range(3):
            error = self._start_once(name, args)
            if error is None:
                return
            if name == "head":
                self._end(self.processes())
                self.gcs_port, self.dashboard_port = _free_ports(2)
            else:
                with contextlib.suppress(AssertionError):
                    raylet = self.raylet(name)
                    self._end([raylet, *raylet.children(recursive=True)])
            if attempt == 2:
                raise AssertionError(f"ray start {name}: {error}")

    def _start_once(self, name: str, args: list[str]) -> str | None:
        node, objects, metrics, agent, agent_grpc, runtime_env = _free_ports(6)
        self.node_ports[name] = node
        cmd = [
            str(BIN / "ray"),
            "start",
            "--node-ip-address=127.0.0.1",
            f"--node-manager-port={node}",
            f"--object-manager-port={objects}",
            f"--metrics-export-port={metrics}",
            f"--dashboard-agent-listen-port={agent}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={runtime_env}",
            f"--temp-dir={self.temp_dir}",
            "--disable-usage-stats",
            *args,
        ]
        if name == "head":
            (client,) = _free_ports(1)
            cmd += [
                f"--port={self.gcs_port}",
                f"--dashboard-port={self.dashboard_port}",
                f"--ray-client-server-port={client}",
            ]
        proc = subprocess.run(
            cmd, env=self.env, capture_output=True, text=True, timeout=240, check=False
        )
        return None if proc.returncode == 0 else proc.stdout + proc.stderr

    def start(self) -> None:
        self._start("head", ["--head", "--dashboard-host=127.0.0.1", "--num-cpus=2"])
        address = f"--address=127.0.0.1:{self.gcs_port}"
        # Alike, so that either can be lost and the other still runs every pool.
        res = json.dumps({"generator": 2, "judge": 2})
        for name in ("w1", "w2"):
            self._start(name, [address, "--num-cpus=3", f"--resources={res}"])

    def raylet(self, name: str) -> Any:
        flag = f"--node_manager_port={self.node_ports[name]}"
        for proc in psutil.process_iter(["name", "cmdline"]):
            if proc.info["name"] == "raylet" and flag in (proc.info["cmdline"] or []):
                return proc
        raise AssertionError(f"no raylet of node {name}")

    def processes(self) -> list[Any]:
        """Every process of this cluster: those naming its temp dir or GCS port
        on their command line (GCS, raylets, dashboard, monitors), and their
        descendants (workers, agents, the job's driver)."""
        marks = (str(self.temp_dir), f"127.0.0.1:{self.gcs_port}")
        found: dict[int, Any] = {}
        for proc in psutil.process_iter(["cmdline"]):
            line = " ".join(proc.info["cmdline"] or [])
            if any(m in line for m in marks) and proc.pid != os.getpid():
                found[proc.pid] = proc
                with contextlib.suppress(psutil.Error):
                    for child in proc.children(recursive=True):
                        found[child.pid] = child
        return list(found.values())

    def node_with_actor(self) -> str:
        """The worker node running the judge's engine host (busy scoring), else
        one running a Ray Data actor."""
        for mark in ("_EngineHost.score", "MapWorker"):
            for name in ("w1", "w2"):
                for proc in self.raylet(name).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        if mark in " ".join(proc.cmdline()):
                            return name
        return "w2"

    def kill_node(self, name: str) -> None:
        """``kill -9`` of a worker node: its raylet and every process under it."""
        raylet = self.raylet(name)
        procs = [raylet, *raylet.children(recursive=True)]
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)

    def stop(self) -> None:
        """``ray stop`` for this cluster only: SIGTERM, then SIGKILL, by id."""
        self._end(self.processes())
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    @staticmethod
    def _end(procs: list[Any]) -> None:
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _gone, alive = psutil.wait_procs(procs, timeout=15)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=15)

    def ray(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "ray"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture
def cluster() -> Iterator[RayProcesses]:
    c = RayProcesses()
    try:
        c.start()
        yield c
    finally:
        c.stop()
        assert c.processes() == []


def _submit(c: RayProcesses, job_id: str, cfg: Path, run_dir: Path) -> None:
    proc = c.ray(
        "job",
        "submit",
        "--address",
        c.dashboard,
        "--submission-id",
        job_id,
        "--no-wait",
        "--working-dir",
        str(ROOT),
        "--runtime-env-json",
        json.dumps({"env_vars": {"RAY_DEDUP_LOGS": "0"}}),
        "--",
        "python",
        "jobs/cube_eval.py",
        str(cfg),
        "--out",
        str(run_dir),
        "--no-progress",
        "--no-report",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _status(c: RayProcesses, job_id: str) -> str:
    """The job's status from the job server's REST API, with the token."""
    request = urllib.request.Request(
        f"{c.dashboard}/api/jobs/{job_id}",
        headers={"Authorization": f"Bearer {c.token.read_text().strip()}"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return str(json.loads(response.read())["status"])


def _logs(c: RayProcesses, job_id: str) -> str:
    return c.ray("job", "logs", "--address", c.dashboard, job_id).stdout


def _wait(c: RayProcesses, job_id: str, deadline: float, run_dir: Path) -> str:
    status = "UNKNOWN"
    while time.monotonic() < deadline:
        status = _status(c, job_id)
        if status in ("SUCCEEDED", "FAILED", "STOPPED"):
            return status
        time.sleep(3)
    parts = sorted(p.name for p in run_dir.rglob("part-*"))
    raise AssertionError(
        f"job {job_id} still {status} at the deadline; parts {parts}\n"
        + _logs(c, job_id)[-20000:]
    )


@pytest.mark.timeout(1800)
def test_job_submit_survives_a_killed_worker(
    cluster: RayProcesses, tmp_path: Path
) -> None:
    c = cluster
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    qa = make_qa_file(tmp_path, ids)
    cfg = fake_config(
        tmp_path,
        corpus,
        qa,
        judges=1,
        judge_latency=0.5,
        judge_batch=2,
        judge_resources={"judge": 1},
        generator_resources={"generator": 1},
        ray_options={"node_loss_wait_s": 20},
    )
    run_dir = tmp_path / "run"

    # Without the token the job server refuses the client.
    anonymous = subprocess.run(
        [str(BIN / "ray"), "job", "list", "--address", c.dashboard],
        env={k: v for k, v in c.env.items() if not k.startswith("RAY_AUTH")},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert anonymous.returncode != 0
    assert "authentication token" in anonymous.stdout + anonymous.stderr

    # Generous for a loaded 2-core machine; on an idle one this takes minutes.
    deadline = time.monotonic() + 1500
    _submit(c, "cube-1", cfg, run_dir)
    while not part_files(run_dir / "scores", "scores:j1"):
        assert time.monotonic() < deadline, "no judge rows before the deadline"
        status = _status(c, "cube-1")
        assert status in ("RUNNING", "PENDING"), _logs(c, "cube-1")
        time.sleep(0.5)
    c.kill_node(c.node_with_actor())
    status = _wait(c, "cube-1", deadline, run_dir)
    logs = _logs(c, "cube-1")
    if status != "SUCCEEDED":  # resubmitting the same command resumes the run
        _submit(c, "cube-2", cfg, run_dir)
        status = _wait(c, "cube-2", deadline, run_dir)
        logs = _logs(c, "cube-2")
    assert status == "SUCCEEDED", logs
    assert "cube-ray: preflight: 3 pools fit" in logs
    assert f"manifest: {run_dir / 'manifest.json'}" in logs
    # `ray job logs` shows cube-ray's own lines; Ray's and its workers' output
    # (prefixed "(... pid=N)") and tracebacks go to RUN_DIR/logs/.
    assert "pid=" not in logs, logs[-4000:]
    assert "Traceback" not in logs, logs[-4000:]
    assert sorted((run_dir / "logs").glob("run-*.log")), "no run log written"
    assert_complete(run_dir, N_DOCS, judges=1)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
