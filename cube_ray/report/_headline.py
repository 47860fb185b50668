"""The headline: the console's lines and the report's first section."""

from __future__ import annotations

from dataclasses import dataclass

from cube_ray.aggregate import (
    MISSES_FAULTS,
    WEIGHTED,
    WithoutOwnModel,
    incomplete_reasons,
)
from cube_ray.report import _plots
from cube_ray.report._calibrated import calibrated_lines
from cube_ray.report._data import CUBE, RunData, num
from cube_ray.report._format import (
    NO_VERDICT,
    deterministic_jury_line,
    fmt,
    interval_text,
    jury_names,
    jury_sentence,
    left_out,
    short_reason,
)
from cube_ray.report._paired import compared_lines, headline_verdicts
from cube_ray.report._render import Figure, HeadlineCard, Para, Section, Table
from cube_ray.report._words import (
    SAME_JUDGES,
    SCALE_100,
    beyond_bounds,
    interval_method,
    mean_sd,
    no_interval_why,
    resamples_with_cube,
    spread_text,
)
from cube_ray.sample import describe_sample

__all__ = ["console_lines", "headline_section", "own_model_text"]


def console_lines(run: RunData) -> list[str]:
    r"""The headline in a few lines for the console, at the end of ``cube-ray run``.

    Per system: the CuBE across the judges used with its bootstrap interval
    (``run.intervals``: the summary's, or the report's when it computed
    others) and SD, and recall@k; or the verdict that there is none. Then each
    judge left out, with the short reason, and the flags counted by kind.

    >>> import polars as pl
    >>> from pathlib import Path
    >>> from cube_ray.aggregate import AggregateOptions, summarize
    >>> answers = pl.DataFrame({"question_id": ["q1", "q2", "q3"] * 3,
    ...     "system": ["zero"] * 3 + ["full"] * 3 + ["rag"] * 3,
    ...     "rank": [None] * 6 + [1, 2, 0]})
    >>> scores = answers.select("question_id", "system").with_columns(
    ...     judge=pl.lit("j"), dimension=pl.lit("relevance"),
    ...     score=pl.Series([2.0, 4, 6, 8, 8, 8, 7, 6, 3]))
    >>> summary = summarize(answers, scores, options=AggregateOptions(k=3))
    >>> print("\n".join(console_lines(RunData(Path("runs/demo"), summary))))
    ... # doctest: +NORMALIZE_WHITESPACE
    rag: no verdict — no judge separates the bounds; no CuBE, recall@3 0.667
      left out: j: bounds not separated (gap 4.00 points, p = 1.000)
    flags: bounds not separated ×2 (summary.json; the report explains each)

    Keeping the unseparated judge, and with the summary's intervals:

    >>> from cube_ray.aggregate import with_intervals
    >>> kept = summarize(answers, scores,
    ...                  options=AggregateOptions(k=3, require_separation=False))
    >>> run = RunData(Path("runs/demo"), kept)
    >>> print(console_lines(run)[0])  # doctest: +NORMALIZE_WHITESPACE
    rag: CuBE 41.67, no interval (summary.json has none)
      (1 of 1 judges: j; one judge, so no SD), recall@3 0.667
    >>> run = RunData(Path("runs/demo"), with_intervals(kept, answers, scores,
    ...               n_resamples=50, method="percentile"))
    >>> console_lines(run)[0].split(" (")[0]
    'rag: CuBE 41.67, 95% CI [8.33, 83.33]'
    """
    lines = []
    for system in run.systems:
        recall = f"recall@{run.k_of(system)} {fmt(run.recall(system), 3)}"
        verdict = run.no_verdict(system)
        if verdict is not None:
            lines.append(f"{system}: {NO_VERDICT} — {verdict.text}; no CuBE, {recall}")
        else:
            mean, sd = run.figure(system, CUBE)
            used = run.headline_judges(system)
            jury = f"{len(used)} of {len(run.judges)} judges: {jury_names(run, used)}"
            iv = run.intervals
            cell = iv.systems.get(system) if iv is not None else None
            ci = (
                f"{iv.confidence:.0%} CI {interval_text(cell.cube, 2)}"
                if iv is not None and cell is not None
                else "no interval (summary.json has none)"
            )
            spread = f"SD {fmt(sd, 2)}" if len(used) != 1 else "one judge, so no SD"
            lines.append(
                f"{system}: CuBE {fmt(mean, 2)}, {ci} ({jury}; {spread}), {recall}"
            )
            if mean is not None and mean > 100:
                lines.append(
                    f"  above 100: {system}'s answers scored above the full bound "
                    "(answers written from the gold document alone)"
                )
            own = own_model_text(run, system)
            if own is not None:
                lines.append(f"  {own}")
        # Failed answers leave every judge out for the same reason, said above.
        failed = system in incomplete_reasons(run.summary)
        for judge, reason, why in [] if failed else left_out(run, system):
            missed = missed_faults(run, judge)
            lines.append(
                f"  left out: {judge}: {short_reason(reason, why, missed=missed)}"
            )
    deterministic = deterministic_jury_line(run)  # CUBE_METHOD.md section 12
    if deterministic is not None:
        lines.append(deterministic)
    lines.extend(compared_lines(run))  # one per pair of systems (issue 28)
    lines.extend(calibrated_lines(run.summary))  # with a human audit (--human)
    sample = _sample_text(run)
    if sample is not None:
        lines.append(f"sample: {sample}")
    if run.summary.flags:
        kinds: dict[str, int] = {}
        for flag in run.summary.flags:
            kinds[flag.flag] = kinds.get(flag.flag, 0) + 1
        counted = ", ".join(f"{k} ×{n}" for k, n in kinds.items())
        lines.append(f"flags: {counted} (summary.json; the report explains each)")
    return lines


def headline_section(run: RunData, notes: list[Para]) -> Section:
    """The first section: one card per system, the jury, the headline table."""
    sec = Section("headline", "Headline")
    cards = [_system_card(run, system) for system in run.systems]
    sec.blocks.extend(card.card for card in cards)
    sec.blocks.extend(headline_verdicts(run))  # who is ahead, under the cards
    sec.blocks.append(
        Para(
            "CuBE = normalised weighted score × recall@k, where the normalised score "
            "places the system between the zero bound (answers written without "
            "context, 0) and the full bound (answers written from the gold document "
            "alone, 100). Mean ± SD across the judges used; the interval resamples "
            f"the questions with {SAME_JUDGES}: it says how much the figure would "
            "move with another draw of questions like these, not with another jury.",
            "note",
        )
    )
    for system in run.systems:
        sec.blocks.extend(_system_notes(run, system))
    sample = _sample_text(run)
    if sample is not None:  # a planned sample (CUBE_METHOD.md section 11)
        sec.blocks.append(Para(f"Questions on a sample: {sample}.", "note"))
    sec.blocks.extend(notes)
    sec.blocks.extend(
        Para("Aggregation note: " + note, "note") for note in run.summary.notes
    )
    sec.blocks.extend(_headline_tables(cards))
    sec.blocks.append(_cube_figure(run))
    return sec


@dataclass(frozen=True)
class _SystemHeadline:
    """One system's card and its rows of the headline's tables."""

    card: HeadlineCard
    row: list[str]
    """Of the headline table."""
    jury_row: list[str]
    """Of the table of who the headline averages."""
    own_row: list[str] | None
    """Of the table without the own-model judges (None: no such judge)."""


def _system_card(run: RunData, system: str) -> _SystemHeadline:
    """A system's card: its CuBE, spread and interval, or why there is none."""
    iv = run.intervals
    verdict = run.no_verdict(system)
    mean, sd = run.figure(system, CUBE)
    wmean, wsd = run.figure(system, WEIGHTED)
    recall = run.recall(system)
    cell = iv.systems.get(system) if iv is not None else None
    ci = cell.cube if cell is not None and verdict is None else None
    k = run.k_of(system)
    used = run.headline_judges(system)
    own_row = None
    if verdict is not None:
        card = HeadlineCard(
            system=system,
            cube=NO_VERDICT,
            spread=verdict.text,
            interval="no interval: there is no figure to bound",
            details=[(f"recall@{k}", fmt(recall, 3)), ("judges used", "none")],
        )
        row = [system, NO_VERDICT, "n/a", "n/a", fmt(recall, 3), "n/a", "n/a"]
    else:
        details = [
            (f"recall@{k}", fmt(recall, 3)),
            ("weighted score (normalised)", mean_sd(wmean, wsd)),
            ("judges used", ", ".join(used) or "none"),
        ]
        own = _without_own_model(run, system)
        if own is not None:  # CUBE_METHOD.md section 12: beside the headline
            block, flagged = own
            details.append(
                (
                    f"CuBE without {', '.join(flagged)}",
                    f"{fmt(block.mean)} ± {fmt(block.sd)} SD across "
                    f"{block.n_judges} judges",
                )
            )
            own_row = [
                system,
                fmt(mean, 2),
                ", ".join(flagged),
                fmt(block.mean, 2),
                fmt(block.sd, 2),
                ", ".join(block.judges) or "none",
            ]
        if mean is not None and mean > 100:  # said where the number is shown
            details.append(("above 100", "scored above the full bound"))
        elif mean is not None and mean < 0:
            details.append(("below 0", "scored below the zero bound"))
        card = HeadlineCard(
            system=system,
            cube=fmt(mean),
            spread=spread_text(sd, len(used)),
            interval=f"95% bootstrap interval {interval_text(ci)}"
            if ci is not None and ci.low is not None
            else no_interval_why(iv, cell),
            details=details,
        )
        row = [
            system,
            fmt(mean, 2),
            fmt(sd, 2),
            interval_text(ci, 2),
            fmt(recall, 3),
            fmt(wmean, 2),
            fmt(wsd, 2),
        ]
    shown = iv is not None and cell is not None and verdict is None
    jury_row = [
        system,
        ", ".join(used) or "none",
        "; ".join(f"{j}: {why}" for j, _, why in left_out(run, system)) or "none",
        interval_method(iv.method) if shown and iv is not None else "none",
        resamples_with_cube(iv, cell)
        if shown and iv is not None and cell is not None
        else "none",
    ]
    return _SystemHeadline(card, row, jury_row, own_row)


def _system_notes(run: RunData, system: str) -> list[Para]:
    """Under the cards: a system's jury, a figure beyond its bounds, no interval."""
    out = [
        Para(
            jury_sentence(run, system),
            "warn" if run.no_verdict(system) or left_out(run, system) else "note",
        )
    ]
    beyond = (
        None
        if run.no_verdict(system)
        else beyond_bounds(system, [run.figure(system, CUBE)[0]])
    )
    if beyond is not None:
        out.append(Para(beyond, "warn"))
    iv = run.intervals
    cell = iv.systems.get(system) if iv is not None else None
    if not run.no_verdict(system) and (cell is None or cell.cube.low is None):
        out.append(Para(f"{system}: {no_interval_why(iv, cell)}.", "note"))
    return out


def _headline_tables(cards: list[_SystemHeadline]) -> list[Table]:
    """The headline table, the one without own-model judges, who is averaged."""
    tables = [
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
            [c.row for c in cards],
            caption=f"Headline figures ({SCALE_100}; recall@k a share of questions; "
            "no SD with one judge; from summary.json)",
            anchor="headline-table",
            numeric=frozenset(range(1, 7)),
        )
    ]
    own_rows = [c.own_row for c in cards if c.own_row is not None]
    if own_rows:
        tables.append(
            Table(
                [
                    "system",
                    "CuBE mean",
                    "judges of their own model",
                    "CuBE mean without them",
                    "SD without them",
                    "judges kept",
                ],
                own_rows,
                caption="The headline without the judges that score their own "
                "model's answers (judges prefer text their own model wrote; "
                "CUBE_METHOD.md section 12)",
                anchor="headline-own-model",
                numeric=frozenset({1, 3, 4}),
            )
        )
    tables.append(
        Table(
            [
                "system",
                "judges used (the same in every resample)",
                "judges left out",
                "interval",
                "resamples with a CuBE from every judge",
            ],
            [c.jury_row for c in cards],
            caption="Who the headline averages and how its interval was computed "
            "(the interval is read from the resamples in which every judge used "
            "has a CuBE)",
            anchor="headline-jury",
        )
    )
    return tables


def _cube_figure(run: RunData) -> Figure:
    """The bar chart of the jury's CuBE per system, one marker per judge."""
    iv = run.intervals
    # Only the judges of each headline get a marker: the others are in the
    # per-judge tables, not in the figure a reader takes as the result.
    per_judge = {
        j: {
            s: num(run.judge(j).cube.get(s)) if j in run.headline_judges(s) else None
            for s in run.systems
        }
        for j in run.judges
    }
    intervals: dict[str, tuple[float | None, float | None]] = {}
    for s in run.systems:
        cell = iv.systems.get(s) if iv is not None else None
        shown = cell is not None and not run.no_verdict(s)
        intervals[s] = (
            (cell.cube.low, cell.cube.high)
            if shown and cell is not None
            else (None, None)
        )
    return Figure(
        "fig-cube",
        "CuBE per system and judge",
        _plots.cube_chart(
            per_judge,
            {
                s: None if run.no_verdict(s) else run.figure(s, CUBE)[0]
                for s in run.systems
            },
            intervals,
            systems=run.systems,
            judges=run.judges,
        ),
        "Bar chart of the cross-judge mean CuBE per system with bootstrap "
        "intervals and one marker per judge.",
        "Bar: the jury's mean CuBE; whisker: its 95% bootstrap interval; "
        "markers: each judge's CuBE (0 = zero bound, 100 = full bound).",
    )


def _without_own_model(
    run: RunData, system: str
) -> tuple[WithoutOwnModel, list[str]] | None:
    """The summary's CuBE without the own-model judges, and those judges.

    None when the system has no verdict or no headline judge is flagged.
    """
    across = run.summary.across_judges.get(system)
    block = across.without_own_model if across is not None else None
    if block is None or run.no_verdict(system) is not None:
        return None
    flagged = [j for j in run.headline_judges(system) if j not in block.judges]
    return block, flagged


def own_model_text(run: RunData, system: str) -> str | None:
    """The console's line of the headline without the own-model judges.

    None when the summary has no such figure for ``system`` (no headline
    judge has the flag "judges its own model's answers", or no verdict).
    """
    own = _without_own_model(run, system)
    if own is None:
        return None
    block, flagged = own
    return (
        f"without {', '.join(flagged)} (judges its own model's answers): "
        f"CuBE {fmt(block.mean, 2)} ({block.n_judges} judges: "
        f"{', '.join(block.judges) or 'none'}; SD {fmt(block.sd, 2)})"
    )


def _sample_text(run: RunData) -> str | None:
    """The sample in words ("60 of 2,262 documents, …"); None without one."""
    block = run.summary.sample
    return describe_sample(block.model_dump(mode="json") if block else None)


def missed_faults(run: RunData, judge: str) -> list[str]:
    """``<kind> on <figure>`` of each "misses faults" flag of a judge, in order."""
    prefix = f"{MISSES_FAULTS}: "
    return [
        f.flag.removeprefix(prefix)
        for f in run.summary.flags
        if f.judge == judge and f.flag.startswith(prefix)
    ]
