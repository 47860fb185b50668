"""The comparison page of several runs (``cube-ray compare``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cube_ray import __version__
from cube_ray.aggregate import WEIGHTED, IntervalMethod
from cube_ray.errors import InputError
from cube_ray.files import write_atomic
from cube_ray.report import _plots
from cube_ray.report._compare_paired import paired_runs_section
from cube_ray.report._data import CUBE, RunData, load_run, num
from cube_ray.report._deps import require_report_deps
from cube_ray.report._format import NO_VERDICT, fmt, interval_text
from cube_ray.report._glossary import with_glossary
from cube_ray.report._render import (
    Figure,
    Para,
    Section,
    Table,
    render_html,
    render_markdown,
)
from cube_ray.report._report import resolve_intervals
from cube_ray.report._words import (
    SAME_JUDGES,
    SCALE_100,
    beyond_bounds,
    interval_method,
    mean_sd,
    no_interval_why,
    plural,
)

__all__ = ["write_comparison"]


@dataclass
class _Compared:
    """The headline figures of every run's systems, as the page shows them."""

    rows: list[list[str]] = field(default_factory=list)
    """The headline table's rows (one per run and system)."""
    labels: list[str] = field(default_factory=list)
    """``run:system``, in the page's order (the chart's bars)."""
    per_label: dict[str, dict[str, float | None]] = field(default_factory=dict)
    """Judge -> label -> that judge's CuBE (the chart's markers)."""
    means: dict[str, float | None] = field(default_factory=dict)
    intervals: dict[str, tuple[float | None, float | None]] = field(
        default_factory=dict
    )
    dims: list[str] = field(default_factory=list)
    """Every run's dimensions, first seen first."""
    methods: set[str] = field(default_factory=set)
    """The interval methods the runs' intervals used."""
    notes: list[Para] = field(default_factory=list)


def write_comparison(
    run_dirs: Sequence[str | Path],
    *,
    out: str | Path,
    n_resamples: int | None = None,
    seed: int | None = None,
    interval: IntervalMethod | None = None,
    console: Callable[[str], object] | None = None,
) -> Path:
    """Write one HTML page comparing several runs (and its ``.md`` twin).

    Args:
        run_dirs: Run directories, each with a ``summary.json``.
        out: The HTML file to write; the Markdown goes beside it (``.md``).
        n_resamples: Bootstrap resamples per run (0 disables intervals; None:
            each summary's own intervals).
        seed: Bootstrap seed (None: as recorded).
        interval: ``bca`` or ``percentile`` (None: as recorded).
        console: Called with each ``compared:`` line (the paired differences
            across runs, on their shared questions).

    Returns:
        The HTML path.
    """
    require_report_deps()
    if not run_dirs:
        raise InputError("compare needs at least one run directory")
    runs = [load_run(d) for d in run_dirs]
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        names = [str(r.run_dir) for r in runs]
    compared = _headline(
        runs, names, n_resamples=n_resamples, seed=seed, interval=interval
    )
    sec = _comparison_section(runs, names, compared)
    paired, lines = paired_runs_section(
        runs, names, n_resamples=n_resamples, seed=seed, interval=interval
    )
    if console is not None:
        for line in lines:
            console(line)
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    title = "CuBE comparison — " + ", ".join(names)
    meta = [
        plural(len(runs), "run"),
        "Generated " + dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    ]
    footer = f"cube-ray {__version__}"
    sections = with_glossary([sec] if paired is None else [sec, paired])
    write_atomic(
        out_path,
        render_html(title=title, meta=meta, sections=sections, footer=footer),
    )
    md_path = (
        out_path.with_suffix(".md")
        if out_path.suffix.lower() != ".md"
        else out_path.with_name(out_path.name + ".md")
    )
    write_atomic(
        md_path,
        render_markdown(title=title, meta=meta, sections=sections, footer=footer),
    )
    return out_path


def _headline(
    runs: Sequence[RunData],
    names: Sequence[str],
    *,
    n_resamples: int | None,
    seed: int | None,
    interval: IntervalMethod | None,
) -> _Compared:
    """Each run's systems' headline rows, chart values and notes.

    Each run's intervals are resolved first and kept on the run (the paired
    section reads them).
    """
    out = _Compared()
    for run, name in zip(runs, names, strict=True):
        out.dims.extend(d for d in run.dimensions if d not in out.dims)
        run.intervals = resolve_intervals(
            run, n_resamples=n_resamples, seed=seed, interval=interval
        )
        iv = run.intervals
        if iv is not None:
            out.methods.add(iv.method)
        for system in run.systems:
            label = f"{name}:{system}"
            out.labels.append(label)
            verdict = run.no_verdict(system)
            used = run.headline_judges(system)
            mean, sd = run.figure(system, CUBE)
            out.means[label] = None if verdict else mean
            cell = iv.systems.get(system) if iv is not None else None
            shown = cell.cube if cell is not None and not verdict else None
            out.intervals[label] = (
                (cell.cube.low, cell.cube.high)
                if cell is not None and not verdict
                else (None, None)
            )
            for j in run.judges:
                out.per_label.setdefault(j, {})[label] = (
                    num(run.judge(j).cube.get(system)) if j in used else None
                )
            wmean, wsd = run.figure(system, WEIGHTED)
            if not verdict and (shown is None or shown.low is None):
                out.notes.append(Para(f"{label}: {no_interval_why(iv, cell)}.", "note"))
            beyond = None if verdict else beyond_bounds(label, [mean])
            if beyond is not None:
                out.notes.append(Para(beyond, "note"))
            out.rows.append(
                [
                    name,
                    system,
                    NO_VERDICT if verdict else fmt(mean, 2),
                    fmt(sd, 2),
                    interval_text(shown, 2),
                    fmt(run.recall(system), 3),
                    mean_sd(wmean, wsd),
                    ", ".join(used) or "none",
                ]
            )
    return out


def _comparison_section(
    runs: Sequence[RunData], names: Sequence[str], compared: _Compared
) -> Section:
    """The headline table, the chart, the dimensions' table and the notes."""
    dims = compared.dims
    dim_rows = []
    for run, name in zip(runs, names, strict=True):
        for system in run.systems:
            dim_rows.append(
                [name, system] + [mean_sd(*run.figure(system, d)) for d in dims]
            )
    methods = compared.methods
    sec = Section("comparison", "Runs compared")
    sec.blocks.append(
        Table(
            [
                "run",
                "system",
                "CuBE mean",
                "CuBE SD",
                "95% CI",
                "recall@k",
                "weighted",
                "judges used",
            ],
            compared.rows,
            caption=f"Headline figures per run and system ({SCALE_100}; interval: "
            + (
                ", ".join(interval_method(m) for m in sorted(methods))
                + f", {SAME_JUDGES}"
                if methods
                else "none"
            )
            + ")",
            anchor="comparison-table",
            numeric=frozenset({2, 3, 4, 5, 6}),
        )
    )
    sec.blocks.append(
        Figure(
            "fig-compare",
            "CuBE per run and system",
            _plots.cube_chart(
                compared.per_label,
                compared.means,
                compared.intervals,
                systems=compared.labels,
                judges=sorted(compared.per_label),
            ),
            "Bar chart of CuBE per run and system with bootstrap intervals.",
            "Bar: the jury's mean CuBE; whisker: its 95% bootstrap interval; "
            "markers: each judge's CuBE (0 = zero bound, 100 = full bound).",
        )
    )
    sec.blocks.append(
        Table(
            ["run", "system", *dims],
            dim_rows,
            caption=f"Normalised dimensions (cross-judge mean ± SD; {SCALE_100}; "
            "no SD with one judge)",
            numeric=frozenset(range(2, 2 + len(dims))),
        )
    )
    sec.blocks.extend(compared.notes)
    sec.blocks.append(
        Para(
            "Runs are comparable only if they share the question set, the bounds "
            "generator and the jury; check each run's details.",
            "note",
        )
    )
    return sec
