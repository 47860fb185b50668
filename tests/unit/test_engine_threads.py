"""A CPU engine computes with the cores its process may use (issue 28, item 5)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cube_ray.engines.config import (
    EmbeddedEngineConfig,
    FakeEngineConfig,
    PoolConfig,
    VllmEngineConfig,
)
from cube_ray.engines.threads import OMP_VAR, engine_threads


@pytest.mark.parametrize(
    ("cpu", "configured", "env", "cores", "want"),
    [
        (True, None, {}, 2, 2),  # Ray's num_cpus=0.5 does not enter into it
        (True, None, {}, 16, 16),
        (True, 3, {}, 16, 3),  # pool.cpu_threads
        (True, 3, {OMP_VAR: "1"}, 16, None),  # the engine's env wins (applied later)
        (True, None, {"VLLM_CPU_KVCACHE_SPACE": "1"}, 4, 4),
        (False, None, {}, 16, None),  # GPU, API, fake: untouched
        (False, 3, {}, 16, None),
        (True, None, {}, 0, 1),
    ],
)
def test_engine_threads(
    cpu: bool, configured: int | None, env: dict[str, str], cores: int, want: int
) -> None:
    got = engine_threads(
        cpu_engine=cpu, configured=configured, engine_env=env, cores=cores
    )
    assert got == want


def test_which_engines_are_cpu_engines() -> None:
    assert VllmEngineConfig(model="m").cpu_engine
    assert not VllmEngineConfig(model="m", pool=PoolConfig(num_gpus=1)).cpu_engine
    assert EmbeddedEngineConfig().cpu_engine
    assert not FakeEngineConfig(name="f").cpu_engine


def test_cpu_threads_is_validated() -> None:
    with pytest.raises(ValueError, match="cpu_threads"):
        PoolConfig(cpu_threads=0)


_APPLY_SCRIPT = r"""
import os, sys
import torch
from cube_ray.engines.config import FakeEngineConfig, PoolConfig, VllmEngineConfig
from cube_ray.engines.threads import OMP_VAR, apply_engine_threads

os.environ[OMP_VAR] = "2"
config = VllmEngineConfig(model="m", pool=PoolConfig(cpu_threads=1))
assert apply_engine_threads(config) == 1
assert os.environ[OMP_VAR] == "1"
assert torch.get_num_threads() == 1, torch.get_num_threads()
cores = len(os.sched_getaffinity(0))
assert apply_engine_threads(VllmEngineConfig(model="m")) == cores
assert torch.get_num_threads() == cores, torch.get_num_threads()
os.environ[OMP_VAR] = "1"
gpu = VllmEngineConfig(model="m", pool=PoolConfig(num_gpus=1, cpu_threads=3))
assert apply_engine_threads(gpu) is None
assert apply_engine_threads(FakeEngineConfig(name="f")) is None
mine = VllmEngineConfig(model="m", env={OMP_VAR: "1"})
assert apply_engine_threads(mine) is None
assert os.environ[OMP_VAR] == "1"
print("ok")
"""


def test_apply_sets_the_environment_and_torch() -> None:
    """In a fresh interpreter: once vLLM's CPU worker has bound its threads in a
    process (an earlier in-process test may have started one), it turns
    ``torch.set_num_threads`` into a no-op, so this cannot run in the test
    process itself."""
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if k != OMP_VAR}
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(
        [str(root), *filter(None, [env.get("PYTHONPATH")])]
    )
    done = subprocess.run(
        [sys.executable, "-c", _APPLY_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
