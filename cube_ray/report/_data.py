"""Reading a run directory for the report: the typed summary and the tables.

``summary.json`` is required and read through :class:`cube_ray.aggregate.Summary`
(one model, versioned); the tables (answers, scores, questions, documents) are
optional and each missing one only drops the sections that need it. Tables are
read with :mod:`cube_ray.tables` when that module provides a reader (schema
validation), else as plain Parquet.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from cube_ray.aggregate import (
    NO_JUDGE_SEPARATES,
    WEIGHTED,
    AcrossJudges,
    Intervals,
    JudgeFigures,
    Reason,
    Separation,
    Summary,
    k_of,
)
from cube_ray.errors import InputError
from cube_ray.manifest import Manifest
from cube_ray.sample import in_run_sample

__all__ = ["RunData", "load_run", "num", "read_table"]

CUBE = "cube"
"""Figure name of CuBE among the across-judge figures."""


def read_table(path: Path, kind: str) -> pl.DataFrame | None:
    """Read ``answers``/``scores``/``questions``/``documents`` at ``path``.

    ``path`` may be a directory of Parquet files or ``path.parquet``; returns
    ``None`` when neither exists.
    """
    candidates = [path, path.with_suffix(".parquet")]
    target = next((p for p in candidates if p.exists()), None)
    if target is None:
        return None
    reader = _tables_reader(kind)
    if reader is not None:
        frame = reader(target)
        if isinstance(frame, pl.DataFrame):
            return frame
    if target.is_dir():
        files = sorted(
            f
            for f in target.rglob("*.parquet")
            if not any(part.startswith(".") for part in f.relative_to(target).parts)
        )
        if not files:
            return None
        frames = []
        for f in files:
            try:
                frames.append(_read_file(f))
            except Exception as exc:  # corrupt or foreign files: name the file
                raise InputError(
                    f"cannot read this {kind} file as Parquet ({exc}). "
                    f"{_UNREADABLE_FIX}",
                    path=str(f),
                ) from None
        return pl.concat(frames, how="diagonal_relaxed")
    try:
        return pl.read_parquet(target)
    except Exception as exc:
        raise InputError(
            f"cannot read {kind} as Parquet: {exc}", path=str(target)
        ) from exc


_UNREADABLE_FIX = (
    "If it is a part file of a cube-ray run dir, rerun the same `cube-ray run "
    "CONFIG --out RUN_DIR`: it sets damaged part files aside and recomputes "
    "their rows."
)


def _read_file(path: Path) -> pl.DataFrame:
    """One Parquet file, page checksums verified (run dir parts carry them)."""
    frame = pl.from_arrow(pq.read_table(path, page_checksum_verification=True))
    assert isinstance(frame, pl.DataFrame)
    return frame


def _tables_reader(kind: str) -> Any:
    """``cube_ray.tables.read_<kind>`` if the module provides it."""
    try:
        tables = importlib.import_module("cube_ray.tables")
    except ModuleNotFoundError:
        return None
    return getattr(tables, f"read_{kind}", None)


def num(value: Any) -> float | None:
    """A finite float, or ``None`` for anything else (null, NaN, text).

    >>> num(1), num(float("nan")), num(None), num(True)
    (1.0, None, None, None)
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


@dataclass
class RunData:
    """Everything the report reads from one run directory."""

    run_dir: Path
    summary: Summary
    answers: pl.DataFrame | None = None
    scores: pl.DataFrame | None = None
    questions: pl.DataFrame | None = None
    documents: pl.DataFrame | None = None
    manifest: Manifest | None = None
    intervals: Intervals | None = None
    """The headline's intervals shown: the summary's, unless the report was
    asked for others (see :func:`cube_ray.report.write_report`)."""

    def __post_init__(self) -> None:
        if self.intervals is None:
            self.intervals = self.summary.intervals

    @property
    def name(self) -> str:
        """A short label of the run (its directory name)."""
        return self.run_dir.name or str(self.run_dir)

    @property
    def judges(self) -> list[str]:
        """The judges, sorted."""
        return sorted(self.summary.judge_names)

    @property
    def systems(self) -> list[str]:
        """The systems under test, sorted."""
        return sorted(self.summary.systems)

    @property
    def dimensions(self) -> list[str]:
        """The dimensions, in the order the judges scored them."""
        return list(self.summary.dimensions)

    def judge(self, judge: str) -> JudgeFigures:
        """The figures of one judge."""
        return self.summary.judges[judge]

    def judge_kind(self, judge: str) -> str:
        """How a judge is labelled: ``reference judge (no LLM)`` or ``LLM``.

        Read from the run config in the manifest; ``LLM`` when unknown.
        """
        recorded = self.manifest.config if self.manifest is not None else None
        judges = (recorded or {}).get("judges")
        entry = judges.get(judge) if isinstance(judges, dict) else None
        if isinstance(entry, dict) and entry.get("backend") == "reference":
            return "reference judge (no LLM)"
        return "LLM"

    def fixed_weights(self) -> dict[str, dict[str, dict[str, float | None]]] | None:
        """The recorded per-judge weights when they are not Pearson weights."""
        if self.summary.options().weights == "pearson":
            return None
        return {j: self.judge(j).weights for j in self.judges}

    def k_of(self, system: str) -> int:
        """The retrieval depth of a system (for recall@k and rank plots)."""
        return k_of(self.summary.options(), system)

    def across(self, system: str) -> AcrossJudges | None:
        """The across-judge block of ``system``."""
        return self.summary.across_judges.get(system)

    def figure(self, system: str, name: str) -> tuple[float | None, float | None]:
        """``(mean, sd)`` across the judges used of one figure of ``system``."""
        across = self.across(system)
        cell = across.figures.get(name) if across is not None else None
        if cell is None:
            return (None, None)
        return (num(cell.mean), num(cell.sd))

    def recall(self, system: str) -> float | None:
        """recall@k of ``system`` (the same for every judge)."""
        for judge in self.judges:
            value = num(self.judge(judge).recall_at_k.get(system))
            if value is not None:
                return value
        return None

    def headline_judges(self, system: str) -> list[str]:
        """The judges the across-judge figures of ``system`` average."""
        return [j for j in self.judges if j in self.summary.headline_judges(system)]

    def excluded(self, system: str) -> dict[str, Reason]:
        """Judges left out of the headline of ``system`` and why."""
        across = self.across(system)
        return dict(across.excluded) if across is not None else {}

    def no_verdict(self, system: str) -> Reason | None:
        """Why ``system`` has no across-judge figure, if it has none."""
        across = self.across(system)
        if across is None:
            return None
        if across.reason is not None:
            return across.reason
        if not self.headline_judges(system):
            return Reason(code=NO_JUDGE_SEPARATES, text="no judge separates the bounds")
        return None

    def separation(self, judge: str, system: str) -> Separation | None:
        """The weighted total's bound separation of a judge and system."""
        return self.judge(judge).bound_separation.get(system, {}).get(WEIGHTED)


def load_run(run_dir: str | Path, *, tables: bool = True) -> RunData:
    """Read a run directory; raises :class:`InputError` without a summary.

    ``tables=False`` reads ``summary.json`` and ``manifest.json`` only (what
    the console headline needs; the tables of a large run are gigabytes).
    """
    root = Path(run_dir)
    if not root.is_dir():
        raise InputError(
            "expected a run directory (with summary.json, answers/, scores/); "
            "it does not exist or is not a directory",
            path=str(root),
        )
    summary_path = root / "summary.json"
    if not summary_path.is_file():
        raise InputError(
            "summary.json is missing; create it with `cube-ray aggregate "
            f"{root}` (or finish `cube-ray run`) before `cube-ray report`",
            path=str(summary_path),
        )
    summary = Summary.read(summary_path)
    manifest = Manifest.read(root)  # informative only: a bad one is left out

    def table(kind: str) -> pl.DataFrame | None:
        return read_table(root / kind, kind) if tables else None

    answers, scores = table("answers"), table("scores")
    if answers is not None and scores is not None:
        # A run shrunk to a smaller sample keeps the other rows; the summary
        # (and so the report's recomputation) leaves them out.
        answers, scores, _ = in_run_sample(root, answers, scores)
    return RunData(
        run_dir=root,
        summary=summary,
        answers=answers,
        scores=scores,
        questions=table("questions"),
        documents=table("documents"),
        manifest=manifest,
    )
