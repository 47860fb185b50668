"""The run's ``--human`` audit: its summary calibrated (CUBE_METHOD.md §13).

After the summary, the run reads its tables once more (keys and scores only,
the rows the summary used: current input, in the planned sample) and adds
each judge's CuBE calibrated against the human scores
(:func:`cube_ray.aggregate.with_calibration`), exactly as
``cube-ray aggregate RUN_DIR --human FILE`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cube_ray.pipeline.method import ANSWERS, SCORES
from cube_ray.pipeline.summary import current_rows

if TYPE_CHECKING:
    from cube_ray.aggregate import Summary
    from cube_ray.config import RunConfig

__all__ = ["calibrate_run"]


def calibrate_run(
    config: RunConfig, run_dir: Path, summary: Summary, human: Path
) -> Summary:
    """``summary`` with the ``calibrated`` and ``calibration`` blocks.

    The resamples and seed are those of the summary's own intervals (1000
    and 0 when it has none); the interval is the calibration's own
    (:data:`cube_ray.aggregate._calibrated.CALIBRATED_INTERVAL`).

    Raises:
        InputError: The human file does not read, or names answers or
            dimensions the run does not have.
    """
    # lazy: loads cube_ray.aggregate (scipy, polars), not in the Ray stage workers
    from cube_ray.aggregate import with_calibration
    from cube_ray.report import read_human_ratings
    from cube_ray.sample import in_run_sample, load_strata
    from cube_ray.tables import read_answers, read_scores

    ratings = read_human_ratings(human)
    answers = read_answers(str(run_dir / ANSWERS), lean=True)
    scores = read_scores(str(run_dir / SCORES), lean=True)
    answers, scores = current_rows(config, run_dir, answers, scores)
    answers, scores, _ = in_run_sample(run_dir, answers, scores)
    iv = summary.intervals
    return with_calibration(
        summary,
        answers,
        scores,
        ratings,
        n_resamples=iv.n_resamples if iv is not None else 1000,
        seed=iv.seed if iv is not None else 0,
        strata=load_strata(run_dir),
        source=str(human),
    )
