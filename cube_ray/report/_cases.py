"""Sections beside the figures: agreement, humans, baselines, cases, details.

The statistics they show (judge agreement, the comparison with human ratings,
text baselines) come from :mod:`cube_ray.aggregate`; these builders only format.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from cube_ray import schema
from cube_ray.aggregate import compare_with_humans, judge_agreement, text_baselines
from cube_ray.credentials import mask
from cube_ray.report._data import CUBE, RunData
from cube_ray.report._format import fmt
from cube_ray.report._human import read_human_ratings
from cube_ray.report._render import LongText, Para, Section, Table
from cube_ray.report._words import ALPHA_WARN, SCALE_10, disagreement_warning

__all__ = [
    "agreement_section",
    "baselines_section",
    "details_section",
    "disagreements",
    "humans_section",
    "judges_agreement",
    "worst_section",
]

WORST_N = 10
"""Rows of each worst-case table."""


Agreement = tuple[pl.DataFrame, pl.DataFrame]
"""``(spearman, alpha)`` of :func:`cube_ray.aggregate.judge_agreement`."""


def judges_agreement(run: RunData) -> Agreement | None:
    """The aggregation's judge agreement of the run (None: under two judges)."""
    if run.scores is None or len(run.judges) < 2:
        return None
    return judge_agreement(run.scores, judges=run.judges, dimensions=run.dimensions)


def disagreements(agreement: Agreement | None) -> list[str]:
    """A warning per dimension whose Krippendorff's alpha is below 0.4."""
    if agreement is None:
        return []
    alphas = dict(zip(agreement[1]["dimension"], agreement[1]["alpha"], strict=True))
    warning = disagreement_warning(alphas)
    return [] if warning is None else [warning]


def agreement_section(
    run: RunData, agreement: Agreement | None = None
) -> Section | None:
    """Pairwise Spearman between judges, Krippendorff's alpha per dimension."""
    if agreement is None:
        agreement = judges_agreement(run)
    if agreement is None:
        return None
    pairs, alpha = agreement
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
            ["dimension", "units", "Krippendorff's alpha (interval scale)"],
            [
                [r["dimension"], str(r["units"]), fmt(r["alpha"], 3)]
                for r in alpha.iter_rows(named=True)
            ],
            caption="Krippendorff's alpha per dimension (units: question × set; "
            f"below {ALPHA_WARN} the judges disagree)",
            numeric=frozenset({1, 2}),
        )
    )
    sec.blocks.extend(Para(w, "warn") for w in disagreements(agreement))
    return sec


def humans_section(run: RunData, path: str | Path) -> Section:
    """Each judge against human ratings, and the humans' own CuBE."""
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
        options=run.summary.options(),
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
                ["dimension", "raters", "units", "alpha", "MAD"],
                [
                    [
                        r["dimension"],
                        str(r["raters"]),
                        str(r["units"]),
                        fmt(r["alpha"], 3),
                        fmt(r["mean_abs_difference"], 2),
                    ]
                    for r in comp.raters.iter_rows(named=True)
                ],
                caption="Agreement among human raters (Krippendorff's alpha, interval "
                "scale; MAD: mean absolute difference of two raters' scores of one "
                "item)",
                numeric=frozenset({1, 2, 3, 4}),
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
                        fmt(run.figure(r["system"], CUBE)[0], 2),
                    ]
                    for r in comp.cube.iter_rows(named=True)
                ],
                caption="The humans' own CuBE beside the jury's (n/a where the humans "
                "did not rate zero, full and system answers of the same questions)",
                numeric=frozenset({1, 2, 3, 4, 5}),
            )
        )
    return sec


def baselines_section(run: RunData) -> Section:
    """Character-level BLEU and ROUGE-L against the full answers, beside the jury."""
    sec = Section("baselines", "Reference-based baselines")
    if run.answers is None:
        sec.blocks.append(Para("The run has no answers table.", "warn"))
        return sec
    table = text_baselines(run.answers, run.scores, sets=[schema.ZERO, *run.systems])
    records = list(table.iter_rows(named=True))
    sec.blocks.append(
        Table(
            [
                "answers",
                "n",
                "BLEU-4 ×100",
                "ROUGE-L F1 ×100",
                "Spearman(ROUGE-L, jury)",
            ],
            [
                [
                    r["set"],
                    str(r["n"]),
                    fmt(r["bleu"], 1),
                    fmt(r["rouge_l"], 1),
                    fmt(r["spearman"], 3),
                ]
                for r in records
            ],
            caption="Character-level BLEU and ROUGE-L against the full-score answers "
            "(text overlap, 0-100), and their rank correlation with the jury's "
            "scores per question",
            numeric=frozenset(range(1, 5)),
        )
    )
    sec.blocks.append(
        Table(
            ["answers", "n", "jury mean score"],
            [[r["set"], str(r["n"]), fmt(r["jury"], 2)] for r in records],
            caption=f"The jury's mean score of the same answers ({SCALE_10}; their "
            "CuBE is in the headline)",
            numeric=frozenset({1, 2}),
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


def worst_section(run: RunData) -> Section | None:
    """The lowest-scored answers among retrieved and missed questions."""
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


def details_section(run: RunData, boot_meta: str) -> Section:
    """The run's details: names, the summary's other blocks, the manifest."""
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
    sec.blocks.append(
        Table(["item", "value"], [[a, LongText(b, 160)] for a, b in rows])
    )
    shown = run.summary.model_dump(
        mode="json", exclude={"judges", "across_judges", "intervals"}
    )
    sec.blocks.append(
        Table(
            ["setting", "value"],
            [[a, LongText(b, 160)] for a, b in setting_rows(shown)],
            caption="summary.json: the aggregation's settings, counts, flags and "
            "notes (the figures are in the sections above)",
            anchor="details-summary",
        )
    )
    if run.manifest is not None:
        # Masked again: a manifest written by an older version (or edited by
        # hand) may hold a credential; the prompt nonce stays private too.
        sec.blocks.append(
            Table(
                ["setting", "value"],
                [
                    [a, LongText(b, 160)]
                    for a, b in setting_rows(mask(run.manifest.recorded()))
                ],
                caption="manifest.json: how the run was made",
                anchor="details-manifest",
            )
        )
    return sec


def _scalar(value: object) -> str:
    """One setting's value in words: ``yes``/``no``, ``none``, numbers as typed."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def setting_rows(value: object, prefix: str = "") -> list[tuple[str, str]]:
    """A nested JSON value as ``(dotted key, value)`` rows, nothing cut.

    Lists of plain values become one comma-separated cell; lists of objects
    get one group of rows per item.

    >>> setting_rows({"parameters": {"k": 8, "trim": 0.1}, "systems": ["a", "b"],
    ...               "flags": [{"flag": "x", "judge": None}], "notes": []})
    ... # doctest: +NORMALIZE_WHITESPACE
    [('parameters.k', '8'), ('parameters.trim', '0.1'), ('systems', 'a, b'),
     ('flags 1.flag', 'x'), ('flags 1.judge', 'none'), ('notes', 'none')]
    """
    if isinstance(value, Mapping):
        out: list[tuple[str, str]] = []
        for key, item in value.items():
            out += setting_rows(item, f"{prefix}.{key}" if prefix else str(key))
        return out or [(prefix, "none")]
    if isinstance(value, list | tuple):
        if not value:
            return [(prefix, "none")]
        if all(not isinstance(v, Mapping | list | tuple) for v in value):
            return [(prefix, ", ".join(_scalar(v) for v in value))]
        out = []
        for i, item in enumerate(value, 1):
            out += setting_rows(item, f"{prefix} {i}")
        return out
    return [(prefix, _scalar(value))]
