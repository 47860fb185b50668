"""The paired part of ``cube-ray compare``: runs compared on their shared questions.

Formats :func:`cube_ray.aggregate.compare_runs` for every pair of runs: the
question sets (and how many are shared), one sentence per pair of systems, the
table of differences, and the console's ``compared:`` lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from cube_ray.aggregate import (
    DEFAULT_INTERVAL,
    DEFAULT_RESAMPLES,
    IntervalMethod,
    RunsComparison,
    RunTables,
    check_method,
    compare_runs,
)
from cube_ray.report._data import RunData
from cube_ray.report._paired import (
    PAIRED_NOTE,
    comparison_sentence,
    comparison_table,
)
from cube_ray.report._render import Para, Section

__all__ = ["paired_runs_section", "question_sets_text"]


def question_sets_text(first: str, second: str, result: RunsComparison) -> str:
    """How the two runs' question sets relate, in words.

    >>> question_sets_text("a", "b", RunsComparison(120, 120, 120, []))
    'a and b have the same 120 questions.'
    >>> print(question_sets_text("a", "b", RunsComparison(120, 100, 90, [])))
    ... # doctest: +NORMALIZE_WHITESPACE
    The question sets differ: a has 120 questions, b has 100, and 90 are
    shared; the paired differences use the 90 shared questions only.
    """
    if result.first_questions == result.second_questions == result.shared:
        return f"{first} and {second} have the same {result.shared:,} questions."
    if result.shared == 0:
        return (
            f"{first} and {second} share no question: they cannot be compared "
            "question by question."
        )
    return (
        f"The question sets differ: {first} has {result.first_questions:,} "
        f"questions, {second} has {result.second_questions:,}, and "
        f"{result.shared:,} are shared; the paired differences use the "
        f"{result.shared:,} shared questions only."
    )


def paired_runs_section(
    runs: Sequence[RunData],
    names: Sequence[str],
    *,
    n_resamples: int | None,
    seed: int | None,
    interval: IntervalMethod | None,
) -> tuple[Section | None, list[str]]:
    """The section of paired differences across runs, and the console lines.

    Resamples, seed and method: as given, else as the first run's intervals
    record them, else the defaults. ``n_resamples=0``: no section.
    """
    recorded = runs[0].intervals if runs else None
    b = n_resamples
    if b is None:
        b = recorded.n_resamples if recorded is not None else DEFAULT_RESAMPLES
    if len(runs) < 2 or b <= 0:
        return None, []
    seed = seed if seed is not None else (recorded.seed if recorded else 0)
    method = check_method(
        interval or (recorded.method if recorded else DEFAULT_INTERVAL)
    )
    confidence = recorded.confidence if recorded is not None else 0.95
    sec = Section("paired-runs", "Runs compared on their shared questions")
    lines: list[str] = []
    for (run_a, name_a), (run_b, name_b) in combinations(
        zip(runs, names, strict=True), 2
    ):
        if any(r.answers is None or r.scores is None for r in (run_a, run_b)):
            sec.blocks.append(
                Para(
                    f"{name_a} and {name_b} are not compared question by question: "
                    "answers/ or scores/ is missing from a run directory.",
                    "warn",
                )
            )
            continue
        tables = [
            RunTables(name, run.summary, run.answers, run.scores)
            for run, name in ((run_a, name_a), (run_b, name_b))
            if run.answers is not None and run.scores is not None
        ]
        result = compare_runs(
            tables[0],
            tables[1],
            n_resamples=b,
            seed=seed,
            method=method,
            confidence=confidence,
        )
        sets = question_sets_text(name_a, name_b, result)
        same = result.first_questions == result.second_questions == result.shared
        sec.blocks.append(Para(sets, "note" if same else "warn"))
        if not same:
            lines.append(f"compared: {sets}")
        for c in result.comparisons:
            sentence = comparison_sentence(c, confidence=confidence)
            sec.blocks.append(Para(sentence + ".", "text"))
            lines.append(f"compared: {sentence}")
        if result.comparisons:
            sec.blocks.append(
                comparison_table(
                    result.comparisons,
                    method=method,
                    confidence=confidence,
                    anchor=f"paired-{len(lines)}",
                )
            )
    sec.blocks.append(
        Para(
            PAIRED_NOTE
            + f" Each run keeps its own bounds and weights, recomputed on the "
            f"shared questions ({b} resamples, seed {seed}); a pair uses the "
            "judges that enter both runs' headlines.",
            "note",
        )
    )
    return sec, lines
