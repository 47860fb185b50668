"""Build the report of one run (and the comparison of several runs).

Size: about 1,500 lines, kept as one module on purpose. It is a flat list of
small section builders (``_headline``, ``_per_judge``, ``_bounds``, ...), each
a function of the run's data returning one :class:`Section` that both the
HTML and the Markdown writers render; no class, no shared state. Splitting
the list across modules would only scatter the report's order, which
``build_sections`` reads top to bottom.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from cube_ray import __version__, schema
from cube_ray.aggregate import RANK_SCORE, rank_scores
from cube_ray.credentials import mask
from cube_ray.errors import InputError
from cube_ray.report import _plots
from cube_ray.report._cube import (
    DEFAULT_INTERVAL,
    WEIGHTED,
    BootstrapResult,
    CubeReplicates,
    IntervalMethod,
    bootstrap_cube,
    evaluate_replicates,
    masked_pearson,
)
from cube_ray.report._data import RunData, load_run, num
from cube_ray.report._deps import require_report_deps
from cube_ray.report._human import compare_with_humans, read_human_ratings
from cube_ray.report._render import (
    Figure,
    HeadlineCard,
    LongText,
    Para,
    Section,
    Table,
    render_html,
    render_markdown,
)
from cube_ray.report._stats import judge_agreement, pair_stats
from cube_ray.report._text import bleu, rouge_l

__all__ = [
    "NO_VERDICT",
    "ReportPaths",
    "build_sections",
    "check_recomputation",
    "write_comparison",
    "write_report",
]


WORST_N = 10
"""Rows of each worst-case table."""


@dataclass(frozen=True)
class ReportPaths:
    """Files written by :func:`write_report`, and the headline for the console."""

    html: Path
    markdown: Path
    headline: tuple[str, ...] = ()
    """:func:`console_lines` with the report's own bootstrap intervals."""


def fmt(value: Any, digits: int = 1) -> str:
    """A number for a table cell; ``n/a`` for null/NaN.

    >>> fmt(44.97416), fmt(None), fmt(0.75, 3)
    ('45.0', 'n/a', '0.750')
    """
    v = num(value)
    return "n/a" if v is None else f"{v:.{digits}f}"


def _interval(ci: tuple[float | None, float | None] | None, digits: int = 1) -> str:
    if ci is None or ci[0] is None or ci[1] is None:
        return "n/a"
    return f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


# --------------------------------------------------------------------------
# figures of the summary
# --------------------------------------------------------------------------


def _across(run: RunData, system: str, key: str) -> tuple[float | None, float | None]:
    entry = (run.summary.get("across_judges") or {}).get(system) or {}
    cell = entry.get(key) or {}
    if not isinstance(cell, Mapping):
        return (num(cell), None)
    return (num(cell.get("mean")), num(cell.get("sd")))


def _judge_value(run: RunData, judge: str, *keys: str) -> Any:
    obj: Any = run.judge_block(judge)
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _recall(run: RunData, system: str) -> float | None:
    for judge in run.judges:
        value = num(_judge_value(run, judge, "recall_at_k", system))
        if value is not None:
            return value
    if run.answers is not None:
        ranks = _ranks(run.answers, system)
        if ranks.size:
            return float((ranks >= 1).mean())
    return None


def _ranks(answers: pl.DataFrame, system: str) -> np.ndarray[Any, np.dtype[np.float64]]:
    col = answers.filter(pl.col(schema.SYSTEM) == system).get_column(schema.RANK)
    return col.fill_null(0).cast(pl.Float64).to_numpy()


# --------------------------------------------------------------------------
# sections
# --------------------------------------------------------------------------


NO_VERDICT = "no verdict"
"""What the headline shows instead of a number when no judge separates the bounds."""


def _plain_list(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``.

    >>> _plain_list(["a"]), _plain_list(["a", "b", "c"])
    ('a', 'a, b and c')
    """
    names = list(names)
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _left_out(run: RunData, system: str) -> list[tuple[str, str]]:
    """``(judge, why)`` for every judge not in the headline of ``system``."""
    used = set(run.headline_judges(system))
    recorded = run.excluded(system)
    out = []
    for judge in run.judges:
        if judge in used:
            continue
        why = recorded.get(judge)
        sep = run.separation(judge, system)
        gap, p = num(sep.get("gap")), num(sep.get("p_value"))
        if why is not None:
            # The aggregation's own words; add the test's p-value if they lack it.
            if p is not None and "p =" not in why:
                why += f" (one-sided Wilcoxon p = {fmt(p, 3)})"
        elif gap is not None or p is not None:
            why = (
                f"its answers with the gold document scored {fmt(gap, 2)} points "
                f"above its answers without context (p = {fmt(p, 3)})"
            )
        elif num(_judge_value(run, judge, "cube", system)) is None:
            why = "its CuBE is undefined (degenerate bounds or missing scores)"
        else:
            why = "not among the judges the summary used"
        out.append((judge, why))
    return out


def _jury_sentence(run: RunData, system: str) -> str:
    """The headline's account of the jury, in words for a decision maker."""
    used = run.headline_judges(system)
    left = _left_out(run, system)
    verdict = run.no_verdict(system)
    if verdict is not None:
        text = (
            f"{system}: {NO_VERDICT} — {verdict}. None of the judges scored answers "
            "written from the gold document clearly above answers written without "
            "any context, so the scale from 0 (no context) to 100 (gold document) "
            "has no meaning for this jury and no CuBE is shown."
        )
    else:
        text = (
            f"{system}: the headline averages {len(used)} judge(s): "
            f"{_plain_list(used)}."
        )
        if "judges" not in run.across(system):
            text += (
                " (This summary predates the check that each judge separates the "
                "bounds; every judge with a defined CuBE is used. Re-run "
                "cube-ray aggregate to apply it.)"
            )
        if left:
            text += (
                " Left out because a judge that cannot tell a grounded answer from "
                "no answer cannot place the system between the two:"
            )
    for judge, why in left:
        text += f" {judge}: {why}."
    return text


def console_lines(
    run: RunData, boot: Mapping[str, BootstrapResult] | None = None
) -> list[str]:
    r"""The headline in a few lines for the console, at the end of ``cube-ray run``.

    Per system: the CuBE across the judges used with its bootstrap interval
    (``boot``, the report's: :func:`write_report` returns these lines) and SD,
    and recall@k; or the verdict that there is none. Then each judge left
    out, with the short reason, and the flags counted by kind. Without
    ``boot`` (no report written) the line says the interval was not computed.

    >>> sep = {"weighted": {"gap": -0.14, "p_value": 0.999}}
    >>> summary = {
    ...     "judges": {
    ...         "llm": {"cube": {"rag": None}, "recall_at_k": {"rag": 1.0},
    ...                 "bound_separation": {"rag": sep}},
    ...         "ref": {"cube": {"rag": 63.21}, "recall_at_k": {"rag": 1.0}},
    ...     },
    ...     "parameters": {"k": {"rag": 3}},
    ...     "across_judges": {"rag": {
    ...         "judges": ["ref"], "cube": {"mean": 63.21, "sd": None},
    ...         "excluded": {"llm": "bounds not separated: answers written ..."},
    ...     }},
    ...     "flags": [{"flag": "bounds not separated"}] * 3,
    ... }
    >>> from cube_ray.report._data import _infer_names
    >>> run = RunData(run_dir=Path("runs/demo"), summary=summary)
    >>> _infer_names(run)
    >>> print("\n".join(console_lines(run)))  # doctest: +NORMALIZE_WHITESPACE
    rag: CuBE 63.21, interval not computed (no report)
      (1 of 2 judges: ref; SD n/a), recall@3 1.000
      left out: llm: bounds not separated (gap -0.14 points, p = 0.999)
    flags: bounds not separated ×3 (summary.json; the report explains each)
    >>> from cube_ray.report._cube import BootstrapResult
    >>> b = BootstrapResult("rag", 1000, 0.95, "bca", ("ref",), (55.1, 70.4),
    ...                     (55.1, 70.4), (1.0, 1.0), {}, 1000)
    >>> print(console_lines(run, {"rag": b})[0])  # doctest: +NORMALIZE_WHITESPACE
    rag: CuBE 63.21, 95% CI [55.10, 70.40]
      (1 of 2 judges: ref; SD n/a), recall@3 1.000
    >>> summary["across_judges"]["rag"] = {"judges": [], "reason": "no judge "
    ...     "separates the bounds", "cube": {"mean": None, "sd": None}}
    >>> summary["judges"]["ref"]["cube"]["rag"] = None
    >>> print(console_lines(run)[0])
    rag: no verdict — no judge separates the bounds; no CuBE, recall@3 1.000
    """
    lines = []
    for system in run.systems:
        recall = f"recall@{run.k_of(system)} {fmt(_recall(run, system), 3)}"
        verdict = run.no_verdict(system)
        if verdict is not None:
            lines.append(f"{system}: {NO_VERDICT} — {verdict}; no CuBE, {recall}")
        else:
            mean, sd = _across(run, system, "cube")
            used = run.headline_judges(system)
            jury = f"{len(used)} of {len(run.judges)} judges: {', '.join(used)}"
            b = (boot or {}).get(system)
            ci = (
                f"{b.confidence:.0%} CI {_interval(b.cube, 2)}"
                if b
                else "interval not computed (no report)"
            )
            lines.append(
                f"{system}: CuBE {fmt(mean, 2)}, {ci} ({jury}; SD {fmt(sd, 2)}), "
                f"{recall}"
            )
        for judge, why in _left_out(run, system):
            short = why.split(":", 1)[0]
            sep = run.separation(judge, system)
            gap, p = num(sep.get("gap")), num(sep.get("p_value"))
            if gap is not None and p is not None and "bounds not separated" in short:
                short += f" (gap {fmt(gap, 2)} points, p = {fmt(p, 3)})"
            lines.append(f"  left out: {judge}: {short}")
    flags = run.summary.get("flags")
    if isinstance(flags, list) and flags:
        kinds: dict[str, int] = {}
        for flag in flags:
            name = flag.get("flag") if isinstance(flag, Mapping) else None
            kinds[str(name)] = kinds.get(str(name), 0) + 1
        counted = ", ".join(f"{k} ×{n}" for k, n in kinds.items())
        lines.append(f"flags: {counted} (summary.json; the report explains each)")
    return lines


def _headline(
    run: RunData,
    boot: Mapping[str, BootstrapResult],
    notes: list[Para],
) -> Section:
    sec = Section("headline", "Headline")
    rows = []
    detail_rows = []
    for system in run.systems:
        verdict = run.no_verdict(system)
        mean, sd = _across(run, system, "cube")
        wmean, wsd = _across(run, system, "weighted")
        recall = _recall(run, system)
        b = boot.get(system) if verdict is None else None
        ci = b.cube if b else None
        k = run.k_of(system)
        used = run.headline_judges(system)
        if verdict is not None:
            card = HeadlineCard(
                system=system,
                cube=NO_VERDICT,
                spread=verdict,
                interval="no interval: there is no figure to bound",
                details=[
                    (f"recall@{k}", fmt(recall, 3)),
                    ("judges used", "none"),
                ],
            )
            row = [system, NO_VERDICT, "n/a", "n/a", fmt(recall, 3), "n/a", "n/a"]
        else:
            card = HeadlineCard(
                system=system,
                cube=fmt(mean),
                spread=f"± {fmt(sd)} SD across {len(used)} judges",
                interval=f"95% bootstrap CI {_interval(ci)}",
                details=[
                    (f"recall@{k}", fmt(recall, 3)),
                    ("weighted bounded score", f"{fmt(wmean)} ± {fmt(wsd)}"),
                    ("judges used", ", ".join(used) or "none"),
                ],
            )
            row = [
                system,
                fmt(mean, 2),
                fmt(sd, 2),
                _interval(ci, 2),
                fmt(recall, 3),
                fmt(wmean, 2),
                fmt(wsd, 2),
            ]
        sec.blocks.append(card)
        rows.append(row)
        detail_rows.append(
            [
                system,
                ", ".join(used) or "none",
                "; ".join(f"{j}: {why}" for j, why in _left_out(run, system)) or "none",
                b.method if b else "n/a",
                f"{b.n_defined} of {b.n_resamples}" if b else "n/a",
            ]
        )
    sec.blocks.append(
        Para(
            "CuBE = normalised weighted score × recall@k, where the normalised score "
            "places the system between answers written without context (zero = 0) "
            "and answers written from the gold document alone (full = 100). "
            "Mean ± SD across the judges used; the interval resamples questions "
            "with the judges held fixed: it says how much the figure would move "
            "with another draw of questions like these, not with another jury.",
            "note",
        )
    )
    for system in run.systems:
        sec.blocks.append(
            Para(
                _jury_sentence(run, system),
                "warn" if run.no_verdict(system) or _left_out(run, system) else "note",
            )
        )
    sec.blocks.extend(notes)
    recorded = run.summary.get("notes")
    if isinstance(recorded, list):
        sec.blocks.extend(
            Para(
                "Aggregation note: "
                + (n if isinstance(n, str) else json.dumps(n, ensure_ascii=False)),
                "note",
            )
            for n in recorded
        )
    sec.blocks.append(
        Table(
            [
                "system",
                "CuBE mean",
                "CuBE SD",
                "95% CI",
                "recall@k",
                "weighted mean",
                "weighted SD",
            ],
            rows,
            caption="Headline figures (from summary.json; CI by bootstrap)",
            anchor="headline-table",
            numeric=frozenset(range(1, 7)),
        )
    )
    sec.blocks.append(
        Table(
            [
                "system",
                "judges used (held fixed)",
                "judges left out",
                "interval",
                "defined replicates",
            ],
            detail_rows,
            caption="Who the headline averages and how its interval was computed "
            "(a replicate is defined when every judge used has a CuBE in it)",
            anchor="headline-jury",
        )
    )
    # Only the judges of each headline get a marker: the others are in the
    # per-judge tables, not in the figure a reader takes as the result.
    per_judge = {
        j: {
            s: num(_judge_value(run, j, "cube", s))
            if j in run.headline_judges(s)
            else None
            for s in run.systems
        }
        for j in run.judges
    }
    sec.blocks.append(
        Figure(
            "fig-cube",
            "CuBE per system and judge",
            _plots.cube_chart(
                per_judge,
                {
                    s: None if run.no_verdict(s) else _across(run, s, "cube")[0]
                    for s in run.systems
                },
                {
                    s: (
                        boot[s].cube
                        if s in boot and not run.no_verdict(s)
                        else (None, None)
                    )
                    for s in run.systems
                },
                systems=run.systems,
                judges=run.judges,
            ),
            "Bar chart of the cross-judge mean CuBE per system with bootstrap "
            "intervals and one marker per judge.",
        )
    )
    return sec


def _flag_rows(flags: Sequence[Any]) -> list[list[str]]:
    """Rows of the flags recorded by the aggregation (dicts or strings)."""
    rows = []
    for f in flags:
        if isinstance(f, Mapping):
            rest = {k: v for k, v in f.items() if k not in ("judge", "system", "flag")}
            detail = ", ".join(
                f"{k}={fmt(v, 2) if num(v) is not None else v}" for k, v in rest.items()
            )
            rows.append(
                [
                    str(f.get("judge", "")),
                    str(f.get("system", "")),
                    str(f.get("flag", "")),
                    detail,
                ]
            )
        else:
            rows.append(["", "", str(f), ""])
    return rows


def _flags(run: RunData, rep: CubeReplicates | None) -> list[list[str]]:
    """Flags of the summary; derived from the figures when it records none."""
    recorded = run.summary.get("flags")
    if isinstance(recorded, list):
        return _flag_rows(recorded)
    rows: list[list[str]] = []
    for judge in run.judges:
        for system in run.systems:
            norm = _judge_value(run, judge, "normalized", system) or {}
            if not isinstance(norm, Mapping):
                continue
            for dim, value in norm.items():
                v = num(value)
                if v is None:
                    rows.append(
                        [
                            judge,
                            system,
                            "degenerate bounds",
                            f"{dim}: full − zero ≤ 1e-9",
                        ]
                    )
                elif v < 0 or v > 100:
                    rows.append(
                        [
                            judge,
                            system,
                            "outside bounds",
                            f"{dim} = {v:.1f} (kept, not clipped)",
                        ]
                    )
            if rep is not None and judge in rep.judges and system in rep.systems:
                ji, si = rep.judges.index(judge), rep.systems.index(system)
                if bool(rep.equal_fallback[ji, si, 0]):
                    rows.append(
                        [
                            judge,
                            system,
                            "equal-weight fallback",
                            "no dimension correlates positively with rank_score",
                        ]
                    )
    return rows


def _per_judge(run: RunData, rep: CubeReplicates | None) -> Section:
    sec = Section("judges", "Per-judge results")
    cols = [*run.dimensions, WEIGHTED]
    for system in run.systems:
        rows: list[list[str]] = []
        for judge in run.judges:
            tms = _judge_value(run, judge, "trimmed_means", system) or {}
            for set_name in (schema.ZERO, schema.FULL, system):
                vals = tms.get(set_name) or {} if isinstance(tms, Mapping) else {}
                rows.append(
                    [judge, f"trimmed mean: {set_name}"]
                    + [fmt(vals.get(c), 3) for c in cols]
                    + ["", ""]
                )
            weights = _judge_value(run, judge, "weights", system) or {}
            method = _judge_value(run, judge, "weight_method", system)
            rows.append(
                [judge, f"weight ({method})" if isinstance(method, str) else "weight"]
                + [fmt(weights.get(c), 3) for c in run.dimensions]
                + ["", "", ""]
            )
            norm = _judge_value(run, judge, "normalized", system) or {}
            rows.append(
                [judge, "normalised"]
                + [fmt(norm.get(c), 1) for c in cols]
                + [
                    fmt(_judge_value(run, judge, "recall_at_k", system), 3),
                    fmt(_judge_value(run, judge, "cube", system), 2),
                ]
            )
        k = run.k_of(system)
        sec.blocks.append(
            Table(
                ["judge", "figure", *cols, f"recall@{k}", "CuBE"],
                rows,
                caption=f"{system}: bounds (0-10), weights, normalised scores (zero = "
                "0, full = 100) and CuBE per judge",
                anchor=f"judges-{system}",
                numeric=frozenset(range(2, 4 + len(cols))),
            )
        )
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
    flags = _flags(run, rep)
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
    if run.scores is not None:
        missing = (
            run.scores.filter(pl.col(schema.SCORE).is_null())
            .group_by(schema.JUDGE, schema.SYSTEM, schema.STATUS)
            .len()
            .sort(schema.JUDGE, schema.SYSTEM, schema.STATUS)
        )
        totals = run.scores.group_by(schema.JUDGE).len()
        total_of = dict(zip(totals[schema.JUDGE], totals["len"], strict=True))
        if missing.height:
            sec.blocks.append(
                Table(
                    ["judge", "set", "status", "missing scores", "of judge's rows"],
                    [
                        [
                            r[schema.JUDGE],
                            r[schema.SYSTEM],
                            r[schema.STATUS],
                            str(r["len"]),
                            str(total_of.get(r[schema.JUDGE], "")),
                        ]
                        for r in missing.iter_rows(named=True)
                    ],
                    caption="Missing scores by status (excluded from every statistic)",
                    numeric=frozenset({3, 4}),
                )
            )
        else:
            sec.blocks.append(Para("Missing scores: none.", "note"))
    else:
        recorded = [
            [judge, system, str(dim), str(status), str(n)]
            for judge in run.judges
            for system, by_dim in (_judge_value(run, judge, "missing") or {}).items()
            if isinstance(by_dim, Mapping)
            for dim, by_status in by_dim.items()
            if isinstance(by_status, Mapping)
            for status, n in by_status.items()
        ]
        if recorded:
            sec.blocks.append(
                Table(
                    ["judge", "system", "dimension", "status", "missing scores"],
                    recorded,
                    caption="Missing scores of the system answers (from summary.json)",
                    numeric=frozenset({4}),
                )
            )
    return sec


def _sets(run: RunData) -> list[str]:
    return [schema.ZERO, schema.FULL, *run.systems]


def _distributions(run: RunData) -> Section | None:
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


def _correlations(
    run: RunData,
) -> dict[str, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    assert run.answers is not None
    assert run.scores is not None
    out = {}
    for system in run.systems:
        ans = run.answers.filter(pl.col(schema.SYSTEM) == system).with_columns(
            pl.col(schema.RANK).fill_null(0)
        )
        frame = rank_scores(ans, k=run.k_of(system)).select(
            schema.QUESTION_ID,
            pl.col(RANK_SCORE).cast(pl.Float64).alias("rs"),
            pl.col(schema.RANK).cast(pl.Float64).alias("rank"),
        )
        all_m = np.full((len(run.judges), len(run.dimensions)), np.nan)
        ret_m = np.full_like(all_m, np.nan)
        sys_scores = run.scores.filter(pl.col(schema.SYSTEM) == system)
        for ji, judge in enumerate(run.judges):
            for di, dim in enumerate(run.dimensions):
                part = sys_scores.filter(
                    (pl.col(schema.JUDGE) == judge) & (pl.col(schema.DIMENSION) == dim)
                ).select(schema.QUESTION_ID, schema.SCORE)
                joined = frame.join(part, on=schema.QUESTION_ID, how="left")
                x = joined.get_column("rs").to_numpy().astype(np.float64)
                y = (
                    joined.get_column(schema.SCORE)
                    .cast(pl.Float64)
                    .fill_null(np.nan)
                    .to_numpy()
                )
                retrieved = joined.get_column("rank").to_numpy() >= 1
                all_m[ji, di] = masked_pearson(x[None, :], y[None, :])[0]
                ret_m[ji, di] = masked_pearson(x[None, retrieved], y[None, retrieved])[
                    0
                ]
        out[system] = (all_m, ret_m)
    return out


def _retrieval(run: RunData) -> Section | None:
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
    sec.blocks.append(
        Table(
            ["system", "questions", *[f"recall@{k}" for k in range(1, kmax + 1)]],
            [
                [s, str(r.size)]
                + [
                    fmt(((r >= 1) & (r <= k)).sum() / max(1, r.size), 3)
                    for k in range(1, kmax + 1)
                ]
                for s, r in ranks.items()
            ],
            caption="Recall@k for k = 1 … K",
            numeric=frozenset(range(1, kmax + 2)),
        )
    )
    if run.scores is not None:
        mats = _correlations(run)
        sec.blocks.append(
            Figure(
                "fig-correlation",
                "Rank-vs-dimension correlation",
                _plots.correlation_heatmaps(
                    mats, judges=run.judges, dimensions=run.dimensions
                ),
                "Heatmaps of the Pearson correlation between rank_score and each "
                "judge's dimension scores.",
                "Left: all questions (misses count as rank_score 0; these give the "
                "Pearson weights). Right: retrieved questions only.",
            )
        )
    return sec


def _bounds(run: RunData) -> Section:
    rows = [*run.dimensions, WEIGHTED]
    normalized = {
        j: {
            s: {
                r: num((_judge_value(run, j, "normalized", s) or {}).get(r))
                for r in rows
            }
            for s in run.systems
        }
        for j in run.judges
    }
    bounds: dict[str, dict[str, tuple[float | None, float | None]]] = {}
    first = run.systems[0] if run.systems else ""
    for j in run.judges:
        tms = _judge_value(run, j, "trimmed_means", first) or {}
        zero = tms.get(schema.ZERO) or {}
        full = tms.get(schema.FULL) or {}
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


_FAULT_WORDS = {
    "number": "a changed number (time limit, fee, date, phone)",
    "entity": "a swapped name (agency, item, material, place)",
    "negation": "a flipped permission or obligation",
    "omission": "a dropped part of the answer",
    "unsupported": "an added claim the guide does not make",
}
"""What each fault kind of CUBE_METHOD.md section 12 is, for a reader."""


def _qualification(run: RunData) -> Section | None:
    """Per judge, kinds x figures: did it notice the controlled faults (section 12)?"""
    blocks = {
        j: b
        for j in run.judges
        if isinstance(b := _judge_value(run, j, "qualification"), Mapping) and b
    }
    if not blocks:
        return None
    sec = Section("qualification", "Judge qualification (controlled faults)")
    sec.blocks.append(
        Para(
            "Each judge scored copies of full-bound answers with exactly one fault "
            "each. A fault is detected when the judge scores the faulted copy at "
            "least min_drop points lower on average and a one-sided Wilcoxon test "
            "gives p < alpha; each cell shows the mean drop, p and whether it was "
            "detected (CUBE_METHOD.md section 12; the qualification/ table holds "
            "every faulted answer the judges were shown)."
        )
    )
    flags = [f for f in run.summary.get("flags") or [] if isinstance(f, Mapping)]
    for judge, block in blocks.items():
        kinds = list(block)
        figures = list(next(iter(block.values())))
        rows = []
        for kind in kinds:
            cells = []
            for fig in figures:
                t = block[kind].get(fig) or {}
                drop, p = num(t.get("drop")), num(t.get("p_value"))
                if drop is None or p is None:
                    cells.append("—")
                    continue
                verdict = "detected" if t.get("detected") else "missed"
                cells.append(f"{drop:+.2f} (p {p:.2g}) {verdict}")
            n = max((int(t.get("n") or 0) for t in block[kind].values()), default=0)
            skipped = max(
                (int(t.get("skipped") or 0) for t in block[kind].values()), default=0
            )
            rows.append([kind, str(n), str(skipped), *cells])
        sec.blocks.append(
            Table(
                ["fault", "n", "skipped", *figures],
                rows,
                caption=f"{judge}: mean drop score(original) − score(faulted)",
                anchor=f"qualification-{judge}",
                numeric=frozenset({1, 2}),
            )
        )
        missed = sorted(
            {
                str(f.get("figure", "")).split(".")[1]
                for f in flags
                if f.get("judge") == judge
                and str(f.get("flag", "")).startswith("misses faults")
                and str(f.get("figure", "")).count(".") == 2
            }
        )
        words = [_FAULT_WORDS.get(k, k) for k in missed]
        sec.blocks.append(
            Para(
                f"{judge} does not notice {_plain_list(words)}."
                if words
                else f"{judge} notices every fault its dimensions are expected to.",
                "warn" if words else "text",
            )
        )
    return sec


def _variants(run: RunData) -> Section | None:
    if len(run.systems) < 2:
        return None
    rows = [*run.dimensions, WEIGHTED, "cube"]
    means = {s: {r: _across(run, s, r) for r in rows} for s in run.systems}
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
                [s] + [f"{fmt(m)} ± {fmt(sd)}" for m, sd in (means[s][r] for r in rows)]
                for s in run.systems
            ],
            caption="Cross-judge mean ± SD of every normalised figure",
            numeric=frozenset(range(1, len(rows) + 1)),
        )
    )
    return sec


def _agreement(run: RunData) -> Section | None:
    if run.scores is None or len(run.judges) < 2:
        return None
    pairs, alpha = judge_agreement(
        run.scores, judges=run.judges, dimensions=run.dimensions
    )
    sec = Section("agreement", "Judge agreement")
    wide_rows = []
    for (ja, jb), part in pairs.group_by("judge_a", "judge_b", maintain_order=True):
        by_dim = dict(zip(part["dimension"], part["spearman"], strict=True))
        n = dict(zip(part["dimension"], part["n"], strict=True))
        wide_rows.append(
            [f"{ja} × {jb}"]
            + [f"{fmt(by_dim.get(d), 3)} (n={n.get(d, 0)})" for d in run.dimensions]
        )
    sec.blocks.append(
        Table(
            ["judge pair", *run.dimensions],
            wide_rows,
            caption="Pairwise Spearman correlation over (question, set) items",
            numeric=frozenset(range(1, len(run.dimensions) + 1)),
        )
    )
    sec.blocks.append(
        Table(
            ["dimension", "units", "Krippendorff's alpha (interval)"],
            [
                [r["dimension"], str(r["units"]), fmt(r["alpha"], 3)]
                for r in alpha.iter_rows(named=True)
            ],
            caption="Krippendorff's alpha per dimension (units: question × set)",
            numeric=frozenset({1, 2}),
        )
    )
    return sec


def _humans(run: RunData, path: str | Path) -> Section:
    sec = Section("humans", "Human ratings")
    ratings = read_human_ratings(path)
    if run.scores is None:
        sec.blocks.append(Para("The run has no scores table to compare with.", "warn"))
        return sec
    comp = compare_with_humans(
        ratings,
        answers=run.answers,
        scores=run.scores,
        judges=run.judges,
        dimensions=run.dimensions,
        options=run.aggregate_options(),
        fixed_weights=run.fixed_weights(),
        headline_judges={s: run.headline_judges(s) for s in run.systems},
    )
    sec.blocks.append(
        Para(
            f"{ratings.height} human ratings of {comp.n_items} (question, set, "
            f"dimension) items from {Path(path).name}; several raters of one item are "
            "averaged.",
            "note",
        )
    )
    sec.blocks.append(
        Table(
            ["judge", "dimension", "n", "Pearson", "Spearman", "MAE"],
            [
                [
                    r["judge"],
                    r["dimension"],
                    str(r["n"]),
                    fmt(r["pearson"], 3),
                    fmt(r["spearman"], 3),
                    fmt(r["mae"], 2),
                ]
                for r in comp.agreement.iter_rows(named=True)
            ],
            caption="Each judge against the human scores",
            numeric=frozenset({2, 3, 4, 5}),
        )
    )
    if comp.raters.height:
        sec.blocks.append(
            Table(
                ["dimension", "raters", "units", "alpha"],
                [
                    [
                        r["dimension"],
                        str(r["raters"]),
                        str(r["units"]),
                        fmt(r["alpha"], 3),
                    ]
                    for r in comp.raters.iter_rows(named=True)
                ],
                caption="Agreement among human raters (Krippendorff's alpha, interval)",
                numeric=frozenset({1, 2, 3}),
            )
        )
    if comp.cube.height:
        sec.blocks.append(
            Table(
                [
                    "system",
                    "rated questions",
                    "humans' CuBE",
                    "humans' weighted",
                    "jury CuBE (same questions)",
                    "jury CuBE (all questions)",
                ],
                [
                    [
                        r["system"],
                        str(r["questions"]),
                        fmt(r["human_cube"], 2),
                        fmt(r["human_weighted"], 2),
                        fmt(r["jury_cube_same_questions"], 2),
                        fmt(_across(run, r["system"], "cube")[0], 2),
                    ]
                    for r in comp.cube.iter_rows(named=True)
                ],
                caption="The humans' own CuBE beside the jury's (n/a where the humans "
                "did not rate zero, full and system answers of the same questions)",
                numeric=frozenset({1, 2, 3, 4, 5}),
            )
        )
    return sec


def _baselines(run: RunData) -> Section:
    sec = Section("baselines", "Reference-based baselines")
    if run.answers is None:
        sec.blocks.append(Para("The run has no answers table.", "warn"))
        return sec
    full = run.answers.filter(pl.col(schema.SYSTEM) == schema.FULL).select(
        schema.QUESTION_ID, pl.col(schema.ANSWER).alias("reference")
    )
    jury = None
    if run.scores is not None:
        jury = run.scores.group_by(schema.QUESTION_ID, schema.SYSTEM).agg(
            pl.col(schema.SCORE).mean().alias("jury")
        )
    rows = []
    for system in [schema.ZERO, *run.systems]:
        part = run.answers.filter(pl.col(schema.SYSTEM) == system).join(
            full, on=schema.QUESTION_ID, how="inner"
        )
        if jury is not None:
            part = part.join(
                jury.filter(pl.col(schema.SYSTEM) == system).drop(schema.SYSTEM),
                on=schema.QUESTION_ID,
                how="left",
            )
        answers = part.get_column(schema.ANSWER).to_list()
        refs = part.get_column("reference").to_list()
        b = np.array([bleu(a, r) for a, r in zip(answers, refs, strict=True)])
        rl = np.array([rouge_l(a, r) for a, r in zip(answers, refs, strict=True)])
        j = (
            part.get_column("jury").cast(pl.Float64).fill_null(np.nan).to_numpy()
            if "jury" in part.columns
            else np.full(part.height, np.nan)
        )
        rho = pair_stats(rl, j).spearman
        rows.append(
            [
                system,
                str(part.height),
                fmt(b.mean() * 100 if b.size else None, 1),
                fmt(rl.mean() * 100 if rl.size else None, 1),
                fmt(np.nanmean(j) if np.isfinite(j).any() else None, 2),
                fmt(rho, 3),
                fmt(_across(run, system, "cube")[0], 1)
                if system != schema.ZERO
                else "",
            ]
        )
    sec.blocks.append(
        Table(
            [
                "answers",
                "n",
                "BLEU-4 ×100",
                "ROUGE-L F1 ×100",
                "jury mean score",
                "Spearman(ROUGE-L, jury)",
                "CuBE",
            ],
            rows,
            caption="Character-level BLEU and ROUGE-L against the full-score answers, "
            "beside the judge scores",
            numeric=frozenset(range(1, 7)),
        )
    )
    return sec


def _case_row(
    r: Mapping[str, Any],
    cell_of: Mapping[tuple[str, str], str],
    questions: Mapping[str, str],
    titles: Mapping[str, str],
    judges: Sequence[str],
) -> list[str | LongText]:
    """One row of a worst-case table."""
    qid = r[schema.QUESTION_ID]
    retrieved = r.get(schema.RETRIEVED_DOC_IDS) or []
    return [
        qid,
        *([LongText(questions.get(qid, ""))] if questions else []),
        LongText(titles.get(r[schema.DOC_ID], r[schema.DOC_ID])),
        str(r[schema.RANK] if r[schema.RANK] is not None else "n/a"),
        LongText(r[schema.ANSWER] or "(no answer)"),
        *[cell_of.get((qid, j), "n/a") for j in judges],
        fmt(r["jury"], 2),
        LongText("; ".join(titles.get(d, d) for d in list(retrieved)[:3]), preview=60),
    ]


def _worst(run: RunData) -> Section | None:
    if run.answers is None or run.scores is None:
        return None
    sec = Section("worst", "Worst cases")
    titles: dict[str, str] = {}
    if run.documents is not None and schema.TITLE in run.documents.columns:
        titles = dict(
            zip(
                run.documents.get_column(schema.DOC_ID).to_list(),
                run.documents.get_column(schema.TITLE).fill_null("").to_list(),
                strict=True,
            )
        )
    questions: dict[str, str] = {}
    if run.questions is not None and schema.QUESTION in run.questions.columns:
        questions = dict(
            zip(
                run.questions.get_column(schema.QUESTION_ID).to_list(),
                run.questions.get_column(schema.QUESTION).fill_null("").to_list(),
                strict=True,
            )
        )
    dims = run.dimensions
    for system in run.systems:
        ans = run.answers.filter(pl.col(schema.SYSTEM) == system)
        sc = run.scores.filter(pl.col(schema.SYSTEM) == system)
        per_judge = sc.group_by(schema.QUESTION_ID, schema.JUDGE).agg(
            pl.col(schema.SCORE).mean().alias("mean"),
            *[
                pl.col(schema.SCORE)
                .filter(pl.col(schema.DIMENSION) == d)
                .first()
                .alias(f"d:{d}")
                for d in dims
            ],
        )
        overall = sc.group_by(schema.QUESTION_ID).agg(
            pl.col(schema.SCORE).mean().alias("jury")
        )
        table = ans.join(overall, on=schema.QUESTION_ID, how="left")
        cell_of: dict[tuple[str, str], str] = {}
        for r in per_judge.iter_rows(named=True):
            parts = ["–" if r[f"d:{d}"] is None else f"{r[f'd:{d}']:g}" for d in dims]
            cell_of[(r[schema.QUESTION_ID], r[schema.JUDGE])] = (
                " / ".join(parts) + f" (mean {fmt(r['mean'], 1)})"
            )

        headers = [
            "question_id",
            *(["question"] if questions else []),
            "gold document",
            "rank",
            "answer",
            *[f"{j} ({'/'.join(d[:4] for d in dims)})" for j in run.judges],
            "jury mean",
            "top retrieved",
        ]
        shift = 1 if questions else 0
        numeric = frozenset({2 + shift, 4 + shift + len(run.judges)})
        hit = table.filter(pl.col(schema.RANK).fill_null(0) >= 1).sort(
            "jury", nulls_last=True
        )
        sec.blocks.append(
            Table(
                headers,
                [
                    _case_row(r, cell_of, questions, titles, run.judges)
                    for r in hit.head(WORST_N).iter_rows(named=True)
                ],
                caption=f"{system}: the {min(WORST_N, hit.height)} lowest-scored "
                "answers among retrieved questions",
                anchor=f"worst-{system}",
                numeric=numeric,
            )
        )
        miss = table.filter(pl.col(schema.RANK).fill_null(0) < 1).sort(
            "jury", nulls_last=True
        )
        sec.blocks.append(
            Table(
                headers,
                [
                    _case_row(r, cell_of, questions, titles, run.judges)
                    for r in miss.head(2 * WORST_N).iter_rows(named=True)
                ],
                caption=f"{system}: missed retrievals ({miss.height} questions; "
                f"lowest-scored {min(2 * WORST_N, miss.height)} shown)",
                anchor=f"missed-{system}",
                numeric=numeric,
            )
        )
    return sec


def _details(run: RunData, boot_meta: str) -> Section:
    sec = Section("details", "Run details")
    rows = [
        ["run directory", str(run.run_dir)],
        [
            "judges",
            ", ".join(
                j if run.judge_kind(j) == "LLM" else f"{j} ({run.judge_kind(j)})"
                for j in run.judges
            ),
        ],
        ["systems", ", ".join(run.systems)],
        ["dimensions", ", ".join(run.dimensions)],
        ["bootstrap", boot_meta],
    ]
    if run.answers is not None:
        rows.append(
            ["questions", str(run.answers.get_column(schema.QUESTION_ID).n_unique())]
        )
    for key, value in run.summary.items():
        if key in ("judges", "across_judges"):
            continue
        rows.append([f"summary: {key}", json.dumps(value, ensure_ascii=False)[:1500]])
    if run.manifest:
        # Masked again: a manifest written by an older version (or edited by
        # hand) may hold a credential; the prompt nonce stays private too.
        for key, value in mask(run.manifest).items():
            rows.append(
                [f"manifest: {key}", json.dumps(value, ensure_ascii=False)[:600]]
            )
    sec.blocks.append(
        Table(["item", "value"], [[a, LongText(b, 160)] for a, b in rows])
    )
    return sec


def check_recomputation(run: RunData, rep: CubeReplicates) -> None:
    """Fail unless the report's recomputation reproduces ``summary.json``.

    The intervals are only intervals *of the headline* if the vectorised
    recomputation gives the summary's figures on the questions as drawn: every
    judge's CuBE (a value on one side and none on the other is a mismatch too)
    and the across-judge mean of the judges used.

    Raises:
        InputError: Naming the first figures that differ.
    """
    problems: list[str] = []
    for si, system in enumerate(rep.systems):
        for ji, judge in enumerate(rep.judges):
            if judge not in run.judges:
                continue
            recorded = num(_judge_value(run, judge, "cube", system))
            ours = float(rep.cube[ji, si, 0])
            mine = ours if np.isfinite(ours) else None
            if (recorded is None) != (mine is None) or (
                recorded is not None
                and mine is not None
                and abs(recorded - mine) > 1e-6 * max(1.0, abs(recorded))
            ):
                problems.append(
                    f"judge {judge}, {system}: summary CuBE {fmt(recorded, 6)}, "
                    f"recomputed {fmt(mine, 6)}"
                )
        if run.no_verdict(system) is None:
            recorded = _across(run, system, "cube")[0]
            ours = float(rep.cube_mean[si, 0])
            if recorded is not None and not (
                np.isfinite(ours)
                and abs(recorded - ours) <= 1e-6 * max(1.0, abs(recorded))
            ):
                problems.append(
                    f"{system}: summary across-judge CuBE {fmt(recorded, 6)}, "
                    f"recomputed over {', '.join(run.headline_judges(system))} "
                    f"{fmt(ours, 6)}"
                )
    if problems:
        raise InputError(
            "summary.json does not match the answers and scores tables beside it ("
            + "; ".join(problems[:3])
            + (f"; {len(problems) - 3} more" if len(problems) > 3 else "")
            + "), so no interval of its figures can be computed. Re-create the "
            f"summary from these tables with `cube-ray aggregate {run.run_dir}`.",
            path=str(run.run_dir / "summary.json"),
        )


def _recompute(
    run: RunData, *, n_resamples: int, seed: int, interval: IntervalMethod
) -> tuple[CubeReplicates | None, dict[str, BootstrapResult]]:
    """The checked recomputation on the questions as drawn, and the intervals.

    Both are empty without the answers and scores tables (or systems).

    Raises:
        InputError: See :func:`check_recomputation`.
    """
    if run.answers is None or run.scores is None or not run.systems:
        return None, {}
    common: dict[str, Any] = {
        "options": run.aggregate_options(),
        "fixed_weights": run.fixed_weights(),
        "dimensions": run.dimensions,
        "judges": {s: run.headline_judges(s) for s in run.systems},
    }
    rep = evaluate_replicates(run.answers, run.scores, **common)
    check_recomputation(run, rep)
    boot: dict[str, BootstrapResult] = {}
    if n_resamples > 0:
        boot = bootstrap_cube(
            run.answers,
            run.scores,
            n_resamples=n_resamples,
            seed=seed,
            method=interval,
            **common,
        )
    return rep, boot


def build_sections(
    run: RunData,
    *,
    human_ratings: str | Path | None = None,
    baselines: bool = False,
    n_resamples: int = 1000,
    seed: int = 0,
    interval: IntervalMethod = DEFAULT_INTERVAL,
) -> list[Section]:
    """All sections of the report of one run.

    Raises:
        InputError: The summary's figures cannot be reproduced from the tables
            (see :func:`check_recomputation`).
    """
    sections, _ = _sections_and_boot(
        run,
        human_ratings=human_ratings,
        baselines=baselines,
        n_resamples=n_resamples,
        seed=seed,
        interval=interval,
    )
    return sections


def _sections_and_boot(
    run: RunData,
    *,
    human_ratings: str | Path | None,
    baselines: bool,
    n_resamples: int,
    seed: int,
    interval: IntervalMethod,
) -> tuple[list[Section], dict[str, BootstrapResult]]:
    """:func:`build_sections`, and the headline's bootstrap results it used."""
    notes = [Para(n, "note") for n in run.option_notes()]
    tables = run.answers is not None and run.scores is not None
    rep, boot = _recompute(run, n_resamples=n_resamples, seed=seed, interval=interval)
    if not tables:
        notes.append(
            Para(
                "answers/ or scores/ is missing: no bootstrap interval, plots of "
                "scores, agreement or worst cases.",
                "warn",
            )
        )
    sections = [_headline(run, boot, notes), _per_judge(run, rep)]
    for part in (
        _distributions(run),
        _retrieval(run),
        _bounds(run) if run.judges and run.systems else None,
        _qualification(run),
        _variants(run),
        _agreement(run),
        _humans(run, human_ratings) if human_ratings is not None else None,
        _baselines(run) if baselines else None,
        _worst(run),
    ):
        if part is not None:
            sections.append(part)
    meta = (
        f"{n_resamples} resamples of the questions, seed {seed}, {interval} "
        "interval, judges held fixed"
        if boot
        else "not computed"
    )
    sections.append(_details(run, meta))
    return sections, boot


def _meta(run: RunData) -> list[str]:
    n_q = (
        run.answers.get_column(schema.QUESTION_ID).n_unique()
        if run.answers is not None
        else None
    )
    return [
        f"Run {run.name} · {len(run.systems)} system(s) · {len(run.judges)} judge(s) · "
        f"{len(run.dimensions)} dimension(s)"
        + (f" · {n_q} questions" if n_q is not None else ""),
        "Generated " + dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    ]


def write_report(
    run_dir: str | Path,
    *,
    out_dir: str | Path | None = None,
    human_ratings: str | Path | None = None,
    baselines: bool = False,
    n_resamples: int = 1000,
    seed: int = 0,
    interval: IntervalMethod = DEFAULT_INTERVAL,
) -> ReportPaths:
    """Write ``report.html`` and ``report.md`` for a run directory.

    Args:
        run_dir: The run directory (``summary.json`` required; ``answers/``,
            ``scores/``, ``questions/``, ``documents/`` used when present).
        out_dir: Where to write; default ``run_dir``.
        human_ratings: A CSV of human scores
            (``question_id,system,dimension,score[,rater]``).
        baselines: Add character-level BLEU / ROUGE-L against the full answers.
        n_resamples: Bootstrap resamples (0 disables the interval).
        seed: Bootstrap seed.
        interval: ``bca`` or ``percentile`` (see BENCHMARKS.md, validity).

    Returns:
        The paths written.

    Raises:
        InputError: The run directory or the ratings file is invalid.
    """
    require_report_deps()
    run = load_run(run_dir)
    sections, boot = _sections_and_boot(
        run,
        human_ratings=human_ratings,
        baselines=baselines,
        n_resamples=n_resamples,
        seed=seed,
        interval=interval,
    )
    out = Path(out_dir) if out_dir is not None else run.run_dir
    out.mkdir(parents=True, exist_ok=True)
    title = f"CuBE report — {run.name}"
    footer = f"cube-ray {__version__} · CuBE: Customizable Bounds Evaluation"
    meta = _meta(run)
    paths = ReportPaths(
        out / "report.html", out / "report.md", tuple(console_lines(run, boot))
    )
    paths.html.write_text(
        render_html(title=title, meta=meta, sections=sections, footer=footer),
        encoding="utf-8",
    )
    paths.markdown.write_text(
        render_markdown(title=title, meta=meta, sections=sections, footer=footer),
        encoding="utf-8",
    )
    return paths


def write_comparison(
    run_dirs: Sequence[str | Path],
    *,
    out: str | Path,
    n_resamples: int = 1000,
    seed: int = 0,
    interval: IntervalMethod = DEFAULT_INTERVAL,
) -> Path:
    """Write one HTML page comparing several runs (and its ``.md`` twin).

    Args:
        run_dirs: Run directories, each with a ``summary.json``.
        out: The HTML file to write; the Markdown goes beside it (``.md``).
        n_resamples: Bootstrap resamples per run (0 disables intervals).
        seed: Bootstrap seed.
        interval: ``bca`` or ``percentile``.

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
    rows = []
    labels: list[str] = []
    per_label: dict[str, dict[str, float | None]] = {}
    means: dict[str, float | None] = {}
    intervals: dict[str, tuple[float | None, float | None]] = {}
    dims: list[str] = []
    for run, name in zip(runs, names, strict=True):
        dims.extend(d for d in run.dimensions if d not in dims)
        _, boot = _recompute(run, n_resamples=n_resamples, seed=seed, interval=interval)
        for system in run.systems:
            label = f"{name}:{system}"
            labels.append(label)
            verdict = run.no_verdict(system)
            used = run.headline_judges(system)
            mean, sd = _across(run, system, "cube")
            means[label] = None if verdict else mean
            intervals[label] = (
                boot[system].cube if system in boot and not verdict else (None, None)
            )
            for j in run.judges:
                per_label.setdefault(j, {})[label] = (
                    num(_judge_value(run, j, "cube", system)) if j in used else None
                )
            wmean, wsd = _across(run, system, "weighted")
            rows.append(
                [
                    name,
                    system,
                    NO_VERDICT if verdict else fmt(mean, 2),
                    fmt(sd, 2),
                    _interval(intervals[label], 2),
                    fmt(_recall(run, system), 3),
                    f"{fmt(wmean)} ± {fmt(wsd)}",
                    ", ".join(used) or "none",
                ]
            )
    dim_rows = []
    for run, name in zip(runs, names, strict=True):
        for system in run.systems:
            dim_rows.append(
                [name, system]
                + [
                    "{} ± {}".format(*(fmt(x) for x in _across(run, system, d)))
                    for d in dims
                ]
            )
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
            rows,
            caption="Headline figures per run and system (interval: judges held "
            f"fixed, {interval})",
            anchor="comparison-table",
            numeric=frozenset({2, 3, 4, 5, 6}),
        )
    )
    sec.blocks.append(
        Figure(
            "fig-compare",
            "CuBE per run and system",
            _plots.cube_chart(
                per_label,
                means,
                intervals,
                systems=labels,
                judges=sorted(per_label),
            ),
            "Bar chart of CuBE per run and system with bootstrap intervals.",
        )
    )
    sec.blocks.append(
        Table(
            ["run", "system", *dims],
            dim_rows,
            caption="Normalised dimensions (cross-judge mean ± SD)",
            numeric=frozenset(range(2, 2 + len(dims))),
        )
    )
    sec.blocks.append(
        Para(
            "Runs are comparable only if they share the question set, the bounds "
            "generator and the jury; check each run's details.",
            "note",
        )
    )
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    title = "CuBE comparison — " + ", ".join(names)
    meta = [
        f"{len(runs)} runs",
        "Generated " + dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    ]
    footer = f"cube-ray {__version__}"
    out_path.write_text(
        render_html(title=title, meta=meta, sections=[sec], footer=footer),
        encoding="utf-8",
    )
    md_path = (
        out_path.with_suffix(".md")
        if out_path.suffix.lower() != ".md"
        else out_path.with_name(out_path.name + ".md")
    )
    md_path.write_text(
        render_markdown(title=title, meta=meta, sections=[sec], footer=footer),
        encoding="utf-8",
    )
    return out_path
