"""The summary's blocks, written from the figures of one aggregation.

:func:`judge_blocks` writes ``judges.<judge>``, :func:`across_block`
``across_judges`` and :func:`counts` ``counts``; the ``finish_*`` functions
edit the summary's JSON for what only some runs have (qualification, answer
sets that failed, judges of their own model's answers). Each returns the flags
it raises instead of keeping them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from cube_ray import schema
from cube_ray.aggregate._availability import BOUND_UNAVAILABLE, verdict_reasons
from cube_ray.aggregate._figures import MISSING_SCORES_TEXT, Figures
from cube_ray.aggregate._frames import (
    CUBE,
    DEGENERATE,
    FIGURE,
    NO_SEPARATED_JUDGE,
    OUTSIDE,
    SET,
    WEIGHTED,
    finite,
    sorted_flags,
)
from cube_ray.aggregate._judge_separation import Separation, why_excluded
from cube_ray.aggregate._math import (
    COUNT,
    FALLBACK,
    MEAN,
    N_QUESTIONS,
    N_RETRIEVED,
    RECALL,
    SD,
    TRIMMED_MEAN,
    WEIGHT,
    N,
    R,
)
from cube_ray.aggregate._model import (
    DEGENERATE_BOUNDS,
    MISSING_SCORES,
    NO_CERTIFICATE,
    NO_CERTIFIED_JUDGE,
    NO_JUDGE_SEPARATES,
    NO_RETRIEVED_QUESTIONS,
    UNQUALIFIED_JUDGE,
)
from cube_ray.aggregate._own_model import own_model_judges, without_own_model
from cube_ray.aggregate._passes import Study
from cube_ray.aggregate._qualification import (
    NO_CERTIFIED,
    NOT_QUALIFIED,
    UNQUALIFIED,
    UNTESTED,
    QualificationResult,
)
from cube_ray.aggregate._separation import NOT_SEPARATED

_NO_RETRIEVED_TEXT = "no retrieved questions"

_NULL_CODES = {
    MISSING_SCORES_TEXT: MISSING_SCORES,
    DEGENERATE: DEGENERATE_BOUNDS,
    _NO_RETRIEVED_TEXT: NO_RETRIEVED_QUESTIONS,
}
"""Reason code of each (flag) text of an undefined normalised figure (any
other text gets its words joined by underscores)."""


def figure_names(study: Study) -> list[str]:
    """The dimensions, then the weighted total."""
    return [*study.dimensions, WEIGHTED]


def _empty_block(study: Study, judge: str, tests: Separation) -> dict[str, Any]:
    systems = study.systems
    return {
        "weights": {s: {} for s in systems},
        "weight_method": {},
        "correlations": {s: {} for s in systems},
        "n_pairs": {s: {} for s in systems},
        "trimmed_means": {s: {"zero": {}, "full": {}, s: {}} for s in systems},
        "n_scores": {s: {"zero": {}, "full": {}, s: {}} for s in systems},
        "normalized": {s: {} for s in systems},
        "null_reasons": {},
        "recall_at_k": {},
        "cube": {},
        "missing": {},
        "bound_separation": {
            s: {
                fig: tests[(judge, s, fig)]
                for fig in figure_names(study)
                if (judge, s, fig) in tests
            }
            for s in systems
        },
    }


def judge_blocks(
    study: Study, weights: pl.DataFrame, figs: Figures, tests: Separation
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """``judges.<judge>`` of every judge, and the flags of its normalised figures."""
    judges = {j: _empty_block(study, j, tests) for j in study.judges}
    _write_weights(study, judges, weights)
    order = {name: i for i, name in enumerate(figure_names(study))}
    for row in sorted(
        figs.figures.iter_rows(named=True), key=lambda r: order[r[FIGURE]]
    ):
        s = row[schema.SYSTEM]
        set_name = s if row[SET] == "rag" else row[SET]
        judges[row[schema.JUDGE]]["trimmed_means"][s][set_name][row[FIGURE]] = finite(
            row[TRIMMED_MEAN]
        )
    for row in figs.trimmed.iter_rows(named=True):
        s = row[schema.SYSTEM]
        set_name = s if row[SET] == "rag" else row[SET]
        judges[row[schema.JUDGE]]["n_scores"][s][set_name][row[schema.DIMENSION]] = row[
            N
        ]
    flags = _write_normalized(judges, figs, order)
    recall_map = {row[schema.SYSTEM]: row for row in figs.recall.iter_rows(named=True)}
    for j in study.judges:
        for s in study.systems:
            judges[j]["recall_at_k"][s] = recall_map[s][RECALL]
            judges[j]["cube"][s] = None
    for row in figs.cube.iter_rows(named=True):
        judges[row[schema.JUDGE]]["cube"][row[schema.SYSTEM]] = finite(row[CUBE])
    for row in (
        study.passes.frames["missing"]
        .group_by(schema.JUDGE, schema.SYSTEM, schema.DIMENSION, schema.STATUS)
        .agg(pl.col(COUNT).sum())
        .sort(pl.all())
        .iter_rows(named=True)
    ):
        (
            judges[row[schema.JUDGE]]["missing"]
            .setdefault(row[schema.SYSTEM], {})
            .setdefault(row[schema.DIMENSION], {})
        )[row[schema.STATUS]] = row[COUNT]
    return judges, flags


def _write_weights(
    study: Study, judges: dict[str, dict[str, Any]], weights: pl.DataFrame
) -> None:
    """Weights, their method and (Pearson) the correlations they come from."""
    spec = study.options.weights
    method = spec if isinstance(spec, str) else "fixed"
    for row in weights.iter_rows(named=True):
        jd = judges[row[schema.JUDGE]]
        s, d = row[schema.SYSTEM], row[schema.DIMENSION]
        jd["weights"][s][d] = finite(row[WEIGHT])
        if R in row:
            jd["correlations"][s][d] = finite(row[R])
            jd["n_pairs"][s][d] = row[N]
        jd["weight_method"][s] = (
            "equal (fallback: every r_d <= 0 or undefined)" if row[FALLBACK] else method
        )
    if spec != "pearson":
        for block in judges.values():
            del block["correlations"], block["n_pairs"]


def _write_normalized(
    judges: dict[str, dict[str, Any]], figs: Figures, order: Mapping[str, int]
) -> list[dict[str, Any]]:
    """Normalised figures, the reasons of undefined ones; their flags."""
    flags: list[dict[str, Any]] = []
    no_hits = {
        row[schema.SYSTEM]: row[N_RETRIEVED] == 0
        for row in figs.recall.iter_rows(named=True)
    }
    for row in sorted(figs.norm.iter_rows(named=True), key=lambda r: order[r[FIGURE]]):
        jd = judges[row[schema.JUDGE]]
        s, fig, value = row[schema.SYSTEM], row[FIGURE], finite(row["normalized"])
        jd["normalized"][s][fig] = value
        reason = row["reason"]
        if reason == MISSING_SCORES_TEXT and row["rag"] is None and no_hits.get(s):
            reason = _NO_RETRIEVED_TEXT
        where = {"judge": row[schema.JUDGE], "system": s, "figure": f"normalized.{fig}"}
        if reason is not None:
            jd["null_reasons"].setdefault(s, {})[fig] = {
                "code": _NULL_CODES.get(reason, reason.replace(" ", "_")),
                "text": reason,
            }
            flags.append({"flag": reason, **where})
        elif value is not None and not 0.0 <= value <= 100.0:
            flags.append({"flag": OUTSIDE, **where, "value": value})
    return flags


def across_block(
    study: Study,
    across: pl.DataFrame,
    tests: Separation,
    used: Mapping[str, list[str]],
) -> dict[str, dict[str, Any]]:
    """The ``across_judges`` block (section 10).

    Per system: the judges used, those left out and why, and each figure's
    mean, SD and number of judges.
    """
    out: dict[str, dict[str, Any]] = {}
    for s in study.systems:
        judges = used[s]
        out[s] = {
            "judges": list(judges),
            "excluded": {
                j: why_excluded(study, tests[(j, s, WEIGHTED)])
                for j in study.judges
                if j not in judges
            },
            "reason": None
            if judges
            else {"code": NO_JUDGE_SEPARATES, "text": NO_SEPARATED_JUDGE},
        }
        for fig in [*figure_names(study), CUBE]:
            out[s][fig] = {"mean": None, "sd": None, "n_judges": 0}
    for row in across.iter_rows(named=True):
        out[row[schema.SYSTEM]][row[FIGURE]] = {
            "mean": finite(row[MEAN]),
            "sd": finite(row[SD]),
            "n_judges": row[N],
        }
    return out


def counts(study: Study, recall: pl.DataFrame) -> dict[str, Any]:
    """The ``counts`` block: questions, rows, missing scores, outages."""
    frames = study.passes.frames
    recall_map = {row[schema.SYSTEM]: row for row in recall.iter_rows(named=True)}
    rows_by_system = {
        row[schema.SYSTEM]: row[COUNT]
        for row in frames["stats"]
        .group_by(schema.SYSTEM)
        .agg(pl.col(COUNT).sum())
        .iter_rows(named=True)
    }
    answers, systems = study.inputs.answers, study.systems
    unavailable = study.answers.unavailable
    return {
        "questions": answers.get_column(schema.QUESTION_ID).n_unique(),
        "answer_rows": answers.height,
        "score_rows": study.inputs.scores.height,
        "score_rows_by_system": rows_by_system,
        "missing_scores": int(frames["missing"][COUNT].sum()),
        "retrieved": {s: recall_map[s][N_RETRIEVED] for s in systems},
        "questions_by_system": {s: recall_map[s][N_QUESTIONS] for s in systems},
        "unavailable": {
            s: unavailable.get(s, 0) for s in [*schema.BOUND_SYSTEMS, *systems]
        },
    }


def finish_without_own_model(
    study: Study, out: dict[str, Any], own_model: Sequence[Mapping[str, Any]]
) -> None:
    """Beside each headline, the CuBE without its own-model judges (§12).

    From the final jury (after every exclusion), so it differs from the
    headline only by the flagged judges.
    """
    for s, across in out["across_judges"].items():
        block = without_own_model(
            {j: out["judges"][j]["cube"].get(s) for j in study.judges},
            across["judges"],
            own_model_judges(own_model, s),
        )
        if block is not None:
            across["without_own_model"] = block


def finish_qualification(
    out: dict[str, Any],
    qual: QualificationResult,
    separated_judges: Mapping[str, list[str]],
    *,
    required: bool = True,
) -> None:
    """Each judge's qualification block; who is left out for its faults.

    With ``required`` (``aggregate.require_qualification``), a judge that
    separates the bounds but holds no certificate is left out for that
    reason, and a system whose every separated judge is left out so says why.
    """
    for j, block in qual.block.items():
        out["judges"][j]["qualification"] = block
    reasons = {
        **{j: {"code": NO_CERTIFICATE, "text": UNTESTED} for j in qual.untested},
        **{
            j: {"code": UNQUALIFIED_JUDGE, "text": UNQUALIFIED}
            for j in qual.unqualified
        },
        **{
            j: {"code": NO_CERTIFICATE, "text": NOT_QUALIFIED} for j in qual.uncertified
        },
    }
    for j, figures in out["judges"].items():
        figures["certified"] = j not in reasons
    if not required:
        return
    for s, across in out["across_judges"].items():
        for j in set(across["excluded"]) & set(separated_judges[s]):
            if j in reasons:  # left out for its certificate only
                across["excluded"][j] = dict(reasons[j])
        if not across["judges"] and separated_judges[s]:
            across["reason"] = {"code": NO_CERTIFIED_JUDGE, "text": NO_CERTIFIED}


def finish_failed_sets(study: Study, out: dict[str, Any]) -> None:
    """Sets with no usable answer (section 10): no verdict, and why.

    Their figures are already null (a bound without a trimmed mean); this
    gives them the reason in words instead of "missing scores", puts it
    on ``across_judges``, and flags each failed set with its reason code.
    The bound-separation flags of those systems are dropped: with a bound
    missing there was nothing to test.
    """
    failed = study.answers.failed_sets
    reasons = verdict_reasons(failed, list(study.systems))
    if not reasons:
        return
    superseded = {MISSING_SCORES_TEXT, _NO_RETRIEVED_TEXT, NOT_SEPARATED}

    def superseded_by_reason(flag: dict[str, Any]) -> bool:
        s = flag.get("system")
        if s not in reasons:
            return False
        # A system with no answer has no correlations to weigh by.
        fallback = flag["flag"] == "equal-weight fallback" and s in failed
        return fallback or flag["flag"] in superseded

    flags = [f for f in out["flags"] if not superseded_by_reason(f)]
    for name, (code, text) in failed.items():
        flags.append(
            {
                "flag": code.replace("_", " "),
                "code": code,
                "system": name,
                "reason": text,
            }
        )
    out["flags"] = sorted_flags(flags)
    for s, text in reasons.items():
        code = failed.get(s, (BOUND_UNAVAILABLE, ""))[0]
        why = {"code": code, "text": text}
        for block in out["judges"].values():
            block["null_reasons"][s] = {f: dict(why) for f in block["normalized"][s]}
        out["across_judges"][s].update(
            judges=[],
            excluded={j: dict(why) for j in study.judges},
            reason=dict(why),
        )
