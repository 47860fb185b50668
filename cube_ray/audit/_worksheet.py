"""``cube-ray audit RUN_DIR --size m``: the worksheet, its key and its rubrics.

The worksheet is a CSV (UTF-8 with BOM) and, when ``openpyxl`` is installed,
the same rows as an ``.xlsx`` (:mod:`cube_ray.audit._xlsx`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from cube_ray import schema
from cube_ray.audit._draw import (
    audit_order,
    clip_cell,
    defuse_formula,
    row_id,
    score_header,
    shuffled_sets,
)
from cube_ray.audit._key import ROW, AuditKey, KeyDimension, KeyRow, write_atomic
from cube_ray.audit._xlsx import EXTRA, have_openpyxl, write_xlsx
from cube_ray.credentials import recorded_secrets, redact_all
from cube_ray.errors import CubeRayError, InputError
from cube_ray.language import detect_language
from cube_ray.manifest import MANIFEST, Manifest
from cube_ray.prompts import DEFAULT_DIMENSIONS, default_rubric
from cube_ray.sample import STRATUM, load_strata, read_sample

__all__ = [
    "AUDIT_DIR",
    "ROW",
    "TEXT_COLUMNS",
    "Worksheet",
    "sheet_paths",
    "write_worksheet",
]

AUDIT_DIR = "audit"
"""The run dir's folder of audit sheets, keys and the imported human file."""
TEXT_COLUMNS = (ROW, "question no.", "question", "gold document", "answer")
"""The worksheet's columns before the score columns."""
NO_ANSWER = "(no answer: the system returned nothing)"
_WRAPPED = ("question", "gold document", "answer")
"""The long text columns, wrapped in the workbook."""


@dataclass(frozen=True)
class Worksheet:
    """What :func:`write_worksheet` wrote."""

    sheet: Path
    key: Path
    rubrics: Path
    audit: AuditKey
    rubric_source: str
    """Where the rubrics came from (the run's config, or packaged defaults)."""
    xlsx: Path | None = None
    """The same sheet as an Excel workbook; None without ``openpyxl``."""
    xlsx_note: str | None = None
    """Why no workbook was written, and how to get one."""


def sheet_paths(out_dir: Path, size: int) -> tuple[Path, Path, Path]:
    """The sheet, key and rubrics files of an audit of ``size`` questions."""
    stem = f"audit-{size}"
    return (
        out_dir / f"{stem}.csv",
        out_dir / f"{stem}.key.json",
        out_dir / f"{stem}.rubrics.txt",
    )


def write_worksheet(
    run_dir: str | Path,
    *,
    size: int,
    out_dir: str | Path | None = None,
    seed: int | None = None,
) -> Worksheet:
    """Draw the audit sample and write its worksheet, key and rubrics.

    The worksheet is a CSV and, when ``openpyxl`` is installed, the same rows
    as an ``.xlsx`` beside it (:attr:`Worksheet.xlsx_note` says why not).

    Args:
        run_dir: The run directory (``answers/``, ``questions/``,
            ``documents/``; ``sample/`` when the run is sampled).
        size: Questions to audit (the whole population when it is smaller).
        out_dir: Where to write (default ``RUN_DIR/audit``).
        seed: The draw's seed (default: the run sample's seed, else 0).

    Raises:
        InputError: A table is missing, or a file of this audit exists.
    """
    root = Path(run_dir)
    if not root.is_dir():
        msg = "expected a run directory (the --out of cube-ray run); not found"
        raise InputError(msg, path=str(root))
    out = Path(out_dir) if out_dir is not None else root / AUDIT_DIR
    paths = sheet_paths(out, size)
    xlsx = paths[0].with_suffix(".xlsx")
    for path in (paths[0], xlsx, *paths[1:]):  # a sheet first: it may hold scores
        if path.exists():
            msg = (
                "exists already (it may hold a rater's scores); refusing to "
                "overwrite it. Move it (and its .csv, .xlsx, .key.json and "
                ".rubrics.txt) away, or write this sheet elsewhere with --out DIR"
            )
            raise InputError(msg, path=str(path))
    state = read_sample(root)
    seed = seed if seed is not None else (state.seed if state is not None else 0)

    answers = answer_units(root)
    population = _population(root, answers)
    order = audit_order(population, seed=seed)
    drawn = order.head(size)
    texts = _answer_texts(root, drawn[schema.QUESTION_ID])
    questions = _questions(root, drawn[schema.QUESTION_ID])
    documents = _documents(root, drawn[schema.DOC_ID])
    rubrics, source = _rubrics(root, documents.values())
    dims = [KeyDimension(name=n, column=score_header(n, r)) for n, r in rubrics]

    systems = (
        answers.group_by(schema.QUESTION_ID)
        .agg(pl.col(schema.SYSTEM))
        .rows_by_key(schema.QUESTION_ID, unique=True)
    )
    header = [*TEXT_COLUMNS, *(d.column for d in dims)]
    table: list[list[str]] = [header]
    # A belt: the tables hold no secret (masked as they were written).
    record = Manifest.read(root)
    secrets = recorded_secrets(record.config if record is not None else None)
    rows: list[KeyRow] = []
    for q_no, unit in enumerate(drawn.iter_rows(named=True), start=1):
        qid = unit[schema.QUESTION_ID]
        question = questions.get(qid, "")
        document = documents.get(unit[schema.DOC_ID], "")
        for a_no, system in enumerate(
            shuffled_sets(qid, list(systems[qid][0]), seed=seed), start=1
        ):
            rid = row_id(q_no, a_no)
            answer = texts.get((qid, system)) or NO_ANSWER
            table.append(
                [
                    rid,
                    f"Q{q_no:03d}",
                    *(
                        defuse_formula(clip_cell(redact_all(t, secrets)))
                        for t in (question, document, answer)
                    ),
                    *([""] * len(dims)),
                ]
            )
            rows.append(
                KeyRow(
                    row=rid,
                    question_no=q_no,
                    question_id=qid,
                    system=system,
                    stratum=unit[STRATUM],
                )
            )
    strata = (
        order.group_by(STRATUM)
        .agg(
            pl.len().alias("population"),
            (pl.col("order") < size).sum().alias("size"),
        )
        .sort(STRATUM)
    )
    key = AuditKey(
        sheet=paths[0].name,
        size=size,
        questions=drawn.height,
        population=order.height,
        seed=seed,
        stratified_by=list(state.fields) if state is not None else [],
        strata={
            r[STRATUM]: {"population": r["population"], "size": r["size"]}
            for r in strata.iter_rows(named=True)
        },
        dimensions=dims,
        rows=rows,
    )
    note = None
    if have_openpyxl():
        write_xlsx(
            xlsx,
            table,
            wrap=[TEXT_COLUMNS.index(c) for c in _WRAPPED],
            scores=range(len(TEXT_COLUMNS), len(header)),
            rubrics=[
                (name, dim.column, text)
                for (name, text), dim in zip(rubrics, dims, strict=True)
            ],
            instructions=_instructions(key, source, xlsx=True),
        )
    else:
        note = (
            f"XLSX not written: the Python package 'openpyxl' is not installed "
            f"(pip install 'cube-ray[{EXTRA}]', or pip install openpyxl); the "
            "CSV opens in any spreadsheet"
        )
    buffer = io.StringIO()
    csv.writer(buffer).writerows(table)
    # Excel reads a CSV as UTF-8 only when it starts with a byte-order mark.
    write_atomic(paths[0], buffer.getvalue(), encoding="utf-8-sig")
    key.write(paths[1])
    write_atomic(paths[2], _rubrics_text(key, rubrics, source, xlsx=note is None))
    return Worksheet(
        sheet=paths[0],
        key=paths[1],
        rubrics=paths[2],
        audit=key,
        rubric_source=source,
        xlsx=None if note else xlsx,
        xlsx_note=note,
    )


def _files(root: Path, kind: str) -> list[Path]:
    """The Parquet files of a run dir table (hidden and temporary files left out)."""
    folder = root / kind
    if folder.is_dir():
        return sorted(
            f
            for f in folder.rglob("*.parquet")
            if not any(p.startswith(".") for p in f.relative_to(folder).parts)
        )
    single = root / f"{kind}.parquet"
    return [single] if single.is_file() else []


def _need(root: Path, kind: str, purpose: str) -> list[Path]:
    files = _files(root, kind)
    if not files:
        msg = (
            f"the run dir has no {kind}/ table, which the worksheet needs for "
            f"{purpose}; audit a run dir that `cube-ray run` wrote (it writes "
            "documents/, questions/ and answers/)"
        )
        raise InputError(msg, path=str(root / kind))
    return files


def answer_units(root: Path) -> pl.DataFrame:
    """``question_id, doc_id, system`` of every answer of the run."""
    files = _need(root, "answers", "the answers")
    return (
        pl.scan_parquet(files)
        .select(
            pl.col(schema.QUESTION_ID).cast(pl.String),
            pl.col(schema.DOC_ID).cast(pl.String),
            pl.col(schema.SYSTEM).cast(pl.String),
        )
        .unique([schema.QUESTION_ID, schema.SYSTEM], keep="first", maintain_order=True)
        .collect()
    )


def _population(root: Path, answers: pl.DataFrame) -> pl.DataFrame:
    """``question_id, doc_id, stratum`` of the questions the audit draws from.

    A sampled run: its current sample's questions, with their strata; else
    every answered question, in one stratum.
    """
    questions = answers.unique(schema.QUESTION_ID, keep="first", maintain_order=True)
    strata = load_strata(root)
    if strata is None:
        return questions.select(
            schema.QUESTION_ID, schema.DOC_ID, pl.lit("all").alias(STRATUM)
        )
    return questions.join(
        strata.select(pl.col(schema.QUESTION_ID).cast(pl.String), STRATUM),
        on=schema.QUESTION_ID,
        how="inner",
    ).select(schema.QUESTION_ID, schema.DOC_ID, STRATUM)


def _answer_texts(root: Path, ids: pl.Series) -> dict[tuple[str, str], str | None]:
    files = _files(root, "answers")
    frame = (
        pl.scan_parquet(files)
        .select(
            pl.col(schema.QUESTION_ID).cast(pl.String),
            pl.col(schema.SYSTEM).cast(pl.String),
            pl.col(schema.ANSWER),
        )
        .filter(pl.col(schema.QUESTION_ID).is_in(ids.implode()))
        .collect()
    )
    return {(q, s): a for q, s, a in frame.iter_rows()}


def _questions(root: Path, ids: pl.Series) -> dict[str, str]:
    files = _need(root, "questions", "the question text")
    frame = (
        pl.scan_parquet(files)
        .select(pl.col(schema.QUESTION_ID).cast(pl.String), schema.QUESTION)
        .filter(pl.col(schema.QUESTION_ID).is_in(ids.implode()))
        .unique(schema.QUESTION_ID, keep="first")
        .collect()
    )
    return {q: t or "" for q, t in frame.iter_rows()}


def _documents(root: Path, ids: pl.Series) -> dict[str, str]:
    files = _need(root, "documents", "the gold document text")
    frame = (
        pl.scan_parquet(files)
        .select(pl.col(schema.DOC_ID).cast(pl.String), schema.TEXT)
        .filter(pl.col(schema.DOC_ID).is_in(ids.implode()))
        .unique(schema.DOC_ID, keep="first")
        .collect()
    )
    return {d: t or "" for d, t in frame.iter_rows()}


def _rubrics(root: Path, texts: Any) -> tuple[list[tuple[str, str]], str]:
    """The dimensions and their rubric texts, and where they came from.

    The run's config (``manifest.json``) decides; a run dir without one (tables
    made elsewhere) gets the scores table's dimensions with the packaged
    rubrics in the documents' language.
    """
    # lazy: loads yaml, which importing _worksheet does not
    from cube_ray.config import RunConfig

    manifest = root / MANIFEST
    why = "the run dir records no config"
    record = Manifest.read(root)
    recorded = record.config if record is not None else None
    if recorded is not None:
        try:
            config = RunConfig.from_dict(recorded, source=str(manifest))
            return list(config.rubrics().items()), f"the run's config ({manifest})"
        except CubeRayError as exc:
            first = str(exc).splitlines()[0]
            why = f"the config in {manifest} is not usable here: {first}"
    return _default_rubrics(root, texts, why=why)


def _default_rubrics(
    root: Path, texts: Any, *, why: str
) -> tuple[list[tuple[str, str]], str]:

    files = _need(root, "scores", "the dimensions to score")
    found = (
        pl.scan_parquet(files)
        .select(pl.col(schema.DIMENSION).cast(pl.String))
        .unique()
        .collect()[schema.DIMENSION]
        .to_list()
    )
    ordered = [d for d in DEFAULT_DIMENSIONS if d in found]
    ordered += sorted(d for d in found if d not in DEFAULT_DIMENSIONS)
    language = detect_language(texts)
    rubrics = [
        (d, default_rubric(d, language) if d in DEFAULT_DIMENSIONS else "")
        for d in ordered
    ]
    source = (
        f"the packaged {language} rubrics ({why}); dimensions from the scores table"
    )
    return rubrics, source


def _instructions(key: AuditKey, source: str, *, xlsx: bool) -> list[str]:
    """How to score, as the rubrics file and the workbook's rubrics sheet open."""
    workbook = Path(key.sheet).with_suffix(".xlsx").name
    sheets = f"{key.sheet} (and {workbook}: the same rows)" if xlsx else key.sheet
    save = (
        "Keep the workbook as .xlsx, or save the sheet as CSV UTF-8."
        if xlsx
        else "Save the sheet as CSV UTF-8."
    )
    return [
        f"Audit worksheet {sheets}: {key.questions} questions, "
        f"{len(key.rows)} answers to score.",
        "",
        "How to score: each row is one answer to a citizen's question. Read the",
        "question, the gold document (the official source) and the answer, and",
        "give each answer a score from 0 to 10 on every dimension below, as the",
        "rubric says. The answers of one question come in a random order; their",
        "origin is not shown on purpose: score each on its own merits.",
        "Score a question in full (every answer, every dimension) or leave all",
        "of its cells empty; do not change the row ids.",
        save,
        "",
        f"Rubrics: {source}.",
    ]


def _rubrics_text(
    key: AuditKey, rubrics: Sequence[tuple[str, str]], source: str, *, xlsx: bool
) -> str:
    """The scorer's instructions and every rubric in full."""
    lines = _instructions(key, source, xlsx=xlsx)
    for (name, text), dim in zip(rubrics, key.dimensions, strict=True):
        lines += [
            "",
            f"== {name} ==",
            f"column: {dim.column}",
            text or "(no rubric recorded for this dimension)",
        ]
    return "\n".join(lines) + "\n"
