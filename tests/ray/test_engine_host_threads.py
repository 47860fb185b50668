"""An engine host with fractional ``num_cpus`` computes with the cores it may use.

Ray gives a ``num_cpus=0.5`` worker ``OMP_NUM_THREADS=1``; the host of a CPU
vLLM engine sets its threads from its CPU affinity (or ``pool.cpu_threads``)
before vLLM loads, and an ``OMP_NUM_THREADS`` in the engine's ``env`` wins.
Read inside the real host of a real pool, after its engine started.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from cube_ray.engines.config import PoolConfig, VllmEngineConfig
from cube_ray.pipeline.engine_pool import EnginePools
from tests.conftest import TINY_ENGINE_ENV

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(400)]


def _seen(_: Any) -> tuple[str | None, int, int]:
    import torch

    omp = os.environ.get("OMP_NUM_THREADS")
    return omp, torch.get_num_threads(), len(os.sched_getaffinity(0))


def _host_threads(ray: Any, config: VllmEngineConfig) -> tuple[str | None, int, int]:
    pools = EnginePools()
    try:
        pools.factory([config], stage="judge")
        [(dispatcher, _, _)] = pools._pools.values()
        [host] = ray.get(dispatcher.hosts.remote())
        out: tuple[str | None, int, int] = ray.get(
            host.__ray_call__.remote(_seen), timeout=60
        )
        return out
    finally:
        pools.close()


def test_cpu_engine_host_uses_its_cores(ray_local: Any, tiny_model_dir: Path) -> None:
    ray = ray_local
    # `_seen` and `plain` live in this test module, which workers cannot import.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    @ray.remote(num_cpus=0.5)
    def plain() -> str | None:
        return os.environ.get("OMP_NUM_THREADS")

    # What the engine host would get from Ray alone.
    assert ray.get(plain.remote(), timeout=60) == "1"

    base = {"model": str(tiny_model_dir), "max_model_len": 256, "enforce_eager": True}
    config = VllmEngineConfig(
        **base, env=dict(TINY_ENGINE_ENV), pool=PoolConfig(num_cpus=0.5)
    )
    omp, torch_threads, cores = _host_threads(ray, config)
    assert (omp, torch_threads) == (str(cores), cores)

    # The knob (below the cores: vLLM's CPU worker never binds more threads
    # than the cores it may use), and the engine's env over the default.
    knob = config.model_copy(update={"pool": PoolConfig(num_cpus=0.5, cpu_threads=1)})
    # The environment the engine (and vLLM's EngineCore) starts with is the
    # knob's; torch's own count is checked for the default above only: in a
    # long session Ray can host this engine in a reused worker process whose
    # vLLM already bound its threads to the worker's cores.
    assert _host_threads(ray, knob)[0] == "1"
    mine = config.model_copy(
        update={"env": {**TINY_ENGINE_ENV, "OMP_NUM_THREADS": "1"}}
    )
    assert _host_threads(ray, mine)[0] == "1"
