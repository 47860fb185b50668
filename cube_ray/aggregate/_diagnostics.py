"""Retrieval diagnostics shown beside the headline (pure Polars, no I/O).

The rank-versus-score correlations per judge and dimension, over all questions
(the Pearson weights' own correlations, section 6) and over the retrieved ones
only, and recall@k for every k up to the retrieval depth.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from cube_ray import schema
from cube_ray.aggregate._math import RANK_SCORE, R, pearson, rank_scores

__all__ = ["rank_correlations", "recall_curve"]

R_ALL = "r_all"
R_RETRIEVED = "r_retrieved"


def rank_correlations(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    k: int | Mapping[str, int],
    systems: Sequence[str],
) -> pl.DataFrame:
    """Pearson r(rank_score, score) per system, judge and dimension.

    A missed retrieval counts as rank_score 0 in ``r_all`` (the correlation
    the Pearson weights use); ``r_retrieved`` keeps the questions with rank >= 1.
    Pairs with a missing score are left out; r is null where undefined.

    Args:
        answers: Answer rows (``question_id, system, rank``).
        scores: Score rows (``question_id, system, judge, dimension, score``).
        k: Retrieval depth, one for all or one per system.
        systems: The systems under test.

    Returns:
        ``system, judge, dimension, r_all, r_retrieved``, sorted.

    Examples:
        >>> ans = pl.DataFrame({"question_id": ["a", "b", "c"], "system": "rag",
        ...                     "rank": [1, 2, 0]})
        >>> sc = ans.select("question_id", "system").with_columns(
        ...     judge=pl.lit("j"), dimension=pl.lit("d"),
        ...     score=pl.Series([9.0, 7.0, 2.0]))
        >>> rank_correlations(ans, sc, k=8, systems=["rag"]).row(0)[3:]
        (0.9839330980366565, 1.0)
    """
    keys = [schema.SYSTEM, schema.JUDGE, schema.DIMENSION]
    ranked = rank_scores(
        answers.filter(pl.col(schema.SYSTEM).cast(pl.String).is_in(list(systems)))
        .with_columns(
            pl.col(schema.SYSTEM).cast(pl.String), pl.col(schema.RANK).fill_null(0)
        )
        .select(schema.QUESTION_ID, schema.SYSTEM, schema.RANK),
        k=dict(k) if isinstance(k, Mapping) else k,
    )
    rows = ranked.join(
        scores.with_columns(pl.col(keys).cast(pl.String)).select(
            schema.QUESTION_ID, *keys, pl.col(schema.SCORE).cast(pl.Float64)
        ),
        on=[schema.QUESTION_ID, schema.SYSTEM],
    ).with_columns(pl.col(RANK_SCORE).cast(pl.Float64))
    every = pearson(rows, by=keys, x=RANK_SCORE, y=schema.SCORE)
    hits = pearson(
        rows.filter(pl.col(schema.RANK) >= 1), by=keys, x=RANK_SCORE, y=schema.SCORE
    )
    return (
        every.select(*keys, pl.col(R).alias(R_ALL))
        .join(hits.select(*keys, pl.col(R).alias(R_RETRIEVED)), on=keys, how="left")
        .sort(keys)
    )


def recall_curve(
    answers: pl.DataFrame, *, systems: Sequence[str], k_max: int
) -> pl.DataFrame:
    """recall@k for ``k = 1 .. k_max`` per system (share of its answer rows).

    Examples:
        >>> ans = pl.DataFrame({"system": "rag", "rank": [1, 3, 0, None]})
        >>> recall_curve(ans, systems=["rag"], k_max=3)["recall"].to_list()
        [0.25, 0.25, 0.5]
    """
    rank = pl.col(schema.RANK).fill_null(0)
    frames = [
        answers.filter(pl.col(schema.SYSTEM).cast(pl.String) == system)
        .select(
            pl.lit(system).alias(schema.SYSTEM),
            pl.len().alias("questions"),
            *[
                ((rank >= 1) & (rank <= k)).sum().alias(str(k))
                for k in range(1, k_max + 1)
            ],
        )
        .unpivot(index=[schema.SYSTEM, "questions"], variable_name="k", value_name="n")
        for system in systems
    ]
    if not frames:
        return pl.DataFrame(
            schema={
                schema.SYSTEM: pl.String,
                "questions": pl.UInt32,
                "k": pl.Int64,
                "recall": pl.Float64,
            }
        )
    return pl.concat(frames).select(
        schema.SYSTEM,
        "questions",
        pl.col("k").cast(pl.Int64),
        (pl.col("n") / pl.max_horizontal(pl.col("questions"), 1)).alias("recall"),
    )
