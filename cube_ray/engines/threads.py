"""Threads of a CPU engine: the cores its process may use, not its Ray ``num_cpus``.

Ray gives a worker with fractional ``num_cpus`` (the engine pools' default is
0.5) ``OMP_NUM_THREADS=1``, so torch computes on one core however many the
process may run on. On an idle 2-core machine the demo's engine prefilled
23.3 tok/s inside a ``num_cpus=0.5`` task, 37.8 tok/s with
``OMP_NUM_THREADS=2`` and 44.2 tok/s outside Ray (issue 28; BENCHMARKS.md,
"CPU engine threads"). ``num_cpus`` is a scheduling share, not a thread budget:
the host actor sets the thread count of a CPU engine from its CPU affinity
(or ``pool.cpu_threads``) before torch or vLLM read it. An ``OMP_NUM_THREADS``
in the engine's own ``env`` wins. GPU engines, API and fake engines are left
as they are.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["OMP_VAR", "apply_engine_threads", "engine_threads"]

OMP_VAR = "OMP_NUM_THREADS"
"""What OpenMP (torch's CPU kernels, vLLM's CPU attention) reads at start."""


def engine_threads(
    *,
    cpu_engine: bool,
    configured: int | None,
    engine_env: Mapping[str, str],
    cores: int,
) -> int | None:
    """Threads a host's engine should compute with; None leaves the process as is.

    ``cpu_engine``: the engine computes with torch on the CPU (a vLLM engine
    with no GPU, the embedded model). ``configured``: ``pool.cpu_threads``.
    ``engine_env``: the engine's ``env``; its ``OMP_NUM_THREADS`` is applied
    with the rest of it, so it wins. ``cores``: CPUs this process may run on.

    >>> engine_threads(cpu_engine=True, configured=None, engine_env={}, cores=2)
    2
    >>> engine_threads(cpu_engine=True, configured=1, engine_env={}, cores=8)
    1
    >>> print(engine_threads(cpu_engine=True, configured=4,
    ...                      engine_env={"OMP_NUM_THREADS": "3"}, cores=8))
    None
    >>> print(engine_threads(cpu_engine=False, configured=None, engine_env={},
    ...                      cores=8))
    None
    >>> engine_threads(cpu_engine=True, configured=None, engine_env={}, cores=0)
    1
    """
    if not cpu_engine or OMP_VAR in engine_env:
        return None
    if configured is not None:
        return configured
    return max(1, cores)


def _cores() -> int:
    """CPUs this process may run on (its affinity; the CPU count elsewhere)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover - not Linux


def apply_engine_threads(config: Any) -> int | None:
    """Set this process's threads for ``config``'s engine; the count set, or None.

    Runs in the engine host before the engine is built: ``OMP_NUM_THREADS``
    goes into the environment (vLLM's EngineCore subprocess inherits it; a
    fresh OpenMP runtime reads it), and where torch is loaded already its
    thread pool is resized too (OpenMP read the variable when it loaded).
    """
    threads = engine_threads(
        cpu_engine=bool(getattr(config, "cpu_engine", False)),
        configured=config.pool.cpu_threads,
        engine_env=getattr(config, "env", {}),
        cores=_cores(),
    )
    if threads is None:
        return None
    os.environ[OMP_VAR] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    return threads
