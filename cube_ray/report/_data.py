"""Reading a run directory for the report, defensively.

``summary.json`` is required; the tables (answers, scores, questions,
documents) are optional and each missing one only drops the sections that
need it. Tables are read with :mod:`cube_ray.tables` when that module exists
(schema validation), else as plain Parquet.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import ValidationError

from cube_ray import schema
from cube_ray.aggregate import AggregateOptions
from cube_ray.errors import InputError
from cube_ray.report._cube import WEIGHTED, FixedWeights, k_of
from cube_ray.sample import in_run_sample

__all__ = ["RunData", "load_run", "read_options", "read_table"]


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
        try:
            return pl.concat(
                [pl.read_parquet(f) for f in files], how="diagonal_relaxed"
            )
        except Exception as exc:  # corrupt or foreign files
            raise InputError(
                f"cannot read the Parquet files of {kind}: {exc}", path=str(target)
            ) from exc
    try:
        return pl.read_parquet(target)
    except Exception as exc:
        raise InputError(
            f"cannot read {kind} as Parquet: {exc}", path=str(target)
        ) from exc


def _tables_reader(kind: str) -> Any:
    """``cube_ray.tables.read_<kind>`` if the module provides it."""
    try:
        tables = importlib.import_module("cube_ray.tables")
    except ModuleNotFoundError:
        return None
    return getattr(tables, f"read_{kind}", None)


@dataclass
class RunData:
    """Everything the report reads from one run directory."""

    run_dir: Path
    summary: dict[str, Any]
    answers: pl.DataFrame | None = None
    scores: pl.DataFrame | None = None
    questions: pl.DataFrame | None = None
    documents: pl.DataFrame | None = None
    manifest: dict[str, Any] | None = None
    judges: list[str] = field(default_factory=list)
    systems: list[str] = field(default_factory=list)
    dimensions: list[str] = field(default_factory=list)
    _options: tuple[AggregateOptions, list[str]] | None = field(
        default=None, repr=False
    )

    @property
    def name(self) -> str:
        """A short label of the run (its directory name)."""
        return self.run_dir.name or str(self.run_dir)

    def judge_block(self, judge: str) -> dict[str, Any]:
        """``summary["judges"][judge]`` or an empty dict."""
        block = _get(self.summary, "judges", judge)
        return block if isinstance(block, dict) else {}

    def judge_kind(self, judge: str) -> str:
        """How a judge is labelled: ``reference judge (no LLM)`` or ``LLM``.

        Read from the run config in the manifest; ``LLM`` when unknown.
        """
        config = _get(self.manifest or {}, "config", "judges", judge)
        if isinstance(config, dict) and config.get("backend") == "reference":
            return "reference judge (no LLM)"
        return "LLM"

    def parameters(self) -> dict[str, Any]:
        """The aggregation parameters recorded in the summary, if any."""
        value = self.summary.get("parameters")
        return value if isinstance(value, dict) else {}

    def _read_options(self) -> tuple[AggregateOptions, list[str]]:
        if self._options is None:
            self._options = read_options(
                self.parameters(), path=self.run_dir / "summary.json"
            )
        return self._options

    def aggregate_options(self) -> AggregateOptions:
        """The options the summary was computed with (see :func:`read_options`)."""
        return self._read_options()[0]

    def option_notes(self) -> list[str]:
        """What the report had to assume about the options (missing keys)."""
        return list(self._read_options()[1])

    def fixed_weights(self) -> FixedWeights | None:
        """The recorded per-judge weights when they are not Pearson weights."""
        if self.aggregate_options().weights == "pearson":
            return None
        return {
            j: {
                s: w
                for s, w in (self.judge_block(j).get("weights") or {}).items()
                if isinstance(w, dict)
            }
            for j in self.judges
        }

    def k_of(self, system: str) -> int:
        """The retrieval depth of a system (for recall@k and rank plots)."""
        return k_of(self.aggregate_options(), system)

    def across(self, system: str) -> dict[str, Any]:
        """``summary["across_judges"][system]`` or an empty dict."""
        block = _get(self.summary, "across_judges", system)
        return block if isinstance(block, dict) else {}

    def headline_judges(self, system: str) -> list[str]:
        """The judges the summary's across-judge figures of ``system`` average.

        ``across_judges.<system>.judges`` when recorded (CUBE_METHOD.md section
        10), else (older summaries) every judge; in both cases only the judges
        whose CuBE of ``system`` is defined, as the cross-judge mean skips the
        others.
        """
        listed = self.across(system).get("judges")
        names = listed if isinstance(listed, list) else self.judges
        return [
            j
            for j in self.judges
            if j in names and num(_get(self.judge_block(j), "cube", system)) is not None
        ]

    def excluded(self, system: str) -> dict[str, str]:
        """Judges left out of the headline of ``system`` and why (as recorded)."""
        block = self.across(system).get("excluded")
        if not isinstance(block, dict):
            return {}
        return {str(j): str(why) for j, why in block.items()}

    def no_verdict(self, system: str) -> str | None:
        """The recorded reason why ``system`` has no across-judge figure, if any."""
        reason = self.across(system).get("reason")
        if isinstance(reason, str) and reason:
            return reason
        if "judges" in self.across(system) and not self.headline_judges(system):
            return "no judge separates the bounds"
        return None

    def separation(self, judge: str, system: str) -> dict[str, Any]:
        """``bound_separation.<system>.weighted`` of a judge, or an empty dict."""
        cell = _get(self.judge_block(judge), "bound_separation", system, WEIGHTED)
        return cell if isinstance(cell, dict) else {}


_OPTION_WORDS = {
    "k": "retrieval depth k",
    "trim": "trim proportion",
    "weights": "weights",
    "bounds_on": "bounds_on",
    "min_gap": "minimum bound gap",
    "alpha": "separation test level alpha",
    "require_separation": "require_separation",
}


def read_options(
    parameters: Mapping[str, Any], *, path: Path | None = None
) -> tuple[AggregateOptions, list[str]]:
    """:class:`AggregateOptions` from a summary's ``parameters`` block.

    Keys that are not options (e.g. ``min_span``) are ignored. An option the
    summary does not record (a summary written before it existed) takes the
    model's default, and a note says so; a recorded value that is not valid is
    an error, not a silent default.

    Args:
        parameters: ``summary["parameters"]``.
        path: The summary's path, named in errors.

    Returns:
        The options and the notes about defaults the report assumed.

    Raises:
        InputError: A recorded option has an invalid value.

    Examples:
        >>> opts, notes = read_options({"k": 4, "trim": 0.2, "min_span": 1e-9})
        >>> opts.k, opts.trim, opts.weights
        (4, 0.2, 'pearson')
        >>> [n.split(" (")[0] for n in notes if "weights" in n]
        ['summary.json does not record weights']
    """
    fields = AggregateOptions.model_fields
    given = {k: v for k, v in parameters.items() if k in fields}
    try:
        options = AggregateOptions.model_validate(given)
    except ValidationError as exc:
        err = exc.errors()[0]
        field_name = ".".join(str(p) for p in err["loc"]) or "parameters"
        raise InputError(
            f"summary.json parameters.{field_name} = "
            f"{given.get(str(err['loc'][0]))!r} is not a valid aggregation "
            f"option: {err['msg']}. Re-create the summary with `cube-ray aggregate`.",
            path=str(path) if path else None,
            field=f"parameters.{field_name}",
        ) from exc
    missing = [k for k in fields if k not in parameters]
    notes: list[str] = []
    if missing and not parameters:
        notes.append(
            "summary.json records no aggregation parameters (an older summary): "
            "the report recomputed the intervals with the defaults "
            + ", ".join(f"{k}={getattr(options, k)!r}" for k in fields)
        )
    else:
        notes.extend(
            f"summary.json does not record {_OPTION_WORDS.get(k, k)} (an older "
            f"summary): the report assumed the default {k}={getattr(options, k)!r}"
            for k in missing
        )
    return options, notes


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping) or key not in obj:
            return None
        obj = obj[key]
    return obj


def num(value: Any) -> float | None:
    """A finite float, or ``None`` for anything else (null, NaN, text)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


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
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(
            f"summary.json is not valid JSON: {exc}", path=str(summary_path)
        ) from exc
    if not isinstance(summary, dict):
        raise InputError(
            f"summary.json must hold a JSON object, got {type(summary).__name__}",
            path=str(summary_path),
        )
    manifest = None
    manifest_path = root / "manifest.json"
    if manifest_path.is_file():
        try:
            loaded = json.loads(manifest_path.read_text(encoding="utf-8"))
            manifest = loaded if isinstance(loaded, dict) else None
        except (OSError, ValueError):
            manifest = None  # the manifest is informative only

    def table(kind: str) -> pl.DataFrame | None:
        return read_table(root / kind, kind) if tables else None

    answers, scores = table("answers"), table("scores")
    if answers is not None and scores is not None:
        # A run shrunk to a smaller sample keeps the other rows; the summary
        # (and so the report's recomputation) leaves them out.
        answers, scores, _ = in_run_sample(root, answers, scores)
    run = RunData(
        run_dir=root,
        summary=summary,
        answers=answers,
        scores=scores,
        questions=table("questions"),
        documents=table("documents"),
        manifest=manifest,
    )
    _infer_names(run)
    return run


def _infer_names(run: RunData) -> None:
    judges_block = run.summary.get("judges")
    judges = list(judges_block) if isinstance(judges_block, dict) else []
    systems: list[str] = []
    dims: list[str] = []
    across = run.summary.get("across_judges")
    if isinstance(across, dict):
        systems.extend(s for s in across if isinstance(s, str))
    for j in judges:
        block = run.judge_block(j)
        for s, w in (block.get("weights") or {}).items():
            if s not in systems:
                systems.append(s)
            if isinstance(w, dict):
                dims.extend(d for d in w if d not in dims)
        for s in block.get("cube") or {}:
            if s not in systems:
                systems.append(s)
    if run.scores is not None:
        for j in run.scores.get_column(schema.JUDGE).unique(maintain_order=True):
            if j not in judges:
                judges.append(j)
        # The scores keep the configured dimension order; JSON keys may be sorted.
        in_scores = (
            run.scores.get_column(schema.DIMENSION)
            .unique(maintain_order=True)
            .to_list()
        )
        dims = in_scores + [d for d in dims if d not in in_scores]
    if run.answers is not None:
        for s in run.answers.get_column(schema.SYSTEM).unique(maintain_order=True):
            if schema.is_rag_system(s) and s not in systems:
                systems.append(s)
    run.judges = sorted(judges)
    run.systems = sorted(s for s in systems if s != WEIGHTED)
    run.dimensions = dims
