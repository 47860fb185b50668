"""Engine-pool call cost: the dispatcher's memory per call, and time per call
against calling the engine host directly (the baseline, same process).

    PYTHONPATH=. .venv/bin/python benchmarks/engine_pool_calls.py \
        --calls 800 --batch 1024

A local Ray; one fake-engine pool (``min_size`` 1, ``max_size`` 2) of the job's
``EnginePools``; four Ray tasks each score ``--calls / 4`` batches of
``--batch`` judge-sized prompts (about 3.6 kB each) through a
``RemoteEngine``, as a light stage does. Then the same tasks call one engine
host directly, without the dispatcher. Reports seconds per call both ways and
their ratio, and the dispatcher's private memory (``RssAnon``) before and after
the pool's calls, per call: it must not grow with the number of calls, since a
2 M-record run makes hundreds of thousands.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import ray

from cube_ray.engines.config import FakeEngineConfig
from cube_ray.pipeline.engine_pool import EnginePools

TASKS = 4


def _prompts(batch: int) -> list[str]:
    return [("文档" * 600) + f" q{i}" for i in range(batch)]


@ray.remote(num_cpus=0.25)
def _through_pool(factory: Any, config: Any, calls: int, batch: int) -> int:
    engine = factory(config)
    prompts = _prompts(batch)
    for _ in range(calls):
        engine.score(prompts, mode="argmax")
    return calls


@ray.remote(num_cpus=0.25)
def _direct(host: Any, calls: int, batch: int) -> int:
    prompts = _prompts(batch)
    for _ in range(calls):
        ray.get(host.score.remote(prompts, "argmax"))
    return calls


def _anon_mb(pid: int) -> float:
    with Path(f"/proc/{pid}/status").open(encoding="ascii") as fh:
        for line in fh:
            if line.startswith("RssAnon"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _pid(_: Any) -> int:
    return os.getpid()


def main() -> None:
    """Run both ways and print one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=800)
    ap.add_argument("--batch", type=int, default=1024)
    args = ap.parse_args()
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    pool = {"min_size": 1, "max_size": 2, "num_cpus": 0.5, "batch_size": args.batch}
    config = FakeEngineConfig(name="j", pool=pool)
    pools = EnginePools()
    try:
        factory = pools.factory([config], stage="bench")
        dispatcher = next(iter(factory.pools.values()))[0]
        ray.get(_through_pool.remote(factory, config, 4, args.batch))  # warm up
        pid = ray.get(dispatcher.__ray_call__.remote(_pid))
        per_task = args.calls // TASKS
        before = _anon_mb(pid)
        start = time.perf_counter()
        ray.get(
            [
                _through_pool.remote(factory, config, per_task, args.batch)
                for _ in range(TASKS)
            ]
        )
        pooled = (time.perf_counter() - start) / (per_task * TASKS)
        after = _anon_mb(pid)
        host = ray.get(dispatcher.hosts.remote())[0]
        ray.get(_direct.remote(host, 4, args.batch))  # warm up
        start = time.perf_counter()
        ray.get([_direct.remote(host, per_task, args.batch) for _ in range(TASKS)])
        direct = (time.perf_counter() - start) / (per_task * TASKS)
    finally:
        pools.close()
        ray.shutdown()
    calls = per_task * TASKS
    print(
        json.dumps(
            {
                "calls": calls,
                "batch": args.batch,
                "s_per_call_pool": round(pooled, 4),
                "s_per_call_direct": round(direct, 4),
                "ratio_pool_to_direct": round(pooled / direct, 2),
                "dispatcher_rss_anon_mb": [round(before, 1), round(after, 1)],
                "dispatcher_kb_per_call": round(
                    (after - before) * 1024 / (per_task * TASKS), 2
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
