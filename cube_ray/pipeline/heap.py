"""What a run's processes hand back to the OS once a task has freed its memory.

Ray keeps worker processes in a pool between tasks, and an idle worker still
holds whatever its allocator kept of its last task. At 1M records, seven idle
workers held 3.2 GB at the run's memory peak (BENCHMARKS.md, "Pipeline
scale"). Two allocators are at work in them:

- **Arrow's** default pool (mimalloc) keeps freed memory for reuse; the
  system pool (``ARROW_DEFAULT_MEMORY_POOL=system``) passes it to glibc.
- **glibc's** ``malloc`` serves a large block from its heap once a block of
  that size has been freed (its mmap threshold rises with every large free,
  up to 32 MiB), and a freed block in the middle of the heap stays resident.
  A fixed threshold (``MALLOC_MMAP_THRESHOLD_``) gives every block of 2 MiB or
  more its own mapping, which ``free`` unmaps. After a Ray Data join of
  1.2 M rows, idle workers held about 180-210 MB each with glibc's defaults
  and about 124 MB with these settings (a fresh worker: about 120 MB), in the
  same wall time (``benchmarks/idle_worker_heap.py``).

Idle workers themselves: a local Ray keeps up to ``num_cpus`` of them
(``RAY_num_workers_soft_limit``) for as long as the job runs, each holding its
imports and what its allocators kept. The run sets that limit to 0 on the Ray
it starts (``RAYLET_ENV``), so a worker idle for 10 s exits. Ray's default of
1 s restarted workers between batches: a 20k-record run took 197.8 s against
107.2 s with Ray's own limit (5 s: 124.6 s). A worker that still owns objects
or keeps an actor handle is never reaped, so stage tasks drop theirs
(``data._light_stage``). A Ray the run connects to keeps its own settings.

Engine hosts keep glibc's default behaviour (``engine_env``): an inference
engine on CPU frees and allocates activations of many MiB at every step, which
the rising threshold keeps on the heap instead of mapping them each time (a
reason, not a measurement: no engine was timed both ways).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

WORKER_ENV = {
    "ARROW_DEFAULT_MEMORY_POOL": "system",
    "MALLOC_MMAP_THRESHOLD_": str(2 * 2**20),
    "MALLOC_TRIM_THRESHOLD_": str(4 * 2**20),
}
"""Environment of the run's Ray workers, unless the user's environment sets a key."""

RAYLET_ENV = {
    "RAY_num_workers_soft_limit": "0",
    "RAY_idle_worker_killing_time_threshold_ms": "10000",
}
"""Environment of the raylet a run starts (local Ray), unless the user's sets a key."""

_ENGINE_DEFAULTS = {
    "MALLOC_MMAP_THRESHOLD_": str(32 * 2**20),
    "MALLOC_TRIM_THRESHOLD_": str(64 * 2**20),
}
"""glibc's thresholds once a large block was freed (its 64-bit maxima)."""


def workers_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The part of ``WORKER_ENV`` the user's environment does not set.

    >>> sorted(workers_env({"MALLOC_MMAP_THRESHOLD_": "65536"}))
    ['ARROW_DEFAULT_MEMORY_POOL', 'MALLOC_TRIM_THRESHOLD_']
    """
    return _unset(WORKER_ENV, environ)


def raylet_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The part of ``RAYLET_ENV`` the user's environment does not set.

    >>> sorted(raylet_env({}))
    ['RAY_idle_worker_killing_time_threshold_ms', 'RAY_num_workers_soft_limit']
    >>> raylet_env({"RAY_num_workers_soft_limit": "4"})
    {'RAY_idle_worker_killing_time_threshold_ms': '10000'}
    """
    return _unset(RAYLET_ENV, environ)


def _unset(wanted: dict[str, str], environ: Mapping[str, str] | None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: v for k, v in wanted.items() if k not in env}


def engine_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """An engine host's overrides: glibc's own thresholds, unless the user set some.

    On a local Ray the run puts ``WORKER_ENV`` in its own environment (the
    raylet's workers inherit it), so a key counts as the user's only when its
    value is not the run's.

    >>> engine_env({})["MALLOC_MMAP_THRESHOLD_"] == str(32 * 2**20)
    True
    >>> engine_env(dict(WORKER_ENV))["MALLOC_TRIM_THRESHOLD_"] == str(64 * 2**20)
    True
    >>> engine_env({"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "1"})
    {}
    """
    env = os.environ if environ is None else environ
    return {
        k: v
        for k, v in _ENGINE_DEFAULTS.items()
        if env.get(k, WORKER_ENV[k]) == WORKER_ENV[k]
    }
