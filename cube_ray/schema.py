"""Column names and Arrow schemas of every table cube_ray reads or writes.

Column names are constants here and nowhere else; code refers to them as
``schema.QUESTION_ID`` rather than repeating string literals. The ``*_SCHEMA``
objects list the columns a table must have (extra columns are allowed and kept);
``*_EXTRA`` lists optional columns that the pipeline also writes.

The answers and scores schemas are the interchange contract of
CUBE_METHOD.md section 9.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "ANSWER",
    "ANSWERS_EXTRA",
    "ANSWERS_SCHEMA",
    "BOUND_SYSTEMS",
    "COMPLETION_TOKENS",
    "CONTENT_HASH",
    "DIMENSION",
    "DOCUMENTS_SCHEMA",
    "DOC_ID",
    "FULL",
    "GENERATOR",
    "JUDGE",
    "LATENCY_S",
    "PROMPT_TOKENS",
    "QUESTION",
    "QUESTIONS_EXTRA",
    "QUESTIONS_SCHEMA",
    "QUESTION_ID",
    "RAG",
    "RANK",
    "RAW",
    "REFERENCE_ANSWER",
    "RETRIEVED_DOC_IDS",
    "SCORE",
    "SCORES_EXTRA",
    "SCORES_SCHEMA",
    "STATUS",
    "STATUS_OK",
    "SYSTEM",
    "TEXT",
    "TITLE",
    "ZERO",
    "is_rag_system",
]

# --- column names -----------------------------------------------------------
DOC_ID = "doc_id"
TITLE = "title"
TEXT = "text"
CONTENT_HASH = "content_hash"

QUESTION_ID = "question_id"
QUESTION = "question"
GENERATOR = "generator"
REFERENCE_ANSWER = "reference_answer"

SYSTEM = "system"
ANSWER = "answer"
RETRIEVED_DOC_IDS = "retrieved_doc_ids"
RANK = "rank"

JUDGE = "judge"
DIMENSION = "dimension"
SCORE = "score"
STATUS = "status"
RAW = "raw"

LATENCY_S = "latency_s"
PROMPT_TOKENS = "prompt_tokens"
COMPLETION_TOKENS = "completion_tokens"

# --- values -----------------------------------------------------------------
ZERO = "zero"
"""System name of the zero-score bound (answers with no context)."""
FULL = "full"
"""System name of the full-score bound (answers with only the gold document)."""
RAG = "rag"
"""System name of the single system under test; variants are ``rag@<variant>``."""
BOUND_SYSTEMS = (ZERO, FULL)
STATUS_OK = "ok"


def is_rag_system(name: str) -> bool:
    """Whether a system name denotes a system under test (``rag`` or ``rag@x``).

    >>> [is_rag_system(s) for s in ["rag", "rag@k8", "zero", "full", "ragx"]]
    [True, True, False, False, False]
    """
    return name == RAG or name.startswith(RAG + "@")


# --- schemas ----------------------------------------------------------------
DOCUMENTS_SCHEMA = pa.schema(
    [
        pa.field(DOC_ID, pa.string(), nullable=False),
        pa.field(TITLE, pa.string()),
        pa.field(TEXT, pa.string(), nullable=False),
        pa.field(CONTENT_HASH, pa.string(), nullable=False),
    ]
)

QUESTIONS_SCHEMA = pa.schema(
    [
        pa.field(QUESTION_ID, pa.string(), nullable=False),
        pa.field(DOC_ID, pa.string(), nullable=False),
        pa.field(QUESTION, pa.string()),
    ]
)
QUESTIONS_EXTRA = pa.schema(
    [
        pa.field(GENERATOR, pa.string()),
        pa.field(REFERENCE_ANSWER, pa.string()),
        pa.field(CONTENT_HASH, pa.string()),
        pa.field(STATUS, pa.string()),
        pa.field(LATENCY_S, pa.float64()),
        pa.field(PROMPT_TOKENS, pa.int64()),
        pa.field(COMPLETION_TOKENS, pa.int64()),
    ]
)

ANSWERS_SCHEMA = pa.schema(
    [
        pa.field(QUESTION_ID, pa.string(), nullable=False),
        pa.field(DOC_ID, pa.string(), nullable=False),
        pa.field(SYSTEM, pa.string(), nullable=False),
        pa.field(ANSWER, pa.string()),
        pa.field(RETRIEVED_DOC_IDS, pa.list_(pa.string())),
        pa.field(RANK, pa.int32()),
    ]
)
ANSWERS_EXTRA = pa.schema(
    [
        pa.field(STATUS, pa.string()),
        pa.field(LATENCY_S, pa.float64()),
        pa.field(PROMPT_TOKENS, pa.int64()),
        pa.field(COMPLETION_TOKENS, pa.int64()),
        pa.field(CONTENT_HASH, pa.string()),
    ]
)

SCORES_SCHEMA = pa.schema(
    [
        pa.field(QUESTION_ID, pa.string(), nullable=False),
        pa.field(SYSTEM, pa.string(), nullable=False),
        pa.field(JUDGE, pa.string(), nullable=False),
        pa.field(DIMENSION, pa.string(), nullable=False),
        pa.field(SCORE, pa.float64()),
        pa.field(STATUS, pa.string(), nullable=False),
        pa.field(RAW, pa.string()),
    ]
)
SCORES_EXTRA = pa.schema(
    [
        pa.field(PROMPT_TOKENS, pa.int64()),
        pa.field(COMPLETION_TOKENS, pa.int64()),
        pa.field(LATENCY_S, pa.float64()),
        pa.field(CONTENT_HASH, pa.string()),
    ]
)
