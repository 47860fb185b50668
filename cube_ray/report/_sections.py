"""Sections of the figures: per judge, distributions, retrieval, bounds, variants.

Each builder is a function of the run's data returning one :class:`Section`
(or None when its data is missing) that the HTML and Markdown writers render.
The figures come from the summary; the few statistics shown beside them
(rank correlations, recall curve) from :mod:`cube_ray.aggregate`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from cube_ray import schema
from cube_ray.aggregate import WEIGHTED, Flag, rank_correlations, recall_curve
from cube_ray.report import _plots
from cube_ray.report._data import CUBE, RunData, num
from cube_ray.report._format import fmt
from cube_ray.report._render import Figure, Para, Section, Table
from cube_ray.report._words import (
    SCALE_10,
    SCALE_100,
    SCALE_SHARE,
    beyond_bounds,
    mean_sd,
)

__all__ = [
    "bounds_section",
    "distributions_section",
    "per_judge_section",
    "retrieval_section",
    "variants_section",
]

_FLAG_FIELDS = frozenset({"judge", "system", "flag"})


def _flag_rows(flags: list[Flag]) -> list[list[str]]:
    """Rows of the flags recorded by the aggregation."""
    rows = []
    for f in flags:
        rest = {
            k: v
            for k, v in f.model_dump(exclude_none=True).items()
            if k not in _FLAG_FIELDS
        }
        # "gap 0.27; p value 0.21", not "gap=0.27, p_value=0.21".
        detail = "; ".join(
            f"{k.replace('_', ' ')} {fmt(v, 2) if num(v) is not None else v}"
            for k, v in rest.items()
        )
        rows.append([f.judge or "", f.system or "", f.flag, detail])
    return rows


def per_judge_section(run: RunData) -> Section:
    """Bounds, weights, normalised figures and CuBE of every judge; flags."""
    sec = Section("judges", "Per-judge results")
    cols = [*run.dimensions, WEIGHTED]
    set_words = {schema.ZERO: "zero bound", schema.FULL: "full bound"}
    for system in run.systems:
        # One scale per table: raw 0-10 means, weights, then the 0-100 figures.
        raw: list[list[str]] = []
        weight_rows: list[list[str]] = []
        rows: list[list[str]] = []
        beyond: list[float | None] = []
        for judge in run.judges:
            figures = run.judge(judge)
            tms = figures.trimmed_means.get(system, {})
            for set_name in (schema.ZERO, schema.FULL, system):
                vals = tms.get(set_name, {})
                raw.append(
                    [judge, f"trimmed mean: {set_words.get(set_name, set_name)}"]
                    + [fmt(vals.get(c), 3) for c in cols]
                )
            weights = figures.weights.get(system, {})
            method = figures.weight_method.get(system)
            weight_rows.append(
                [judge, method or "n/a"]
                + [fmt(weights.get(c), 3) for c in run.dimensions]
            )
            norm = figures.normalized.get(system, {})
            beyond += [num(norm.get(c)) for c in cols] + [figures.cube.get(system)]
            rows.append(
                [judge, "normalised"]
                + [fmt(norm.get(c), 1) for c in cols]
                + [
                    fmt(figures.recall_at_k.get(system), 3),
                    fmt(figures.cube.get(system), 2),
                ]
            )
        k = run.k_of(system)
        sec.blocks.append(
            Table(
                ["judge", "answers", *cols],
                raw,
                caption=f"{system}: trimmed means of the zero bound, the full bound "
                f"and the system per judge ({SCALE_10})",
                anchor=f"judges-raw-{system}",
                numeric=frozenset(range(2, 2 + len(cols))),
            )
        )
        sec.blocks.append(
            Table(
                ["judge", "how the weights were set", *run.dimensions],
                weight_rows,
                caption=f"{system}: weights of the dimensions per judge "
                f"({SCALE_SHARE})",
                anchor=f"judges-weights-{system}",
                numeric=frozenset(range(2, 2 + len(run.dimensions))),
            )
        )
        sec.blocks.append(
            Table(
                ["judge", "figure", *cols, f"recall@{k}", "CuBE"],
                rows,
                caption=f"{system}: normalised scores and CuBE per judge "
                f"({SCALE_100}; recall@{k} a share of questions)",
                anchor=f"judges-{system}",
                numeric=frozenset(range(2, 4 + len(cols))),
            )
        )
        note = beyond_bounds(system, beyond)
        if note is not None:
            sec.blocks.append(Para(note, "note"))
    kinds = {judge: run.judge_kind(judge) for judge in run.judges}
    if any(kind != "LLM" for kind in kinds.values()):
        sec.blocks.append(
            Table(
                ["judge", "kind"],
                [[judge, kind] for judge, kind in kinds.items()],
                caption="Jurors. A reference judge scores an answer by its n-gram "
                "support in the gold document (support: share of the answer's "
                "content found in the document; coverage: share of the document's "
                "question-relevant content found in the answer), not by reading it",
            )
        )
    flags = _flag_rows(run.summary.flags)
    if flags:
        sec.blocks.append(
            Table(["judge", "system", "flag", "detail"], flags, caption="Flags")
        )
    else:
        sec.blocks.append(
            Para(
                "Flags: none (no degenerate or out-of-bounds value, no "
                "equal-weight fallback).",
                "note",
            )
        )
    missing = [
        [judge, system, dim, status, str(n)]
        for judge in run.judges
        for system, by_dim in sorted(run.judge(judge).missing.items())
        for dim, by_status in by_dim.items()
        for status, n in sorted(by_status.items())
    ]
    if missing:
        sec.blocks.append(
            Table(
                ["judge", "set", "dimension", "status", "missing scores"],
                missing,
                caption="Missing scores by status (excluded from every statistic; "
                "from summary.json)",
                numeric=frozenset({4}),
            )
        )
    else:
        sec.blocks.append(Para("Missing scores: none.", "note"))
    return sec


def _sets(run: RunData) -> list[str]:
    return [schema.ZERO, schema.FULL, *run.systems]


def distributions_section(run: RunData) -> Section | None:
    """Histograms of the raw scores per judge, dimension and set."""
    if run.scores is None:
        return None
    ok = run.scores.filter(pl.col(schema.SCORE).is_not_null())
    data: dict[str, dict[str, dict[str, Any]]] = {}
    for (judge, dim, system), part in ok.group_by(
        schema.JUDGE, schema.DIMENSION, schema.SYSTEM
    ):
        data.setdefault(str(judge), {}).setdefault(str(dim), {})[str(system)] = (
            part.get_column(schema.SCORE).to_numpy()
        )
    sec = Section("distributions", "Score distributions")
    sec.blocks.append(
        Figure(
            "fig-histograms",
            "Score histograms per judge × dimension × set",
            _plots.histograms(
                data, judges=run.judges, dimensions=run.dimensions, sets=_sets(run)
            ),
            "Histograms of judge scores, one panel per judge and dimension, one "
            "line per answer set.",
            "Each line is the share of answers of one set with each score; a judge "
            "whose lines sit further right is more lenient.",
        )
    )
    return sec


def _ranks(answers: pl.DataFrame, system: str) -> np.ndarray[Any, np.dtype[np.float64]]:
    col = answers.filter(pl.col(schema.SYSTEM) == system).get_column(schema.RANK)
    return col.fill_null(0).cast(pl.Float64).to_numpy()


def _correlation_matrices(
    run: RunData,
) -> dict[str, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    assert run.answers is not None
    assert run.scores is not None
    corr = rank_correlations(
        run.answers,
        run.scores,
        k={s: run.k_of(s) for s in run.systems},
        systems=run.systems,
    )
    jpos = {j: i for i, j in enumerate(run.judges)}
    dpos = {d: i for i, d in enumerate(run.dimensions)}
    out = {}
    for system in run.systems:
        shape = (len(run.judges), len(run.dimensions))
        every, hits = np.full(shape, np.nan), np.full(shape, np.nan)
        for row in corr.filter(pl.col(schema.SYSTEM) == system).iter_rows():
            _, judge, dim, r_all, r_hit = row
            if judge in jpos and dim in dpos:
                at = (jpos[judge], dpos[dim])
                every[at] = np.nan if r_all is None else r_all
                hits[at] = np.nan if r_hit is None else r_hit
        out[system] = (every, hits)
    return out


def retrieval_section(run: RunData) -> Section | None:
    """Rank distribution, recall@k for every k, rank-score correlations."""
    if run.answers is None:
        return None
    sec = Section("retrieval", "Retrieval")
    ranks = {s: _ranks(run.answers, s) for s in run.systems}
    ks = {s: run.k_of(s) for s in run.systems}
    sec.blocks.append(
        Figure(
            "fig-rank",
            "Rank of the gold document and recall@k",
            _plots.rank_charts(ranks, k=ks),
            "Bar chart of the rank distribution and line chart of recall@k.",
        )
    )
    kmax = max(ks.values() or [8])
    curve = recall_curve(run.answers, systems=run.systems, k_max=kmax)
    rows = []
    for system in run.systems:
        part = curve.filter(pl.col(schema.SYSTEM) == system).sort("k")
        n = part["questions"][0] if part.height else 0
        rows.append([system, str(n)] + [fmt(v, 3) for v in part["recall"]])
    sec.blocks.append(
        Table(
            ["system", "questions", *[f"recall@{k}" for k in range(1, kmax + 1)]],
            rows,
            caption="Recall@k for k = 1 … K",
            numeric=frozenset(range(1, kmax + 2)),
        )
    )
    if run.scores is not None:
        sec.blocks.append(
            Figure(
                "fig-correlation",
                "Rank-vs-dimension correlation",
                _plots.correlation_heatmaps(
                    _correlation_matrices(run),
                    judges=run.judges,
                    dimensions=run.dimensions,
                ),
                "Heatmaps of the Pearson correlation between rank_score and each "
                "judge's dimension scores.",
                "Left: all questions (misses count as rank_score 0; these give the "
                "Pearson weights). Right: retrieved questions only.",
            )
        )
    return sec


def bounds_section(run: RunData) -> Section:
    """Each system between its zero and full bound, per judge."""
    rows = [*run.dimensions, WEIGHTED]
    normalized = {
        j: {
            s: {r: num(run.judge(j).normalized.get(s, {}).get(r)) for r in rows}
            for s in run.systems
        }
        for j in run.judges
    }
    bounds: dict[str, dict[str, tuple[float | None, float | None]]] = {}
    first = run.systems[0] if run.systems else ""
    for j in run.judges:
        tms = run.judge(j).trimmed_means.get(first, {})
        zero = tms.get(schema.ZERO, {})
        full = tms.get(schema.FULL, {})
        bounds[j] = {r: (num(zero.get(r)), num(full.get(r))) for r in run.dimensions}
    sec = Section("bounds", "Bounds")
    sec.blocks.append(
        Figure(
            "fig-bounds",
            "Each system between its zero and full bound",
            _plots.bounds_chart(
                normalized,
                bounds,
                judges=run.judges,
                rows=rows,
                systems=run.systems,
            ),
            "Dot chart of each system's normalised score per dimension between the "
            "zero bound (0) and the full bound (100), one panel per judge.",
            "Labels give the raw trimmed means of the bounds (0-10 scale).",
        )
    )
    return sec


def variants_section(run: RunData) -> Section | None:
    """The system variants side by side (cross-judge mean ± SD)."""
    if len(run.systems) < 2:
        return None
    rows = [*run.dimensions, WEIGHTED, CUBE]
    means = {s: {r: run.figure(s, r) for r in rows} for s in run.systems}
    sec = Section("variants", "System variants")
    sec.blocks.append(
        Figure(
            "fig-variants",
            "Variants compared (cross-judge mean ± SD)",
            _plots.variant_chart(means, systems=run.systems, rows=rows),
            "Grouped bar chart of normalised dimensions, weighted score and CuBE "
            "per system.",
        )
    )
    sec.blocks.append(
        Table(
            ["system", *rows],
            [
                [s] + [mean_sd(m, sd) for m, sd in (means[s][r] for r in rows)]
                for s in run.systems
            ],
            caption=f"Cross-judge mean ± SD of every normalised figure ({SCALE_100}; "
            "no SD with one judge)",
            numeric=frozenset(range(1, len(rows) + 1)),
        )
    )
    for s in run.systems:
        note = beyond_bounds(s, [means[s][CUBE][0]])
        if note is not None:
            sec.blocks.append(Para(note, "note"))
    return sec
