"""Shared fixtures: the tiny real model, engine environment, a local Ray instance."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    # `tests.tiny_model` must import however pytest was started.
    sys.path.insert(0, str(REPO_ROOT))

from tests.tiny_model import build_tiny_model  # noqa: E402

TINY_ENGINE_ENV: dict[str, str] = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
"""Environment for a tiny in-process vLLM engine (~2 s start after import)."""


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """A tiny random-weight Llama model (head_dim 64) with its own tokenizer.

    Built once per cache key (see ``tests/tiny_model.py``); reruns reuse it.
    """
    return build_tiny_model()


@pytest.fixture
def tiny_engine_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Set the tiny-engine environment in this process; returns it."""
    for key, value in TINY_ENGINE_ENV.items():
        monkeypatch.setenv(key, value)
    return dict(TINY_ENGINE_ENV)


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    """A local Ray instance with 4 logical CPUs; shut down after the module."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():  # pragma: no cover - a leaked instance
        ray.shutdown()
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": dict(TINY_ENGINE_ENV)},
    )
    try:
        yield ray
    finally:
        _shutdown_and_reap(ray)


def _shutdown_and_reap(ray: Any, *, grace_s: float = 10.0) -> None:
    """``ray.shutdown()``, then end this session's own leftover Ray processes.

    Actors holding an in-process vLLM engine sometimes outlive the raylet. Ours
    are the driver's descendants and the processes whose ``RAY_RAYLET_PID`` is
    our raylet's; we note their ids before shutting down and end only those, by
    id, after a grace period.
    """
    import psutil

    me = psutil.Process(os.getpid())
    mine = {p.pid: p for p in me.children(recursive=True)}
    raylets = {str(pid) for pid, p in mine.items() if _name(p) == "raylet"}
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("RAY_RAYLET_PID") in raylets:
                mine.setdefault(proc.pid, proc)
    ray.shutdown()
    _gone, alive = psutil.wait_procs(list(mine.values()), timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def _name(proc: Any) -> str:
    try:
        return str(proc.name())
    except Exception:
        return ""


@pytest.fixture(autouse=True)
def _no_stale_log_streams() -> None:
    """Re-point log handlers left on a closed stream by an earlier test.

    Ray's logger keeps a handler on the ``sys.stderr`` of the test that first
    started Ray in this process (pytest's capture stream, closed once that
    test ends); a later in-process ``ray.init`` then logs "--- Logging error
    ---" with a traceback into the next test's captured stderr.
    """
    import logging

    loggers = [logging.getLogger()]
    loggers += [
        lg
        for lg in logging.Logger.manager.loggerDict.values()
        if isinstance(lg, logging.Logger)
    ]
    for lg in loggers:
        for handler in lg.handlers:
            stream = getattr(handler, "stream", None)
            if (
                isinstance(handler, logging.StreamHandler)
                and not isinstance(handler, logging.FileHandler)
                and stream is not None
                and getattr(stream, "closed", False)
            ):
                # Not setStream: it flushes the closed stream first.
                handler.stream = sys.stderr
