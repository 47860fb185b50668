"""Build the report of one run: the sections in order, the files, the headline.

The report only formats: every figure comes from ``summary.json`` (read as
:class:`cube_ray.aggregate.Summary`), including the headline's bootstrap
intervals; only when asked for other intervals than the summary records (or
when it records none) does it have :func:`cube_ray.aggregate.headline_intervals`
compute them from the run's tables.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cube_ray import __version__, schema
from cube_ray.aggregate import (
    DEFAULT_INTERVAL,
    DEFAULT_RESAMPLES,
    IntervalMethod,
    Intervals,
    check_method,
    headline_intervals,
)
from cube_ray.credentials import recorded_secrets, redact_all
from cube_ray.files import write_atomic
from cube_ray.manifest import Manifest
from cube_ray.report._calibrated import calibrated_lines, calibrated_section
from cube_ray.report._cases import (
    agreement_section,
    baselines_section,
    details_section,
    disagreements,
    humans_section,
    judges_agreement,
    worst_section,
)
from cube_ray.report._data import RunData, load_run
from cube_ray.report._deps import require_report_deps
from cube_ray.report._glossary import with_glossary
from cube_ray.report._headline import console_lines, headline_section
from cube_ray.report._paired import compared_lines, paired_section
from cube_ray.report._qualification import qualification_section
from cube_ray.report._render import Para, Section, render_html, render_markdown
from cube_ray.report._sections import (
    bounds_section,
    distributions_section,
    per_judge_section,
    retrieval_section,
    variants_section,
)
from cube_ray.report._words import SAME_JUDGES, interval_method, plural
from cube_ray.sample import load_strata

__all__ = ["ReportPaths", "build_sections", "resolve_intervals", "write_report"]


@dataclass(frozen=True)
class ReportPaths:
    """Files written by :func:`write_report`, and the headline for the console."""

    html: Path
    markdown: Path
    headline: tuple[str, ...] = ()
    """:func:`console_lines` with the intervals the report shows."""
    compared: tuple[str, ...] = ()
    """Its ``compared:`` lines, one per pair of systems (also in ``headline``)."""
    calibrated: tuple[str, ...] = ()
    """Its ``calibrated:`` lines with a human audit (also in ``headline``)."""


def resolve_intervals(
    run: RunData,
    *,
    n_resamples: int | None = None,
    seed: int | None = None,
    interval: IntervalMethod | None = None,
) -> Intervals | None:
    """The intervals to show: the summary's, unless others are asked for.

    A ``None`` argument means "as the summary records it" (or the default when
    it records no interval). Intervals the summary does not hold are computed
    from the run's tables by :func:`cube_ray.aggregate.headline_intervals`;
    without tables there are none. ``n_resamples=0`` shows none.

    Raises:
        InputError: The summary does not match the tables beside it.
    """
    recorded = run.summary.intervals
    want_b = n_resamples
    if want_b is None:
        want_b = recorded.n_resamples if recorded is not None else DEFAULT_RESAMPLES
    want_seed = seed if seed is not None else (recorded.seed if recorded else 0)
    want_method = check_method(
        interval or (recorded.method if recorded else DEFAULT_INTERVAL)
    )
    if want_b <= 0:
        return None
    # A summary written before paired comparisons has none for its systems.
    paired = len(run.systems) < 2 or bool(recorded and recorded.comparisons)
    if (
        recorded is not None
        and paired
        and (recorded.n_resamples, recorded.seed, recorded.method)
        == (want_b, want_seed, want_method)
    ):
        return recorded
    if run.answers is None or run.scores is None or not run.systems:
        return recorded
    return headline_intervals(
        run.answers,
        run.scores,
        run.summary,
        n_resamples=want_b,
        seed=want_seed,
        method=want_method,
        strata=load_strata(run.run_dir),  # section 11: within strata
    )


def secret_notes(manifest: Manifest | None) -> list[str]:
    """What the report says when a secret was masked in the run's tables.

    >>> m = Manifest(secrets_redacted={"answers": {"rag": 2}})
    >>> secret_notes(m)[0][:65]
    'The system rag echoed a secret that cube_ray holds (a key it read'
    >>> secret_notes(Manifest(secrets_redacted={"scores": {"rag": 1}}))[0][:40]
    'A judge echoed a secret that cube_ray ho'
    >>> secret_notes(None), secret_notes(Manifest())
    ([], [])
    """
    found = manifest.secrets_redacted if manifest is not None else {}
    notes: list[str] = []
    after = (
        "; it is stored as *** in every file of the run (answers, scores, this "
        "report). Check that system: a service that returns its credentials "
        "may return them to any user"
    )
    for table, by_system in sorted(found.items()):
        for system, cells in sorted(by_system.items()):
            times = plural(int(cells), "time")
            if table == "answers":
                notes.append(
                    f"The system {system} echoed a secret that cube_ray holds (a "
                    f"key it read from the environment) {times} in its answers" + after
                )
            else:
                about = f" judging {system}" if system else ""
                notes.append(
                    f"A judge echoed a secret that cube_ray holds (a key it read "
                    f"from the environment) {times} in its replies{about} ({table})"
                    + after.replace("Check that system", "Check that judge")
                )
    return notes


def build_sections(
    run: RunData,
    *,
    human_ratings: str | Path | None = None,
    baselines: bool = False,
) -> list[Section]:
    """All sections of the report of one run, in order (``run.intervals`` set)."""
    notes: list[Para] = []
    tables = run.answers is not None and run.scores is not None
    if not tables:
        notes.append(
            Para(
                "answers/ or scores/ is missing: no plots of scores, agreement or "
                "worst cases"
                + ("" if run.intervals else ", and no bootstrap interval")
                + ".",
                "warn",
            )
        )
    # The jury's disagreement is said in the headline too, not only below.
    agreement = judges_agreement(run)
    notes.extend(Para(w, "warn") for w in disagreements(agreement))
    notes.extend(Para(w, "warn") for w in secret_notes(run.manifest))
    sections = [headline_section(run, notes)]
    for part in (
        paired_section(run),
        per_judge_section(run),
        distributions_section(run),
        retrieval_section(run),
        bounds_section(run) if run.judges and run.systems else None,
        qualification_section(run),
        variants_section(run),
        agreement_section(run, agreement),
        humans_section(run, human_ratings) if human_ratings is not None else None,
        calibrated_section(run),
        baselines_section(run) if baselines else None,
        worst_section(run),
    ):
        if part is not None:
            sections.append(part)
    iv = run.intervals
    meta = (
        f"{iv.n_resamples} resamples of the {iv.resampling}, seed {iv.seed}, "
        f"{interval_method(iv.method)} interval, {SAME_JUDGES}"
        if iv is not None
        else "not computed"
    )
    sections.append(details_section(run, meta))
    return sections


def _meta(run: RunData) -> list[str]:
    n_q = (
        run.answers.get_column(schema.QUESTION_ID).n_unique()
        if run.answers is not None
        else None
    )
    return [
        f"Run {run.name} · {plural(len(run.systems), 'system')} · "
        f"{plural(len(run.judges), 'judge')} · "
        f"{plural(len(run.dimensions), 'dimension')}"
        + (f" · {plural(n_q, 'question')}" if n_q is not None else ""),
        "Generated " + dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    ]


def write_report(
    run_dir: str | Path,
    *,
    out_dir: str | Path | None = None,
    human_ratings: str | Path | None = None,
    baselines: bool = False,
    n_resamples: int | None = None,
    seed: int | None = None,
    interval: IntervalMethod | None = None,
) -> ReportPaths:
    """Write ``report.html`` and ``report.md`` for a run directory.

    Args:
        run_dir: The run directory (``summary.json`` required; ``answers/``,
            ``scores/``, ``questions/``, ``documents/`` used when present).
        out_dir: Where to write; default ``run_dir``.
        human_ratings: A CSV of human scores
            (``question_id,system,dimension,score[,rater]``).
        baselines: Add character-level BLEU / ROUGE-L against the full answers.
        n_resamples: Bootstrap resamples; None: as the summary records (0: no
            interval). See :func:`resolve_intervals`.
        seed: Bootstrap seed; None: as recorded.
        interval: ``bca`` or ``percentile``; None: as recorded.

    Returns:
        The paths written.

    Raises:
        InputError: The run directory or the ratings file is invalid.
    """
    require_report_deps()
    run = load_run(run_dir)
    run.intervals = resolve_intervals(
        run, n_resamples=n_resamples, seed=seed, interval=interval
    )
    sections = with_glossary(
        build_sections(run, human_ratings=human_ratings, baselines=baselines)
    )
    out = Path(out_dir) if out_dir is not None else run.run_dir
    out.mkdir(parents=True, exist_ok=True)
    title = f"CuBE report — {run.name}"
    footer = f"cube-ray {__version__} · CuBE: Customizable Bounds Evaluation"
    meta = _meta(run)
    paths = ReportPaths(
        out / "report.html",
        out / "report.md",
        tuple(console_lines(run)),
        tuple(compared_lines(run)),
        tuple(calibrated_lines(run.summary)),
    )
    # Renamed into place: a full disk leaves the previous report, and a
    # report.html that is a symlink is replaced, its target never written.
    # A belt: the tables hold no secret (masked as they were written), nor
    # should anything the report shows.
    secrets = recorded_secrets(run.manifest.config if run.manifest else None)
    write_atomic(
        paths.html,
        redact_all(
            render_html(title=title, meta=meta, sections=sections, footer=footer),
            secrets,
        ),
    )
    write_atomic(
        paths.markdown,
        redact_all(
            render_markdown(title=title, meta=meta, sections=sections, footer=footer),
            secrets,
        ),
    )
    return paths
