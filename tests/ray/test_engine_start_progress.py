"""An engine that takes long to start says so on the console meanwhile.

The embedded model's one-time conversion and a CPU engine's start take
minutes; the driver waits for a pool's first host and prints what it is doing
every ``START_PROGRESS_S`` seconds, then how long it took. A real pool of a
fake engine that sleeps on construction.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from cube_ray.engines.config import FakeEngineConfig, PoolConfig
from cube_ray.engines.identity import engine_id
from cube_ray.pipeline import engine_pool
from cube_ray.pipeline.engine_pool import EnginePools

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]


def test_slow_start_prints_progress(
    ray_local: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(engine_pool, "START_PROGRESS_S", 2.0)
    slow = FakeEngineConfig(name="slow", startup_s=7.0, pool=PoolConfig(num_cpus=0.25))
    said: list[str] = []
    pools = EnginePools(say=said.append, before_first=lambda: said.append("first"))
    try:
        pools.factory([slow], stage="scores:slow")
        pools.factory([slow], stage="scores:again")  # the same pool: no second start
    finally:
        pools.close()
    eid = engine_id(slow)
    assert said.count("first") == 1  # once, before the first pool starts
    assert said[1] == f"engine {eid}: starting"
    waits = [
        int(m[1]) for s in said if (m := re.search(r"still starting \((\d+) s\)", s))
    ]
    assert len(waits) >= 1
    assert waits == sorted(waits)
    assert re.fullmatch(rf"engine {re.escape(eid)}: ready after \d+ s", said[-1])
    assert int(said[-1].rsplit(" ", 2)[1]) >= 6
    # By default the lines go to the console (stderr outside a quiet run).
    pools = EnginePools()
    try:
        pools.factory([slow.model_copy(update={"name": "slow2"})], stage="q")
    finally:
        pools.close()
    err = capsys.readouterr().err
    assert "cube-ray: engine fake:slow2-" in err
    assert ": ready after " in err
