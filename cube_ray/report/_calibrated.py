"""The report's "Checked against people" section (CUBE_METHOD.md section 13).

Per system, each judge's own CuBE, its CuBE calibrated by the human audit and
the people's CuBE on the audited questions alone, side by side with their
intervals, and one sentence per judge on what the audit changed and what it
was worth. Every number comes from the summary's ``calibrated`` and
``calibration`` blocks (:func:`cube_ray.aggregate.with_calibration`); this
module only formats.
"""

from __future__ import annotations

from pathlib import Path

from cube_ray.aggregate import CalibratedFigure, FigureInterval, Summary
from cube_ray.report._data import RunData
from cube_ray.report._format import fmt, interval_text
from cube_ray.report._render import Para, Section, Table
from cube_ray.report._words import SCALE_100

__all__ = ["audit_sentence", "calibrated_lines", "calibrated_section"]

JURY = "the jury (headline)"
"""Row label of the calibrated headline."""


def _signed(x: float) -> str:
    """``+1.2`` / ``−4.1`` (a true minus sign, as in running text).

    >>> _signed(-4.14), _signed(0.04)
    ('−4.1', '+0.0')
    """
    return f"{x:+.1f}".replace("-", "−")


def audit_sentence(name: str, system: str, fig: CalibratedFigure) -> str:
    """What the audit did to one figure, in plain words.

    >>> fig = CalibratedFigure.model_validate({
    ...     "cube": 48.0, "interval": FigureInterval.of(45.0, 51.0),
    ...     "n_labeled": 150, "lambda": 0.8, "human_only": 47.0,
    ...     "human_only_interval": FigureInterval.of(38.0, 56.0),
    ...     "judge_cube": 52.1, "gain": 12.7, "equivalent_labeled": 1905,
    ...     "n_defined": 1000})
    >>> print(audit_sentence("judge A", "rag", fig))  # doctest: +NORMALIZE_WHITESPACE
    An audit of 150 questions corrects judge A by −4.1 points on rag
    (52.1 → 48.0); the interval is as narrow as 1,905 human-scored
    questions would give.
    """
    n = f"{fig.n_labeled:,}"
    if fig.cube is None:
        return (
            f"{name} on {system}: the audit of {n} questions gives no calibrated "
            "figure (the people's scores leave the zero answers, the full answers "
            "or the system's answers without a score, or their bounds coincide)."
        )
    if fig.judge_cube is None:
        head = f"An audit of {n} questions puts {name} on {system} at {fig.cube:.1f}"
    else:
        head = (
            f"An audit of {n} questions corrects {name} by "
            f"{_signed(fig.cube - fig.judge_cube)} points on {system} "
            f"({fig.judge_cube:.1f} → {fig.cube:.1f})"
        )
    if fig.lambda_ == 0.0:
        return (
            head + f"; the scores of {name} did not make the people's figure any "
            "more precise, so the figure is the people's own."
        )
    if fig.equivalent_labeled is not None and fig.gain is not None:
        return (
            head + f"; the interval is as narrow as {fig.equivalent_labeled:,} "
            "human-scored questions would give."
        )
    return head + "."


def _own_interval(
    run: RunData, system: str, judge: str | None
) -> FigureInterval | None:
    iv = run.intervals
    if iv is None or system not in iv.systems:
        return None
    block = iv.systems[system]
    return block.cube if judge is None else block.per_judge.get(judge)


def _row(label: str, fig: CalibratedFigure, own: FigureInterval | None) -> list[str]:
    return [
        label,
        fmt(fig.judge_cube, 1),
        interval_text(own),
        fmt(fig.cube, 1),
        interval_text(fig.interval),
        fmt(fig.human_only, 1),
        interval_text(fig.human_only_interval),
        fmt(fig.lambda_, 2),
        "n/a" if fig.gain is None else f"{fig.gain:.1f}×",
    ]


def calibrated_section(run: RunData) -> Section | None:
    """Each judge's CuBE beside its calibrated and the people's own CuBE."""
    summary = run.summary
    block = summary.calibration
    if summary.calibrated is None or block is None:
        return None
    sec = Section("calibrated", "Checked against people")
    source = f" ({Path(block.source).name})" if block.source else ""
    sec.blocks.append(
        Para(
            f"People scored the answers of {block.n_labeled:,} questions{source}; "
            f"the other {block.n_unlabeled:,} questions were scored by the jury "
            "alone. The calibrated CuBE takes the people's CuBE on the audited "
            "questions and corrects it by how far each judge's CuBE on the other "
            "questions lies from its CuBE on the audited ones: it is on the "
            "people's scale, and its 95 % interval counts the uncertainty of "
            "both samples. The weight (0 to 1) says how much of that correction "
            "is used: 0 is the people's figure alone. The gain is how many times "
            "more human-scored questions the people's figure alone would need "
            "for an interval this narrow.",
            "note",
        )
    )
    for system in summary.systems:
        reason = block.reasons.get(system)
        if reason is not None:  # the people's bounds are not apart (section 10)
            sec.blocks.append(Para(reason.text, "warn"))
            continue
        rows: list[list[str]] = []
        sentences: list[str] = []
        for judge in summary.judge_names:
            fig = summary.calibrated.get(judge, {}).get(system)
            if fig is None:
                continue
            rows.append(_row(judge, fig, _own_interval(run, system, judge)))
            sentences.append(audit_sentence(judge, system, fig))
        jury = block.across_judges.get(system)
        if jury is not None:
            rows.append(_row(JURY, jury, _own_interval(run, system, None)))
            sentences.append(audit_sentence("the jury's headline", system, jury))
        if not rows:
            continue
        sec.blocks.append(
            Table(
                [
                    "scored by",
                    "own CuBE",
                    "95 % interval",
                    "calibrated CuBE",
                    "95 % interval",
                    "people only",
                    "95 % interval",
                    "weight",
                    "gain",
                ],
                rows,
                caption=f"{system}: own, calibrated and people-only CuBE ({SCALE_100})",
                anchor=f"calibrated-{system}",
                numeric=frozenset({1, 3, 5, 7, 8}),
            )
        )
        sec.blocks.extend(Para(text) for text in sentences)
    if block.raters:
        sec.blocks.append(
            Table(
                ["dimension", "raters", "answers rated twice or more", "alpha", "MAD"],
                [
                    [
                        r.dimension,
                        str(r.raters),
                        str(r.units),
                        fmt(r.alpha, 3),
                        fmt(r.mean_abs_difference, 2),
                    ]
                    for r in block.raters
                ],
                caption="The people's agreement: Krippendorff's alpha (interval "
                "metric; 1 is full agreement) and the mean absolute difference "
                "of two raters' scores of one answer (0-10). Their scores of an "
                "answer are averaged",
                anchor="calibrated-raters",
                numeric=frozenset({1, 2, 3, 4}),
            )
        )
    return sec


def calibrated_lines(summary: Summary) -> list[str]:
    """The console's ``calibrated:`` lines, when ``--human`` gave an audit.

    ``run``, ``aggregate`` and ``report`` print them. Per system, the
    headline calibrated by the human audit, with its interval, beside the
    jury's own figure; or why there is none. Empty without an audit.
    """
    block = summary.calibration
    if summary.calibrated is None or block is None:
        return []
    lines = []
    for system in summary.systems:
        reason = block.reasons.get(system)
        jury = block.across_judges.get(system)
        if reason is not None:
            lines.append(f"calibrated: {system}: {reason.text}")
        elif jury is None or jury.cube is None:
            judges = [
                f"{judge} {fig.cube:.1f} {interval_text(fig.interval)}"
                for judge in summary.judge_names
                if (fig := summary.calibrated.get(judge, {}).get(system)) is not None
                and fig.cube is not None
            ]
            each = f"; each judge's, calibrated: {', '.join(judges)}" if judges else ""
            lines.append(
                f"calibrated: {system}: no calibrated headline (no headline, or "
                f"the audit leaves its answers or bounds without a score){each}"
            )
        else:
            own = (
                ""
                if jury.judge_cube is None
                else f", the jury's own {jury.judge_cube:.1f}"
            )
            lines.append(
                f"calibrated: {system}: CuBE {jury.cube:.1f}, "
                f"{block.confidence:.0%} CI {interval_text(jury.interval)} on the "
                f"people's scale (audit of {block.n_labeled:,} questions{own}; "
                "the report's 'Checked against people')"
            )
    return lines
