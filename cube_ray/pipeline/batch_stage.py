"""A stage whose engine sends through a provider's Batch API, run on the driver.

An ``openai_http`` engine with ``batch: true`` answers a whole stage at once:
its prompts go out as one batch (per input file), the provider answers within
its completion window, and nothing is gained by spreading the rows over Ray
actors. So the runner hands such a stage here instead of to ``map_batches``:

1. the rows left to do are collected on the driver, sorted by the stage's
   key (so a rerun builds the same request file, byte for byte, and finds
   its recorded batch);
2. the plain stage class (``cube_ray.stages``) runs once over all of them,
   with the batch engine built on the driver; any other engine of the stage
   is still the shared pool (:class:`~cube_ray.pipeline.engine_pool.SharedEngines`);
3. its output goes to the ordinary writer tasks (``DataOps.write_parts``),
   and the batch records are settled after (``BatchLedger.settle``).

The Ray boundary stays where it was: the stage classes and the engine are
plain Python; Ray is only what collects the rows and writes them.
docs/engines.md ("Batch APIs") says when to use it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from cube_ray.engines.openai_http import BATCHES_DIR, BatchLedger
from cube_ray.engines.registry import build_engine
from cube_ray.stages import NODE_ID

if TYPE_CHECKING:
    from ray.data import Dataset

    from cube_ray.pipeline.method import StageSpec

__all__ = ["batch_configs", "run_on_driver", "stage_ledger"]


def batch_configs(spec: StageSpec) -> list[Any]:
    """The stage's engines that send through a Batch API (``batch: true``)."""
    return [e for e in spec.engines if getattr(e, "batch", False)]


def stage_ledger(
    run_dir: Path, label: str, *, say: Callable[[str], None]
) -> BatchLedger:
    """The batch records of one stage (``RUN_DIR/batches``); lines name it."""
    return BatchLedger(
        Path(run_dir) / BATCHES_DIR, stage=label, say=lambda t: say(f"{label}: {t}")
    )


def run_on_driver(
    spec: StageSpec,
    todo: Dataset,
    *,
    kwargs: dict[str, Any],
    shared: Callable[[Any], Any] | None,
    run_dir: Path,
    say: Callable[[str], None],
) -> tuple[Dataset, BatchLedger]:
    """The stage over every row of ``todo`` on the driver; see the module docstring.

    Args:
        spec: The stage (it has a batch engine).
        todo: The rows left to do.
        kwargs: The stage class's keyword arguments (but ``engine_factory``).
        shared: The factory of the stage's other engines (shared pools).
        run_dir: The run dir (its ``batches/`` folder gets the records).
        say: Where the batches' progress lines go (prefixed with the stage).

    Returns:
        The output rows as a dataset, and the ledger to settle once they are
        written.
    """
    # heavy: ray, imported only where this code uses it
    import ray
    import ray.data

    refs = todo.to_arrow_refs()
    tables = [t for t in ray.get(refs) if t.num_rows]
    ledger = stage_ledger(run_dir, spec.label, say=say)
    if not tables:  # nothing to do: nothing to write either
        return todo, ledger
    table = pa.concat_tables(tables, promote_options="default")
    built: list[Any] = []

    def factory(config: Any) -> Any:
        if getattr(config, "batch", False):
            engine = build_engine(config)
            engine.attach_batches(ledger)  # type: ignore[attr-defined]
            built.append(engine)
            return engine
        assert shared is not None
        return shared(config)

    table = table.sort_by([(k, "ascending") for k in spec.key])
    stage = spec.stage_cls(**kwargs, engine_factory=factory)
    try:
        out: pa.Table = stage(table)
    finally:
        stage.close()
        for engine in built:
            engine.close()
    node = ray.get_runtime_context().get_node_id()
    out = out.append_column(NODE_ID, pa.array([node] * out.num_rows, pa.string()))
    return ray.data.from_arrow(out), ledger
