"""Systems compared on the same questions: sentences, the section, console lines.

Only formatting: the differences and their intervals are computed in
:mod:`cube_ray.aggregate` (``summary.intervals.comparisons`` for the systems of
one run, :func:`cube_ray.aggregate.compare_runs` across runs).
"""

from __future__ import annotations

from collections.abc import Sequence

from cube_ray.aggregate import PairedComparison
from cube_ray.report._data import RunData
from cube_ray.report._format import fmt, interval_text
from cube_ray.report._render import Para, Section, Table
from cube_ray.report._words import SAME_JUDGES, SCALE_100, interval_method

__all__ = [
    "PAIRED_NOTE",
    "compared_lines",
    "comparison_rows",
    "comparison_sentence",
    "comparison_table",
    "headline_verdicts",
    "paired_section",
]

PAIRED_NOTE = (
    "Each resample draws the same questions for both systems, with "
    f"{SAME_JUDGES}, so what the two share (how hard a question is, "
    "the bounds) cancels in the difference: its interval is narrower than the two "
    "systems' own intervals suggest. A difference is resolved when its interval "
    "leaves out 0; otherwise the data cannot tell which system is ahead."
)


def _points(value: float) -> str:
    return f"{value:.1f}"


_LEVEL = 1e-9
"""CuBE points below which a difference is rounding noise (summation order)."""


def _sign(value: float) -> int:
    """1, -1 or 0 (level) for a difference of CuBE points.

    >>> _sign(2.5), _sign(-1e-13), _sign(0.0)
    (1, 0, 0)
    """
    return 0 if abs(value) < _LEVEL else (1 if value > 0 else -1)


def _agreement(c: PairedComparison, sign: int) -> str:
    """Whether each judge puts the same system ahead as the jury does."""
    n = len(c.judges)
    if n == 1:
        return "one judge"
    ahead = {1: c.first, -1: c.second}
    values = [c.per_judge[j].difference for j in c.judges]
    if sign == 0 and all(v is not None and _sign(v) == 0 for v in values):
        return "no judge sees a difference"
    dissent = []
    for judge in c.judges:
        d = c.per_judge[judge].difference
        s = 0 if d is None else _sign(d)
        if s != sign or sign == 0:
            if d is None:
                dissent.append(f"{judge} has no figure")
            elif s == 0:
                dissent.append(f"{judge} sees no difference")
            else:
                dissent.append(f"{judge} puts {ahead[s]} ahead")
    if not dissent:
        return "both judges agree" if n == 2 else f"all {n} judges agree"
    return f"{n - len(dissent)} of {n} judges agree ({'; '.join(dissent)})"


def comparison_sentence(c: PairedComparison, *, confidence: float = 0.95) -> str:
    """The comparison of two systems in one plain sentence.

    The interval is turned to the direction of the sentence (the system ahead
    first). When it covers 0 the difference is said to be not resolved.

    >>> from cube_ray.aggregate import FigureInterval, JudgeDifference
    >>> def judge(d):
    ...     return JudgeDifference(difference=d, interval=FigureInterval.of(0, 1))
    >>> c = PairedComparison(first="bm25", second="hybrid", difference=-3.1,
    ...     interval=FigureInterval.of(-5.4, -0.8), n_defined=1000,
    ...     n_questions=1262, judges=["a", "b"],
    ...     per_judge={"a": judge(-2.0), "b": judge(-4.2)})
    >>> print(comparison_sentence(c))  # doctest: +NORMALIZE_WHITESPACE
    hybrid is ahead of bm25 by 3.1 points, 95 % interval [0.8, 5.4],
    on the 1,262 shared questions; both judges agree
    >>> c = c.model_copy(update={"interval": FigureInterval.of(-5.4, 0.8),
    ...     "per_judge": {"a": judge(-2.0), "b": judge(1.0)}})
    >>> print(comparison_sentence(c))  # doctest: +NORMALIZE_WHITESPACE
    The difference between hybrid and bm25 is not resolved: hybrid is ahead by
    3.1 points, but the 95 % interval [-0.8, 5.4] includes 0, on the 1,262
    shared questions; 1 of 2 judges agree (b puts bm25 ahead)
    >>> c = c.model_copy(update={"difference": 0.0, "interval": FigureInterval.of(
    ...     0.0, 0.0), "per_judge": {"a": judge(0.0), "b": judge(0.0)}})
    >>> print(comparison_sentence(c))  # doctest: +NORMALIZE_WHITESPACE
    bm25 and hybrid are identical on every question: 0.0 points apart in every
    resample (95 % interval [0.0, 0.0]), on the 1,262 shared questions; no judge
    sees a difference
    """
    if c.difference is None:
        why = c.reason.text if c.reason is not None else "one CuBE is undefined"
        return f"{c.first} and {c.second} are not compared: {why}"
    sign = _sign(c.difference)
    ahead, behind = (c.second, c.first) if sign < 0 else (c.first, c.second)
    low, high = c.interval.low, c.interval.high
    if sign < 0 and low is not None and high is not None:
        low, high = -high, -low
    level = f"{confidence:.0%}".replace("%", " %")
    on = f"on the {c.n_questions:,} shared questions; {_agreement(c, sign)}"
    if low is None or high is None:
        return (
            f"{ahead} is ahead of {behind} by {_points(abs(c.difference))} points, "
            f"with no interval (too few defined resamples), {on}"
        )
    span = f"[{_points(low)}, {_points(high)}]"
    if sign == 0 and _sign(low) == 0 and _sign(high) == 0:
        return (
            f"{c.first} and {c.second} are identical on every question: 0.0 points "
            f"apart in every resample ({level} interval {span}), {on}"
        )
    if sign != 0 and low > 0:
        return (
            f"{ahead} is ahead of {behind} by {_points(abs(c.difference))} points, "
            f"{level} interval {span}, {on}"
        )
    lead = (
        f"{ahead} is ahead by {_points(abs(c.difference))} points, but"
        if sign != 0
        else "they are level, and"
    )
    return (
        f"The difference between {ahead} and {behind} is not resolved: {lead} the "
        f"{level} interval {span} includes 0, {on}"
    )


def _judge_cell(c: PairedComparison, judge: str) -> str:
    cell = c.per_judge.get(judge)
    if cell is None:
        return "not used"
    return f"{fmt(cell.difference, 2)} {interval_text(cell.interval, 2)}"


def comparison_rows(
    comparisons: Sequence[PairedComparison], judges: Sequence[str]
) -> list[list[str]]:
    """Table rows: the pair, the difference, its interval, questions, each judge."""
    rows = []
    for c in comparisons:
        resolved = (
            c.interval.low is not None
            and c.interval.high is not None
            and (c.interval.low > 0 or c.interval.high < 0)
        )
        rows.append(
            [
                c.first,
                c.second,
                fmt(c.difference, 2),
                interval_text(c.interval, 2),
                "yes" if resolved else "no",
                f"{c.n_questions:,}",
                str(c.n_defined),
                *(_judge_cell(c, j) for j in judges),
            ]
        )
    return rows


def comparison_table(
    comparisons: Sequence[PairedComparison],
    *,
    method: str,
    confidence: float,
    anchor: str,
) -> Table:
    """The table of :func:`comparison_rows`, every judge of any pair a column."""
    judges = sorted({j for c in comparisons for j in c.judges})
    level = f"{confidence:.0%}".replace("%", " %")
    return Table(
        [
            "first",
            "second",
            "difference (first − second)",
            f"{level} interval",
            "resolved",
            "shared questions",
            "defined resamples",
            *(f"{j}: difference [interval]" for j in judges),
        ],
        comparison_rows(comparisons, judges),
        caption=f"CuBE of the first system minus the second, in points "
        f"({SCALE_100}); interval "
        f"by {interval_method(method)} over the shared questions, paired (the same "
        "questions for both in every resample)",
        anchor=anchor,
        numeric=frozenset({2, 3, 5, 6}),
    )


def paired_section(run: RunData) -> Section | None:
    """The report's section of the paired differences; None with < 2 systems."""
    iv = run.intervals
    if len(run.systems) < 2:
        return None
    sec = Section("paired", "Systems compared on the same questions")
    if iv is None or not iv.comparisons:
        sec.blocks.append(
            Para(
                "No paired comparison: it needs the bootstrap's resamples (the "
                "summary records no interval, or answers/ and scores/ are missing).",
                "warn",
            )
        )
        return sec
    for c in iv.comparisons:
        sec.blocks.append(
            Para(comparison_sentence(c, confidence=iv.confidence) + ".", "text")
        )
    sec.blocks.append(
        comparison_table(
            iv.comparisons,
            method=iv.method,
            confidence=iv.confidence,
            anchor="paired-table",
        )
    )
    sec.blocks.append(Para(PAIRED_NOTE, "note"))
    return sec


def headline_verdicts(run: RunData) -> list[Para]:
    """The headline's verdict: one sentence per pair of systems, with its interval.

    Shown under the cards, so who is ahead is read on the first screen (the
    section :func:`paired_section` holds the table and the judges' figures).
    """
    iv = run.intervals
    if iv is None or len(run.systems) < 2:
        return []
    return [
        Para(
            f"Compared: {comparison_sentence(c, confidence=iv.confidence)}.", "verdict"
        )
        for c in iv.comparisons
    ]


def compared_lines(run: RunData) -> list[str]:
    """The console's ``compared:`` lines, one per pair of systems."""
    iv = run.intervals
    if iv is None:
        return []
    return [
        f"compared: {comparison_sentence(c, confidence=iv.confidence)}"
        for c in iv.comparisons
    ]
