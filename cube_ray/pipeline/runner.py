"""The generic stage runner: one ``StageSpec`` in, its rows in part files.

Retried after a lost worker or node.

An attempt is ``inputs -> [left_anti join with what is already written] ->
map_batches(the stage's tasks or actors) -> writer tasks``; the driver only
iterates the descriptions of the part files written. A spec with engines
reaches the job's shared engine pools (``cube_ray.pipeline.engine_pool``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from cube_ray.console import console
from cube_ray.credentials import secret_names
from cube_ray.errors import CubeRayError
from cube_ray.pipeline import faults
from cube_ray.pipeline.batch_stage import batch_configs, run_on_driver, stage_ledger
from cube_ray.pipeline.data import _light_stage, _StageActor, pool_args
from cube_ray.pipeline.outcomes import failure_warning, outcome_counts
from cube_ray.pipeline.parts import (
    _PENDING_PREFIX,
    StageStats,
    _count,
    _rows_in,
    _safe,
    count_unseen,
    part_files,
)
from cube_ray.pipeline.stall import StallWatch, stall_message
from cube_ray.preflight import engine_pool_cpus, stage_cpus

if TYPE_CHECKING:
    from ray.data import Dataset

    from cube_ray.pipeline.compaction import Compaction
    from cube_ray.pipeline.data import DataOps
    from cube_ray.pipeline.engine_pool import EnginePools
    from cube_ray.pipeline.method import StageSpec
    from cube_ray.pipeline.state import RunState

__all__ = ["WAVE_SEQ", "StageRunner"]

WAVE_SEQ = 10_000
"""Part-file sequence numbers of wave ``w`` of a stage start at ``w * WAVE_SEQ``
(each retry takes the next number), so the waves of a stage never share a
file name."""


class _Progress:
    """A tqdm bar per stage (or nothing)."""

    def __init__(self, enabled: bool, name: str, total: int | None) -> None:
        self._bar: Any = None
        if enabled:
            # tqdm on the driver only: the Ray stage workers import this module
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=name, unit="row", file=console())

    def update(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _doer(spec: StageSpec) -> str:
    """Who does a stage's work, as a sentence names it (``judge j1``).

    >>> from types import SimpleNamespace as S
    >>> _doer(S(label="scores:j1", owners=(("judges.j1", None),)))
    'judge j1'
    >>> _doer(S(label="answers:bounds", owners=(("generator", None),)))
    'generator'
    >>> _doer(S(label="answers:rag", owners=(("systems[rag]", 1), ("generator", 2))))
    'answers:rag (systems[rag], generator)'
    """
    if len(spec.owners) != 1:
        names = ", ".join(path for path, _ in spec.owners)
        return f"{spec.label} ({names})" if names else spec.label
    path = spec.owners[0][0]
    if path.startswith("judges."):
        return f"judge {path.removeprefix('judges.')}"
    return str(path)


def _say_batch(text: str) -> None:
    """A Batch API progress line, shown with or without progress.

    A wait may last hours, and a batch left running must be named.
    """
    print(f"cube-ray: {text}", file=console(), flush=True)


class StageRunner:
    """Runs one stage spec (of one wave), with retries after a lost node."""

    def __init__(
        self,
        state: RunState,
        *,
        data: DataOps,
        compaction: Compaction,
        engines: EnginePools,
    ) -> None:
        self._state = state
        self._data = data
        self._compaction = compaction
        self._engines = engines
        # Names only: each writer task reads the values from its environment.
        self._secrets = tuple(secret_names(state.config.model_dump(mode="json")))

    def run_stage(
        self, spec: StageSpec, *, inputs: Dataset, expected: int, wave: int = 0
    ) -> None:
        """Run one stage (of one wave), retrying unfinished rows after a lost node.

        Rows already received are written, so a retry is an ordinary resume:
        it sends only the rows not yet written to the engines. Errors in our
        own or the engines' code are not retried. The waves of a stage run
        one after another; their statistics add up under the stage's label.
        """
        label = spec.label
        earlier = self._state.stats.get(label) if wave else None
        stats = StageStats(expected=expected)
        start = time.monotonic()
        try:
            self._run_stage(spec, stats, inputs, first_seq=wave * WAVE_SEQ)
        finally:
            stats.seconds = time.monotonic() - start
            self._state.stats[label] = earlier.plus(stats) if earlier else stats

    def _run_stage(
        self, spec: StageSpec, stats: StageStats, inputs: Dataset, *, first_seq: int
    ) -> None:
        label = spec.label
        failures = 0  # in a row, without a row written in between
        written_at_failure = -1
        attempt = 0
        seen: dict[str, int] = {}  # part file name -> rows, every attempt
        stems: list[str] = []
        while True:
            attempt += 1
            nodes_before = faults.alive_nodes()
            stems.append(self._stem(label, first_seq))
            try:
                self._run_stage_once(
                    spec,
                    stats=stats,
                    first_attempt=attempt == 1,
                    first_seq=first_seq,
                    inputs=inputs,
                    seen=seen,
                )
                break
            except faults.StageInterrupted as interrupted:
                failure = interrupted
            # Outside the handler, so the original error keeps its own chain.
            cause = failure.__cause__
            assert cause is not None
            failures = 1 if stats.written > written_at_failure else failures + 1
            written_at_failure = stats.written
            retries = self._state.config.ray.stage_retries
            if failures > retries or not faults.is_infra_failure(cause):
                fault = faults.user_fault(cause)
                if fault is not None:
                    raise self._stopped(spec, stats, fault) from None
                raise cause
            first_seq = failure.next_seq
            reason = faults.infra_reason(cause)
            stats.retries.append(reason)
            self._state.say(
                f"{self._shown(label, first_seq)}: {reason}; {stats.written} rows "
                "are written, "
                f"retrying the rest (retry {failures} of at most {retries} in a "
                "row without progress)"
            )
            self._state.await_node_loss(label, nodes_before, failures)
        # A failed attempt's writer tasks may have renamed a file after it
        # was counted; the next attempt skipped its rows: count them now.
        for stem in stems[:-1]:
            count_unseen(stats, self._state.table_dir(spec.table), stem, seen)

    def _stopped(
        self, spec: StageSpec, stats: StageStats, fault: faults.UserFault
    ) -> CubeRayError:
        """The sentence a stage stopped by a user-fixable error ends the run with.

        Every part file written so far is complete and kept: the rerun skips
        their rows.
        """
        state = self._state
        options = state.options
        rerun = (
            f"cube-ray run {options.config_path or 'CONFIG'} --out {options.run_dir}"
        )
        kept = (
            f"the {stats.written} rows this stage wrote before are kept, with "
            "those of the stages before it"
        )
        if fault.kind == "disk_full":
            folder = (
                Path(fault.path).parent if fault.path else state.table_dir(spec.table)
            )
            msg = (
                f"{spec.label}: the disk is full ({fault.message}) writing to "
                f"{folder}. Nothing is lost: {kept}, and the file cut short was "
                "not kept. Free space on that disk (or move the run dir to a "
                f"larger one) and rerun `{rerun}` to resume from them"
            )
        else:
            msg = (
                f"{_doer(spec)}: {fault.message}. The run stopped; {kept}. Fix "
                f"that and rerun `{rerun}` to go on from them"
            )
        return CubeRayError(msg)

    def _report_stall(
        self, spec: StageSpec, shown: str, stats: StageStats, idle: float
    ) -> None:
        """Say what a stage that wrote nothing for ``idle`` seconds waits for."""
        # heavy: ray, imported only where this code uses it
        import ray

        config = self._state.config
        task = config.ray.task_num_cpus
        pool = spec.pool
        if spec.own_actors:
            owner = spec.owners[0][0] if spec.owners else spec.label
            needs = (
                f"{pool.min_size} actor(s) of {owner}.pool.num_cpus "
                f"{pool.num_cpus:g} and a writer task of ray.task_num_cpus {task:g}"
            )
        else:
            needs = f"a task and a writer task of ray.task_num_cpus {task:g}"
        need = stage_cpus(pool, own_actors=spec.own_actors, task_cpus=task)
        pools = ", ".join(
            f"{' = '.join(paths)} {cpus:g}"
            for paths, cpus in engine_pool_cpus(config).values()
        )
        msg = stall_message(
            shown,
            idle_s=idle,
            written=stats.written,
            free=ray.available_resources(),  # type: ignore[no-untyped-call]
            total=ray.cluster_resources(),  # type: ignore[no-untyped-call]
            needs=needs,
            need_cpus=need,
            pools=pools,
        )
        print(f"cube-ray: warning: {msg}", file=console(), flush=True)

    def _shown(self, label: str, first_seq: int) -> str:
        """A stage's name in messages: with its wave when there are waves."""
        if self._state.config.ray.waves == 1:
            return label
        return f"{label}@{first_seq // WAVE_SEQ + 1}"

    def _stem(self, label: str, first_seq: int) -> str:
        """Name prefix of the part files of one attempt of a stage."""
        return f"part-{self._state.stamp}-{_safe(label)}-{first_seq:06d}"

    def _run_stage_once(
        self,
        spec: StageSpec,
        *,
        stats: StageStats,
        first_attempt: bool,
        first_seq: int,
        inputs: Dataset,
        seen: dict[str, int],
    ) -> None:
        """Anti-join with done rows, run the stage (tasks or actors), write parts.

        ``seen``: the part files this stage run has counted (name -> rows).
        """
        state, compaction = self._state, self._compaction
        label, key, expected = spec.label, spec.key, stats.expected
        shown = self._shown(label, first_seq)
        start = time.monotonic()
        table_dir = state.table_dir(spec.table)
        existing = part_files(table_dir, label)
        # Set while a stage adds rows to a table that had rows: a crash before
        # the compaction that follows leaves stale rows, so the next run
        # compacts even when it has no row left to do.
        pending = table_dir / f"{_PENDING_PREFIX}{_safe(label)}"
        was_pending = pending.exists()
        todo = inputs
        stale: set[str] | None = None
        if existing:
            small = _rows_in(existing) <= state.config.ray.driver_resume_rows
            try:
                if small:
                    todo, stale = compaction.todo_small(inputs, existing, key)
                else:
                    todo = compaction.todo_join(inputs, existing, key, expected)
                n_todo = todo.count()
            except Exception as exc:
                raise faults.StageInterrupted(first_seq) from exc
            if first_attempt:
                stats.skipped = expected - n_todo
            if n_todo == 0:
                if batch_configs(spec):  # killed after the write: read already
                    stage_ledger(state.run_dir, label, say=_say_batch).settle()
                if was_pending:
                    compaction.compact_retrying(spec.table, label, inputs, expected)
                    pending.unlink(missing_ok=True)
                elif first_attempt:
                    state.say(f"{shown}: all {expected} rows already done, skipped")
                return
            pending.touch()
        try:
            spec.stage_cls.check_columns(inputs.columns())
        except CubeRayError:
            raise
        except Exception as exc:
            raise faults.StageInterrupted(first_seq) from exc
        ledger = None
        if batch_configs(spec):  # a Batch API engine: the stage runs on the driver
            out, ledger = self._on_driver(spec, todo)
        else:
            out = self._map(spec, todo)
        stem = self._stem(label, first_seq)
        bar = _Progress(state.progress, shown, expected - stats.skipped - stats.written)
        watch = StallWatch(
            after_s=state.config.ray.stall_report_s,
            report=lambda idle: self._report_stall(spec, shown, stats, idle),
        )
        try:
            with watch:
                parts = self._data.write_parts(
                    out,
                    table_dir,
                    stem=stem,
                    key=key,
                    schema_=spec.out_schema,
                    secrets=self._secrets,
                )
                for info in parts:
                    watch.progress()
                    if info["file"] not in seen:
                        seen[info["file"]] = info["rows"]
                        _count(stats, info)
                        bar.update(info["rows"])
        except BaseException as exc:
            # Whatever the failure (Ctrl-C included), part files already
            # written are complete: keep them, and count those whose
            # description did not arrive.
            count_unseen(stats, table_dir, stem, seen)
            if not isinstance(exc, Exception):
                raise
            raise faults.StageInterrupted(first_seq + 1) from exc
        finally:
            bar.close()
        written = count_unseen(stats, table_dir, stem, seen)
        if ledger is not None:  # its rows are written: a rerun submits anew
            ledger.settle()
        if existing and (written or was_pending):
            if stale is not None and not was_pending:
                compaction.compact_small(spec.table, label, existing, stale)
            else:
                # An interrupted earlier run may have left a key with rows of
                # two hashes: only the join with the current inputs settles it.
                compaction.compact_retrying(spec.table, label, inputs, expected)
            pending.unlink(missing_ok=True)
        counted = outcome_counts(stats.statuses)
        state.say(
            f"{shown}: {written} rows written"
            + (f" ({counted})" if counted else "")
            + f", {stats.skipped} skipped ({time.monotonic() - start:.1f} s)"
        )
        warning = failure_warning(
            shown,
            stats.statuses,
            owners=spec.owners,
            table=spec.table,
            rerun=self._rerun_command(),
        )
        if warning is not None:  # shown with or without progress lines
            print(f"cube-ray: warning: {warning}", file=console(), flush=True)

    def _rerun_command(self) -> str:
        """The command that redoes this run's failed rows."""
        options = self._state.options
        config = options.config_path or "CONFIG"
        return f"cube-ray run {config} --out {options.run_dir} --retry-failed"

    def _stage_kwargs(self, spec: StageSpec) -> dict[str, Any]:
        return {
            **spec.stage_kwargs,
            **self._state.stage_context,
            "call_log": self._state.options.call_log,
        }

    def _on_driver(self, spec: StageSpec, todo: Dataset) -> tuple[Dataset, Any]:
        """A stage with a Batch API engine, on the driver (``batch_stage``)."""
        others = [e for e in spec.engines if not getattr(e, "batch", False)]
        shared = self._engines.factory(others, stage=spec.label) if others else None
        return run_on_driver(
            spec,
            todo,
            kwargs=self._stage_kwargs(spec),
            shared=shared,
            run_dir=self._state.run_dir,
            say=_say_batch,
        )

    def _map(self, spec: StageSpec, todo: Dataset) -> Dataset:
        """The stage over the rows to do, one output block per input block.

        A stage with work of its own (a system) runs in an actor pool with
        its pool's CPUs, GPUs and resources. A light stage only calls the
        shared engine pools: it runs as tasks (``ray.task_num_cpus`` each, at
        most ``pool.max_size`` at once), which reuse Ray's worker processes
        instead of starting actors in every execution (every wave).
        """
        # heavy: ray, imported only where this code uses it
        import ray.data

        kwargs = self._stage_kwargs(spec)
        if spec.engines:
            kwargs["engine_factory"] = self._engines.factory(
                spec.engines, stage=spec.label
            )
        pool = spec.pool
        # A writer task writes each block as one part file as soon as it is
        # finished: small input blocks (a few engine batches) lose little in a
        # crash.
        todo = todo.repartition(target_num_rows_per_block=4 * pool.batch_size)
        if spec.own_actors:
            return todo.map_batches(
                _StageActor,
                fn_constructor_kwargs={"stage_cls": spec.stage_cls, "kwargs": kwargs},
                batch_format="pyarrow",
                **pool_args(pool),
            )
        return todo.map_batches(
            cast("Any", _light_stage),
            fn_kwargs={"stage_cls": spec.stage_cls, "kwargs": kwargs},
            batch_format="pyarrow",
            batch_size=pool.batch_size,
            num_cpus=self._state.config.ray.task_num_cpus,
            compute=ray.data.TaskPoolStrategy(size=pool.max_size),
        )
