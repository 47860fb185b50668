"""A light stage's task keeps nothing once its batch is done (no Ray started).

Ray never reaps an idle worker that still holds an actor handle, and a stage
holds its engine pool's handles: a stage object cached in the worker kept
every judge-stage worker (175-250 MB each) alive until the job ended.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pyarrow as pa

from cube_ray.pipeline import data, engine_pool
from cube_ray.stages import NODE_ID


class _Handle:
    """Stands in for an actor handle passed in a stage's kwargs."""


def test_light_stage_drops_its_stage_and_handles() -> None:
    made: list[weakref.ref[Any]] = []

    class Stage:
        def __init__(self, handle: _Handle) -> None:
            self.handle = handle
            made.append(weakref.ref(self))

        def __call__(self, batch: pa.Table) -> pa.Table:
            engine_pool._SERVED_BY.append("node-a")  # as a pool call records it
            return batch

    handle = _Handle()
    handle_ref = weakref.ref(handle)
    batch = pa.table({"x": [1, 2, 3]})
    for _ in range(2):
        out = data._light_stage(batch, stage_cls=Stage, kwargs={"handle": handle})
        assert out.column(NODE_ID).to_pylist() == ["node-a"] * 3
    del handle, out
    gc.collect()
    assert len(made) == 2  # one stage object per batch
    assert [r() for r in made] == [None, None]
    assert handle_ref() is None
