"""The run's Ray workers hand back what a task freed (``heap.WORKER_ENV``: Arrow's
system allocator, fixed glibc thresholds), engine hosts keep glibc's own
thresholds, idle workers exit (``heap.RAYLET_ENV``), and a user's choice wins:
on a local Ray the run starts, checked in a fresh process (glibc reads its
settings when a process starts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cube_ray.pipeline.heap import RAYLET_ENV, WORKER_ENV
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

pytestmark = [pytest.mark.ray]

_CHILD = """
import sys
import time
import psutil
import ray
from cube_ray.config import RunConfig
from cube_ray.engines.config import FakeEngineConfig, PoolConfig
from cube_ray.pipeline import connect_ray
from cube_ray.pipeline.engine_pool import EnginePools

def malloc_env():
    with open("/proc/self/environ", "rb") as fh:  # the environment at exec
        pairs = [x.decode() for x in fh.read().split(b"\\0")]
    return sorted(p for p in pairs if p.startswith("MALLOC_"))

assert connect_ray(RunConfig.from_yaml(sys.argv[1]))

@ray.remote(num_cpus=0.1)
def worker():
    import pyarrow as pa
    return pa.default_memory_pool().backend_name, malloc_env()

backend, env = ray.get(worker.remote())
print("backend", backend)
print("worker", ",".join(env))
pools = EnginePools()
config = FakeEngineConfig(name="gen", pool=PoolConfig(num_cpus=0.1))
pools.factory([config], stage="questions")
[(dispatcher, _, _)] = pools._pools.values()
[host] = ray.get(dispatcher.hosts.remote())
print("engine", ",".join(ray.get(host.__ray_call__.remote(lambda _: malloc_env()))))
pools.close()

raylet = [p for p in psutil.Process().children(recursive=True) if p.name() == "raylet"]
with open(f"/proc/{raylet[0].pid}/environ", "rb") as fh:
    pairs = [x.decode() for x in fh.read().split(b"\\0")]
print("raylet", ",".join(sorted(p for p in pairs if p.startswith("RAY_num_workers_soft")
                                or p.startswith("RAY_idle_worker_killing"))))

@ray.remote(num_cpus=0.1)
def hold(handle):  # the handle is dropped with the task, as a stage's is
    time.sleep(1.0)
    return psutil.Process().pid

pids = set(ray.get([hold.remote(pools._pools) for _ in range(4)]))
deadline = time.monotonic() + 25
def alive():
    return [p for p in pids if psutil.pid_exists(p)
            and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]

while time.monotonic() < deadline and alive():
    time.sleep(0.5)
print("idle workers left", len(alive()))
ray.shutdown()
"""

_OURS = ",".join(
    f"{k}={v}" for k, v in sorted(WORKER_ENV.items()) if k.startswith("MALLOC_")
)
_ENGINE = f"MALLOC_MMAP_THRESHOLD_={32 * 2**20},MALLOC_TRIM_THRESHOLD_={64 * 2**20}"
_USER = "MALLOC_MMAP_THRESHOLD_=65536"
_REAP = "RAY_idle_worker_killing_time_threshold_ms=10000"


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("chosen", "expected"),
    [
        ({}, ("system", _OURS, _ENGINE, f"{_REAP},RAY_num_workers_soft_limit=0")),
        (
            {
                "ARROW_DEFAULT_MEMORY_POOL": "jemalloc",
                "MALLOC_MMAP_THRESHOLD_": "65536",
                "RAY_num_workers_soft_limit": "4",
            },
            (
                "jemalloc",
                f"{_USER},MALLOC_TRIM_THRESHOLD_={4 * 2**20}",
                f"{_USER},MALLOC_TRIM_THRESHOLD_={64 * 2**20}",
                f"{_REAP},RAY_num_workers_soft_limit=4",
            ),
        ),
    ],
    ids=["run-defaults", "user-choice"],
)
def test_workers_and_engines_get_their_allocator_settings(
    tmp_path: Path, chosen: dict[str, str], expected: tuple[str, str, str, str]
) -> None:
    corpus, ids = make_corpus(tmp_path, 3)
    cfg = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in WORKER_ENV and k not in RAYLET_ENV and k != "RAY_ADDRESS"
    }
    env.update(chosen)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(cfg)],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    backend, worker, engine, raylet = expected
    assert f"backend {backend}\n" in out.stdout
    assert f"worker {worker}\n" in out.stdout
    assert f"engine {engine}\n" in out.stdout
    assert f"raylet {raylet}\n" in out.stdout
    # Ray's own limit keeps up to num_cpus idle workers; the run's lets them go
    left = int(out.stdout.split("idle workers left ")[1].split()[0])
    assert (left == 0) if not chosen else (left > 0), out.stdout
