"""The run's summary step: ``summary.json`` from the written tables.

Shared by ``run_pipeline`` (as a Ray task beside the driver) and ``cube-ray
aggregate RUN_DIR``, so both write the same summary of the same rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from cube_ray import schema
from cube_ray.config import RunConfig
from cube_ray.errors import CubeRayError
from cube_ray.pipeline.method import ANSWERS, DOCUMENTS, QUESTIONS, SCORES
from cube_ray.pipeline.parts import part_files
from cube_ray.pipeline.qualify import qualification_input
from cube_ray.pipeline.retrieval_check import current_question_ids
from cube_ray.qualification import own_model_flags

if TYPE_CHECKING:
    from cube_ray.aggregate import AggregateOptions, Summary

__all__ = ["current_rows", "summarize_run", "summarize_tables"]


def _summarize_task(
    config: RunConfig, run_dir: Path, intervals: bool
) -> tuple[Summary | None, CubeRayError | None]:
    try:
        return summarize_run(config, run_dir, intervals=intervals), None
    except CubeRayError as exc:  # returned, so the driver shows it without a
        return None, exc  # remote traceback


def _summarize_beside_driver(
    config: RunConfig, run_dir: Path, *, intervals: bool
) -> Summary | None:
    """The aggregation as a Ray task on the driver's node.

    The run dir is on the driver's machine, so the task runs there, but in its
    own worker process: the driver never holds a whole table, and the
    aggregation's memory (about 27 bytes a score row, see docs/pipeline.md) is
    returned when it ends.
    """
    # heavy: ray, imported only where this code uses it
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(
        ray.get_runtime_context().get_node_id(), soft=False
    )
    task = ray.remote(_summarize_task).options(
        num_cpus=config.ray.task_num_cpus, max_retries=1, scheduling_strategy=here
    )
    summary, error = ray.get(task.remote(config, run_dir, intervals))
    if error is not None:
        raise error
    return summary


def summarize_run(
    config: RunConfig, run_dir: Path, *, intervals: bool = True
) -> Summary | None:
    """Aggregate the written tables into the summary (None if unavailable).

    With ``intervals`` also the headline's bootstrap intervals
    (``summary.intervals``, 1000 resamples), which the report and the console
    only show; a run without a report skips them, as before (the bootstrap of
    a million-question run is long).
    """
    try:
        # lazy: loads cube_ray.aggregate (scipy, polars), not in the Ray stage workers
        from cube_ray.aggregate import with_intervals
        from cube_ray.sample import load_strata
        from cube_ray.tables import read_answers, read_scores
    except ImportError:
        return None
    options = config.aggregate.options(
        system_k={s.name: s.k for s in config.systems},
        dimension_weights={d.name: d.weight for d in config.dimensions},
    )
    # Lean: keys, ranks, scores and statuses only; no texts on the driver.
    answers = read_answers(str(run_dir / ANSWERS), lean=True)
    scores = read_scores(str(run_dir / SCORES), lean=True)
    summary, answers, scores = summarize_tables(
        run_dir, answers, scores, options=options, config=config
    )
    if not intervals:
        return summary
    # Intervals follow the design (section 11): within strata for a sample.
    return with_intervals(summary, answers, scores, strata=load_strata(run_dir))


def summarize_tables(
    run_dir: Path,
    answers: Any,
    scores: Any,
    *,
    options: AggregateOptions,
    config: RunConfig | None,
    sources: dict[str, str] | None = None,
) -> tuple[Summary, Any, Any]:
    """The summary of a run dir's tables as the run computes it.

    Shared by the run and ``cube-ray aggregate RUN_DIR`` (with the run's config
    from ``manifest.json``), so both write the same summary: the current
    rows only, the planned sample (section 11), and with the config the
    qualification blocks and the "judges its own model's answers" flags
    (section 12). Without a config (its manifest no longer validates) the
    last two are left out.

    Returns:
        The summary, and the answers and scores it used (for the intervals).
    """
    # lazy: loads cube_ray.aggregate (scipy, polars), not in the Ray stage workers
    from cube_ray.aggregate import summarize
    from cube_ray.sample import in_run_sample

    qualification = None
    own: list[dict[str, Any]] = []
    if config is not None:
        answers, scores = current_rows(config, run_dir, answers, scores)
        qualification = qualification_input(run_dir, config)
        # A judge of the generator's or a system's declared model.
        own = own_model_flags(
            config.judges, config.generator, {s.name: s.model for s in config.systems}
        )
    answers, scores, sample = in_run_sample(run_dir, answers, scores)
    summary = summarize(
        answers,
        scores,
        options=options,
        sources=sources,
        sample=sample,
        qualification=qualification,
        own_model=own,
    )
    return summary, answers, scores


def current_rows(config: RunConfig, run_dir: Path, answers: Any, scores: Any) -> Any:
    """The answer and score rows of the current input only.

    A run dir updated in place (``--update``), or run with a smaller
    ``--limit``, keeps rows of documents, systems, judges and dimensions the
    config no longer has; they never reach the summary. The current questions
    are those of the questions table whose gold document is in the documents
    table (which always holds exactly the current corpus).
    """
    # lazy: loads polars, not in the Ray stage workers
    import polars as pl

    ids = current_question_ids(
        part_files(run_dir / DOCUMENTS), part_files(run_dir / QUESTIONS)
    )
    if ids is None:
        return answers, scores  # not a pipeline run dir: nothing to compare
    current = pl.Series(ids.to_pylist(), dtype=pl.String)
    systems = [*schema.BOUND_SYSTEMS, *(s.name for s in config.systems)]
    answers = answers.filter(
        pl.col(schema.QUESTION_ID).is_in(current.implode())
        & pl.col(schema.SYSTEM).is_in(systems)
    )
    scores = scores.filter(
        pl.col(schema.QUESTION_ID).is_in(current.implode())
        & pl.col(schema.SYSTEM).is_in(systems)
        & pl.col(schema.JUDGE).is_in(list(config.judges))
        & pl.col(schema.DIMENSION).is_in([d.name for d in config.dimensions])
    )
    return answers, scores
