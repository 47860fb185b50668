"""The audit sample and the worksheet's cells: pure functions, no I/O.

The audit sample (CUBE_METHOD.md section 13) is drawn in the seeded order of
section 11 (:func:`cube_ray.sample.sample_order` over the questions' gold
documents, within the run's strata), so it is nested: the sample of m' > m
questions keeps every question of the sample of m. Each question's answers
are shown in an order seeded by the question, so the same question gets the
same rows in every sheet drawn with the same seed.
"""

from __future__ import annotations

import re

import polars as pl

from cube_ray import schema
from cube_ray.sample import ORDER, STRATUM, sample_order
from cube_ray.seeded import doc_hash

__all__ = [
    "CELL_LIMIT",
    "audit_order",
    "clip_cell",
    "column_letter",
    "defuse_formula",
    "parse_score",
    "row_id",
    "rubric_short",
    "score_header",
    "score_text",
    "shuffled_sets",
]

CELL_LIMIT = 32_000
"""Characters a worksheet cell keeps: spreadsheets cut a cell at 32,767."""
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""A cell starting with one of these is read as a formula by spreadsheets."""
_SENTENCE = re.compile(r"(?<=[.?!。？！])\s*")
_RUBRIC_LABEL = re.compile(r"^\s*(rubric|评分标准)\s*[:：]\s*", re.IGNORECASE)
_SHORT_LIMIT = 100
_LABEL_LIMIT = 12
"""A first sentence at most this long is a label ("relevance.", "相关性。")."""


def audit_order(questions: pl.DataFrame, *, seed: int) -> pl.DataFrame:
    """The order in which questions enter the audit sample.

    Documents are ordered as the planned sample orders them (section 11: by
    ``sha256(f"{seed}:{doc_id}")`` within each stratum, strata interleaved by
    their share), so the first m questions take each stratum's proportional
    share within ±1; questions of one gold document follow each other (by
    ``question_id``).

    Args:
        questions: ``question_id, doc_id, stratum`` of the audited population
            (one stratum for a run without a sample).
        seed: The order's seed.

    Returns:
        ``question_id, doc_id, stratum, order`` sorted by ``order`` (0-based):
        the audit sample of size m is the first m rows.

    >>> q = pl.DataFrame({"question_id": ["q1", "q2", "q3", "q4"],
    ...                   "doc_id": ["a", "b", "c", "d"],
    ...                   "stratum": ["x", "x", "y", "y"]})
    >>> out = audit_order(q, seed=1)
    >>> out["order"].to_list(), sorted(out.head(2)["stratum"].to_list())
    ([0, 1, 2, 3], ['x', 'y'])
    >>> out.head(3)["question_id"].to_list() == audit_order(q, seed=1).head(3)[
    ...     "question_id"].to_list()
    True
    """
    docs = questions.unique(schema.DOC_ID, keep="first", maintain_order=True)
    doc_order = sample_order(docs[schema.DOC_ID], docs[STRATUM], seed=seed).select(
        schema.DOC_ID, pl.col(ORDER).alias("_doc_order")
    )
    return (
        questions.join(doc_order, on=schema.DOC_ID, how="left")
        .sort(["_doc_order", schema.QUESTION_ID])
        .drop("_doc_order")
        .with_row_index(ORDER)
        .select(
            schema.QUESTION_ID,
            schema.DOC_ID,
            STRATUM,
            pl.col(ORDER).cast(pl.Int64),
        )
    )


def shuffled_sets(question_id: str, systems: list[str], *, seed: int) -> list[str]:
    """The answer sets of one question in the order the worksheet shows them.

    Ordered by ``sha256(f"{seed}:{question_id}:{system}")``: the rater cannot
    tell the set from the position, and the order does not depend on the other
    questions drawn (a larger sheet repeats a smaller one's rows).

    >>> sets = ["full", "rag", "zero"]
    >>> a = shuffled_sets("q1", sets, seed=0)
    >>> sorted(a) == sets, a == shuffled_sets("q1", list(reversed(sets)), seed=0)
    (True, True)
    >>> len({tuple(shuffled_sets(f"q{i}", sets, seed=0)) for i in range(40)}) > 1
    True
    """
    return sorted(systems, key=lambda s: doc_hash(seed, f"{question_id}:{s}"))


def row_id(question_no: int, answer_no: int) -> str:
    """The worksheet's id of a row: audit question and answer, 1-based.

    Letters keep a spreadsheet from turning it into a number or a date.

    >>> row_id(3, 2), row_id(1200, 5)
    ('Q003-A2', 'Q1200-A5')
    """
    return f"Q{question_no:03d}-A{answer_no}"


def rubric_short(name: str, rubric: str) -> str:
    """The rubric's question in one short line, for a column heading.

    The leading ``Rubric:`` label and a first sentence that only names the
    dimension are left out; the first real sentence is kept (cut at 100
    characters).

    >>> rubric_short("relevance", "Rubric: relevance. Is the answer faithful to "
    ...              "the source? Give two points for each criterion met.")
    'Is the answer faithful to the source?'
    >>> rubric_short("relevance", "评分标准：相关性。回答是否忠实于源文档？每项 2 分。")
    '相关性：回答是否忠实于源文档？'
    >>> rubric_short("legal", "")
    'legal'
    """
    text = _RUBRIC_LABEL.sub("", rubric.strip())
    sentences = [s.strip() for s in _SENTENCE.split(text) if s.strip()]
    if not sentences:
        return name
    label = ""
    first = sentences[0]
    word = first.rstrip(".。").strip()
    if len(sentences) > 1 and word.lower() == name.lower():
        first = sentences[1]
    elif len(sentences) > 1 and len(first) <= _LABEL_LIMIT:
        label = word + "："
        first = sentences[1]
    short = label + first
    if len(short) > _SHORT_LIMIT:
        short = short[: _SHORT_LIMIT - 1].rstrip() + "…"
    return short


def score_header(name: str, rubric: str) -> str:
    """A score column's heading: the dimension, the scale, the rubric's question.

    >>> score_header("quality", "Rubric: quality. Is it clear? Two points each.")
    'quality (0-10): Is it clear?'
    """
    return f"{name} (0-10): {rubric_short(name, rubric)}"


def column_letter(index: int) -> str:
    """The spreadsheet letter of a 0-based column.

    >>> column_letter(0), column_letter(25), column_letter(26), column_letter(27)
    ('A', 'Z', 'AA', 'AB')
    """
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def defuse_formula(text: str) -> str:
    r"""A text cell a spreadsheet shows as text, never runs as a formula.

    An answer is text from the system under test; one starting with ``=``
    (or ``+ - @``, a list item ``- ...`` too) would be a formula in Excel or
    LibreOffice. A leading apostrophe keeps it text.

    >>> defuse_formula('=HYPERLINK("http://x")'), defuse_formula("- 身份证")
    ('\'=HYPERLINK("http://x")', "'- 身份证")
    >>> defuse_formula("办理时限：20 个工作日")
    '办理时限：20 个工作日'
    """
    return "'" + text if text.startswith(_FORMULA_START) else text


def clip_cell(text: str, *, limit: int = CELL_LIMIT) -> str:
    """A text cut to what a spreadsheet cell keeps, saying how much was cut.

    >>> clip_cell("abcdefghij", limit=4)
    'abcd … [6 more characters not shown]'
    >>> clip_cell("abc", limit=4)
    'abc'
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]} … [{len(text) - limit} more characters not shown]"


_SCORE = re.compile(r"-?[0-9]+(?:[.,][0-9]+)?")
"""A human score as written: ASCII digits, optionally a decimal point (or a
decimal comma, Excel in de, fr, ru, ...) and more digits. A ``-`` is read on
zero (``-0.0``, as programs write a rounded small negative) and otherwise only
to say that the number is outside 0-10. Exponents (``1e1``), digit
separators (``1_0``), a ``+`` sign and digits of other scripts (``７``, ``٧``)
are not scores, though Python's ``float`` reads them all."""


def parse_score(cell: str) -> float | None:
    """A score cell: None when empty, else the number in 0..10.

    The rule (:data:`_SCORE`): ASCII digits with an optional decimal point
    or comma; surrounding spaces are ignored.

    Raises:
        ValueError: The cell is not written as such a number, or is outside
            0..10 (the message says which and what is expected).

    >>> parse_score(" 7 "), parse_score("7.5"), parse_score("7,5"), parse_score("")
    (7.0, 7.5, 7.5, None)
    >>> parse_score("seven")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: 'seven' is not a number; expected a score 0-10 written with ...
    >>> for text in ("1e1", "1_0", "\uff17", "\u0667", "+7", "nan", "7."):
    ...     try:
    ...         parse_score(text)
    ...     except ValueError:
    ...         print(f"{text!r} refused")
    '1e1' refused
    '1_0' refused
    '７' refused
    '٧' refused
    '+7' refused
    'nan' refused
    '7.' refused
    >>> parse_score("-0.0"), parse_score("10")
    (0.0, 10.0)
    >>> parse_score("11")
    Traceback (most recent call last):
    ...
    ValueError: 11 is outside 0-10; expected a score 0-10 or an empty cell
    """
    text = cell.strip()
    if not text:
        return None
    if not _SCORE.fullmatch(text):
        msg = (
            f"{text!r} is not a number; expected a score 0-10 written with ASCII "
            "digits and an optional decimal point (7, 7.5), or an empty cell"
        )
        raise ValueError(msg)
    value = float(text.replace(",", ".")) + 0.0  # -0.0 is 0
    if not 0.0 <= value <= 10.0:
        msg = f"{text} is outside 0-10; expected a score 0-10 or an empty cell"
        raise ValueError(msg)
    return value


def score_text(value: float) -> str:
    """A score as the human file writes it.

    >>> score_text(7.0), score_text(7.5)
    ('7', '7.5')
    """
    return str(int(value)) if value.is_integer() else repr(value)
