"""The qualification's sources, read on the driver (CUBE_METHOD.md section 12).

The qualification sample is small (``qualification.questions`` questions,
default 50): its full-bound answers, gold documents and faulted answers are
read from the run's Parquet part files with filters (only those rows), never
the whole tables. The sample: the first questions in the seeded order of
section 11 (``sha256(f"{seed}:{doc_id}")``), so growing ``questions`` keeps
every fault already built and scored.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from cube_ray import schema
from cube_ray.config import RunConfig
from cube_ray.pipeline.method import (
    ANSWERS,
    DOCUMENTS,
    QUALIFICATION,
    QUALIFICATION_SCORES,
    QUESTIONS,
)
from cube_ray.pipeline.parts import part_files
from cube_ray.qualification import FAULTED, KIND, control_kind, seeded_sample
from cube_ray.stages import DOC_HASH
from cube_ray.stages.qualify import FAULT_SOURCE, QUALIFICATION_SOURCE, SAMPLED

if TYPE_CHECKING:
    from cube_ray.aggregate import QualificationInput

__all__ = [
    "DONORS",
    "faults_source",
    "qualification_input",
    "qualification_sample",
    "qualification_source",
]


def _read(
    run_dir: Path, table: str, columns: list[str], where: pc.Expression | None = None
) -> pa.Table:
    """Some columns of a table's rows (those matching ``where``), or no rows."""
    files = [str(f) for f in part_files(run_dir / table)]
    if not files:
        return pa.table({c: pa.array([], pa.string()) for c in columns})
    data = pads.dataset(files, format="parquet")
    return data.to_table(columns=columns, filter=where)


DONORS = 50
"""Donor documents of the ``entity`` and ``unsupported`` faults: the first 50 in
the seeded order (CUBE_METHOD.md section 11), whatever the sample size."""


def qualification_sample(run_dir: Path, config: RunConfig) -> pa.Table:
    """``question_id, doc_id`` of the sampled questions.

    Generated questions take their document's id and are written wave by wave,
    so the sample is drawn from the documents (all staged before any stage):
    every wave sees the same sample. A question file is staged whole. A run
    with ``sample:`` qualifies on its sampled documents only (the others have
    no question and no full-bound answer to fault).
    """
    qual = config.qualification
    assert qual is not None
    if config.questions.source == "file":
        ids = _read(run_dir, QUESTIONS, [schema.QUESTION_ID, schema.DOC_ID])
        pairs = list(
            zip(
                ids.column(schema.QUESTION_ID).to_pylist(),
                ids.column(schema.DOC_ID).to_pylist(),
                strict=True,
            )
        )
    else:
        doc_ids = _read(run_dir, DOCUMENTS, [schema.DOC_ID]).column(schema.DOC_ID)
        pairs = [(d, d) for d in doc_ids.to_pylist()]
    # lazy: cube_ray.sample loads polars, not in the Ray stage workers
    from cube_ray.sample import sampled_ids

    sampled = sampled_ids(run_dir) if config.sample is not None else None
    if sampled is not None:  # only the sampled documents have answers (section 11)
        keep = set(sampled.get_column("doc_id").to_list())
        pairs = [(q, d) for q, d in pairs if d in keep]
    chosen = set(seeded_sample(pairs, size=qual.questions, seed=qual.seed))
    rows = [(q, d) for q, d in pairs if q in chosen]
    return pa.table(
        {
            schema.QUESTION_ID: pa.array([q for q, _ in rows], pa.string()),
            schema.DOC_ID: pa.array([d for _, d in rows], pa.string()),
        }
    )


def _documents(run_dir: Path, doc_ids: pa.Array) -> pa.Table:
    docs = _read(
        run_dir,
        DOCUMENTS,
        [schema.DOC_ID, schema.TEXT, schema.CONTENT_HASH],
        pc.field(schema.DOC_ID).isin(doc_ids),
    )
    return docs.rename_columns({schema.CONTENT_HASH: DOC_HASH})


def _donor_ids(run_dir: Path, config: RunConfig) -> list[str]:
    """The first :data:`DONORS` documents in the seeded order (whatever the sample)."""
    qual = config.qualification
    assert qual is not None
    doc_ids = _read(run_dir, DOCUMENTS, [schema.DOC_ID]).column(schema.DOC_ID)
    pairs = [(d, d) for d in doc_ids.to_pylist()]
    return seeded_sample(pairs, size=DONORS, seed=qual.seed)


def faults_source(run_dir: Path, config: RunConfig) -> pa.Table:
    """The sampled questions' full-bound answers and gold documents (``FAULT_SOURCE``).

    A sampled question whose full-bound answer is missing (failed, or in a
    later wave) keeps its row with no answer: its faults are written as
    ``no_answer``, and rewritten once the answer exists (its hash changes).
    The donor documents (:func:`_donor_ids`) come as rows of their own with
    ``_sampled`` false: the same donors for every sample size, so a larger
    ``qualification.questions`` keeps every fault already built.
    """
    sample = qualification_sample(run_dir, config)
    ids = sample.column(schema.QUESTION_ID)
    answers = _read(
        run_dir,
        ANSWERS,
        [schema.QUESTION_ID, schema.ANSWER],
        (pc.field(schema.SYSTEM) == schema.FULL)
        & pc.field(schema.QUESTION_ID).isin(ids),
    )
    sampled_docs = set(sample.column(schema.DOC_ID).to_pylist())
    extra = _donor_ids(run_dir, config)
    donors_only = pa.table(
        {
            schema.QUESTION_ID: pa.array(extra, pa.string()),
            schema.DOC_ID: pa.array(extra, pa.string()),
            schema.ANSWER: pa.array([None] * len(extra), pa.string()),
            SAMPLED: pa.array([False] * len(extra), pa.bool_()),
        }
    )
    rows = sample.join(answers, schema.QUESTION_ID, join_type="left outer")
    rows = rows.append_column(SAMPLED, pa.array([True] * rows.num_rows, pa.bool_()))
    rows = pa.concat_tables([rows.select(donors_only.column_names), donors_only])
    docs = _documents(run_dir, pa.array(sorted({*sampled_docs, *extra}), pa.string()))
    joined = rows.join(docs, schema.DOC_ID, join_type="inner")
    return joined.select(list(FAULT_SOURCE)).sort_by(schema.QUESTION_ID)


def _kinds(config: RunConfig) -> pa.Array:
    """The configured fault kinds and their controls' kinds."""
    qual = config.qualification
    assert qual is not None
    return pa.array(
        [k for kind in qual.kinds for k in (kind, control_kind(kind))], pa.string()
    )


def qualification_source(run_dir: Path, config: RunConfig) -> pa.Table:
    """The built faults and controls of the sample (``QUALIFICATION_SOURCE``)."""
    qual = config.qualification
    assert qual is not None
    sample = qualification_sample(run_dir, config)
    faults = _read(
        run_dir,
        QUALIFICATION,
        [schema.QUESTION_ID, KIND, FAULTED],
        (pc.field(schema.STATUS) == schema.STATUS_OK)
        & pc.field(schema.QUESTION_ID).isin(sample.column(schema.QUESTION_ID))
        & pc.field(KIND).isin(_kinds(config)),
    )
    questions = _read(
        run_dir,
        QUESTIONS,
        [schema.QUESTION_ID, schema.DOC_ID, schema.QUESTION],
        pc.field(schema.QUESTION_ID).isin(faults.column(schema.QUESTION_ID)),
    )
    docs = _documents(run_dir, pc.unique(questions.column(schema.DOC_ID)))
    joined = faults.join(questions, schema.QUESTION_ID, join_type="inner").join(
        docs, schema.DOC_ID, join_type="inner"
    )
    return joined.select(list(QUALIFICATION_SOURCE)).sort_by(
        [(schema.QUESTION_ID, "ascending"), (KIND, "ascending")]
    )


def qualification_input(run_dir: Path, config: RunConfig) -> QualificationInput | None:
    """What the summary needs of the qualification (None when it is off)."""
    qual = config.qualification
    if qual is None:
        return None
    # lazy: loads polars, not in the Ray stage workers
    import polars as pl

    # lazy: loads cube_ray.aggregate (scipy, polars), not in the Ray stage workers
    from cube_ray.aggregate import QualificationInput

    sample = qualification_sample(run_dir, config).column(schema.QUESTION_ID)
    kinds = _kinds(config)
    faults = _read(
        run_dir,
        QUALIFICATION,
        [schema.QUESTION_ID, KIND, schema.STATUS],
        pc.field(schema.QUESTION_ID).isin(sample) & pc.field(KIND).isin(kinds),
    )
    scores = _read(
        run_dir,
        QUALIFICATION_SCORES,
        [
            schema.QUESTION_ID,
            schema.SYSTEM,
            schema.JUDGE,
            schema.DIMENSION,
            schema.SCORE,
            schema.STATUS,
        ],
        pc.field(schema.QUESTION_ID).isin(sample) & pc.field(schema.SYSTEM).isin(kinds),
    )
    frame = pl.from_arrow(faults)
    score_frame = pl.from_arrow(scores)
    assert isinstance(frame, pl.DataFrame)
    assert isinstance(score_frame, pl.DataFrame)
    return QualificationInput(
        faults=frame,
        scores=score_frame,
        expected={d.name: d.expected_faults() for d in config.dimensions},
        min_drop=qual.min_drop,
        judges=None if qual.judges is None else tuple(qual.judges),
        certify_on=qual.certify_on,
    )
