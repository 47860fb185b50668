"""``summarize``: the whole CuBE aggregation of answers + scores into summary.json.

:func:`summarize` is the method's steps in order (sections 3 to 12), each a
function of the explicit, frozen state it reads:

1. :class:`~cube_ray.aggregate._frames.Inputs` and
   :func:`~cube_ray.aggregate._frames.answer_frames` (``_frames``): the
   tables, the ranked answers of the systems under test, outages;
2. :func:`~cube_ray.aggregate._passes.score_passes` (``_passes``): the grouped
   passes over the score rows, checked; with the inputs and answers, the
   :class:`~cube_ray.aggregate._passes.Study` every later step reads;
3. ``_figures``: weights, weighted totals, normalisation, CuBE: replicate
   zero of the kernel that computes the bootstrap's replicates;
4. ``_judge_separation``: which judges separate the bounds;
5. ``_assemble``: the summary's blocks from those frames.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from cube_ray.aggregate import _assemble, _figures, _judge_separation
from cube_ray.aggregate._frames import (
    DEGENERATE,
    MIN_SPAN,
    NO_SEPARATED_JUDGE,
    OUTSIDE,
    UNAVAILABLE,
    WEIGHTED,
    Inputs,
    answer_frames,
    sorted_flags,
)
from cube_ray.aggregate._model import SCHEMA_VERSION, Sample, Summary
from cube_ray.aggregate._passes import Study, score_passes
from cube_ray.aggregate._qualification import (
    QualificationInput,
    QualificationResult,
    qualify,
)
from cube_ray.config import AggregateOptions

__all__ = [
    "DEGENERATE",
    "NO_SEPARATED_JUDGE",
    "OUTSIDE",
    "UNAVAILABLE",
    "WEIGHTED",
    "summarize",
]


def summarize(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    options: AggregateOptions,
    sources: Mapping[str, str] | None = None,
    sample: Mapping[str, Any] | None = None,
    qualification: QualificationInput | None = None,
    own_model: Sequence[Mapping[str, Any]] = (),
) -> Summary:
    """Aggregate an answers and a scores table into the summary (summary.json).

    Key columns (``question_id``, ``system``, ``judge``, ``dimension``,
    ``status``) may be String, Categorical or Enum; ``question_id`` may also be
    an integer. Categorical keys make very large studies faster. The tables
    are expected to be validated already (see :mod:`cube_ray.tables`); this
    function re-checks only what it can check cheaply. Question ids must be
    unique per system (give bootstrap resamples fresh ids).

    Args:
        answers: Answers table (CUBE_METHOD.md section 9); ``rag`` rows need
            ``rank``; ``retrieved_doc_ids`` is optional (only-document bonus).
        scores: Scores table; a null ``score`` is a missing score.
        options: k, trim, weights and bounds.
        sources: Where the tables came from (``{"answers": path, "scores":
            path}``), named in error messages.
        sample: The run's ``sample`` block (``cube_ray.sample.sample_block``),
            copied into the summary as ``sample``.
        qualification: The run's faulted answers and their scores (CUBE_METHOD.md
            section 12): adds ``judges.<judge>.qualification``, the "misses
            faults" flags, and with ``require_qualification`` leaves judges
            that miss an expected kind on the weighted total out of
            ``across_judges``.
        own_model: The run's "judges its own model's answers" flags
            (:func:`cube_ray.qualification.own_model_flags`, CUBE_METHOD.md
            section 12): added to ``flags``; each system whose headline
            averages such a judge gets ``across_judges.<system>.
            without_own_model``, the CuBE without it.

    Returns:
        The typed summary (undefined figures are None): ``judges.<judge>.
        {weights, trimmed_means, normalized, recall_at_k, cube, ...}``,
        ``across_judges.<system>.<figure>.{mean, sd, n_judges}``, ``flags``,
        ``notes``, ``parameters`` and ``counts``; no ``intervals`` (see
        :func:`cube_ray.aggregate.headline_intervals`).

    Raises:
        InputError: The tables do not allow the aggregation.
        ConfigError: The options do not fit the data (``WeightsError`` for
            weights).

    Examples:
        Three questions, one judge, one dimension, no trimming. zero scores 2, 4,
        6 (mean 4); full scores 8, 8, 8 (mean 8); the system retrieves the gold
        document of the first two questions at ranks 1 and 2 and scores 7 and 6
        there (mean 6.5). Normalised: 100 * (6.5 - 4) / (8 - 4) = 62.5;
        recall@k = 2/3; CuBE = 62.5 * 2/3.

        >>> answers = pl.DataFrame(
        ...     {
        ...         "question_id": ["q1", "q2", "q3"] * 3,
        ...         "system": ["zero"] * 3 + ["full"] * 3 + ["rag"] * 3,
        ...         "rank": [None] * 6 + [1, 2, 0],
        ...     }
        ... )
        >>> scores = answers.select("question_id", "system").with_columns(
        ...     judge=pl.lit("j"),
        ...     dimension=pl.lit("relevance"),
        ...     score=pl.Series([2.0, 4, 6, 8, 8, 8, 7, 6, 3]),
        ...     status=pl.lit("ok"),
        ... )
        >>> out = summarize(answers, scores, options=AggregateOptions(trim=0.0))
        >>> tm = out.judges["j"].trimmed_means["rag"]
        >>> [(s, v["relevance"], v["weighted"]) for s, v in tm.items()]
        [('zero', 4.0, 4.0), ('full', 8.0, 8.0), ('rag', 6.5, 6.5)]
        >>> out.judges["j"].normalized["rag"]
        {'relevance': 62.5, 'weighted': 62.5}
        >>> out.judges["j"].recall_at_k["rag"], out.judges["j"].cube["rag"]
        (0.6666666666666666, 41.666666666666664)
    """
    inputs = Inputs.of(answers, scores, options, sources or {})
    out = _aggregate(inputs, qualification, [dict(f) for f in own_model])
    if sample is None:
        return out
    return out.model_copy(update={"sample": Sample.model_validate(dict(sample))})


def _aggregate(
    inputs: Inputs,
    qualification: QualificationInput | None,
    own_model: Sequence[Mapping[str, Any]],
) -> Summary:
    """The method's steps in order; each reads the state the ones before built."""
    answers = answer_frames(inputs)
    study = Study(inputs, answers, score_passes(inputs, answers))
    weights, figs = _figures.study_figures(study)
    tests = _judge_separation.separation(study, weights.frame, figs.wide)
    separated_judges = _judge_separation.used_judges(study, tests)
    qual = _qualify(study, qualification)
    used = separated_judges
    if qual is not None and study.options.require_qualification:
        out_of_it = qual.unqualified | qual.uncertified | qual.untested
        used = {s: [j for j in js if j not in out_of_it] for s, js in used.items()}
    across = _figures.across_judges(figs, used)
    judges, normalized_flags = _assemble.judge_blocks(study, weights.frame, figs, tests)
    flags = [
        *own_model,
        *weights.flags,
        *(qual.flags if qual is not None else ()),
        *normalized_flags,
        *_judge_separation.separation_flags(study, tests),
    ]
    out = Summary.model_validate(
        {
            "schema_version": SCHEMA_VERSION,
            "parameters": {
                **study.options.model_dump(mode="json"),
                "min_span": MIN_SPAN,
            },
            "systems": list(study.systems),
            "judge_names": list(study.judges),
            "dimensions": list(study.dimensions),
            "counts": _assemble.counts(study, figs.recall),
            "judges": judges,
            "across_judges": _assemble.across_block(study, across, tests, used),
            "flags": sorted_flags(flags),
            "notes": [*answers.notes, *weights.notes],
        }
    )
    if not answers.failed_sets and qual is None and not own_model:
        return out
    data = out.model_dump(mode="json")
    if qual is not None:  # CUBE_METHOD.md section 12
        _assemble.finish_qualification(
            data, qual, separated_judges, required=study.options.require_qualification
        )
    _assemble.finish_failed_sets(study, data)
    _assemble.finish_without_own_model(study, data, own_model)
    return Summary.model_validate(data)


def _qualify(
    study: Study, qualification: QualificationInput | None
) -> QualificationResult | None:
    """The qualification block and its flags (None without qualification)."""
    if qualification is None:
        return None
    return qualify(
        study.inputs.scores,
        qualification,
        judges=list(study.judges),
        dimensions=list(study.dimensions),
        weights=study.options.weights,
        alpha=study.options.alpha,
    )
