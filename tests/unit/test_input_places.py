"""Every input error's position points at the offending record (issue 24).

JSON Lines and CSV files are located by the 1-based line an editor shows (a
CSV header is line 1); Parquet files by the 1-based row. Each file here has
something that would shift a naive count (a blank line, a quoted cell spanning
lines, a header), and each test reads the record back at the reported place.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import polars as pl
import pytest

from cube_ray.config import CorpusConfig
from cube_ray.corpus import iter_document_batches
from cube_ray.errors import InputError
from cube_ray.systems.config import QaFileSystemConfig
from cube_ray.systems.qa_file import build_qa_index
from cube_ray.systems.questions import load_question_file


def _line(err: InputError, path: Path) -> int:
    message = str(err)
    m = re.match(rf"file {re.escape(str(path))}, line (\d+)[,:] ", message)
    assert m, message
    assert err.line == int(m.group(1))
    return int(m.group(1))


def _row(err: InputError, path: Path) -> int:
    message = str(err)
    m = re.match(rf"file {re.escape(str(path))}, row (\d+) \(1-based\)[,:] ", message)
    assert m, message
    return int(m.group(1))


def _text_line(path: Path, n: int) -> str:
    return path.read_text(encoding="utf-8").splitlines()[n - 1]


def _corpus_error(path: Path) -> InputError:
    cfg = CorpusConfig(path=str(path), id_field="id", fields=["name"])
    with pytest.raises(InputError, match="empty document") as info:
        list(iter_document_batches(cfg))
    return info.value


def _write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_corpus_jsonl_line_counts_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(
        '{"id": "a", "name": "x"}\n\n{"id": "b", "name": "y"}\n'
        '{"id": "BAD", "name": ""}\n',
        encoding="utf-8",
    )
    n = _line(_corpus_error(path), path)
    assert n == 4
    assert '"BAD"' in _text_line(path, n)


def test_corpus_csv_line_counts_header_and_multiline_cells(tmp_path: Path) -> None:
    path = _write_csv(
        tmp_path / "c.csv",
        [
            {"id": "a", "name": "first\nsecond\nthird"},  # lines 2-4
            {"id": "b", "name": "y"},
            {"id": "BAD", "name": ""},
        ],
    )
    n = _line(_corpus_error(path), path)
    assert n == 6
    assert _text_line(path, n).startswith("BAD,")


def test_corpus_parquet_row_is_one_based(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    pl.DataFrame({"id": ["a", "b", "BAD"], "name": ["x", "y", None]}).write_parquet(
        path
    )
    n = _row(_corpus_error(path), path)
    assert n == 3
    assert pl.read_parquet(path)["id"][n - 1] == "BAD"


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_question_file_place(tmp_path: Path, suffix: str) -> None:
    rows = [
        {"question": "第一个问题？\n续行", "doc_id": "d1"},
        {"question": "第二个问题？", "doc_id": "d2"},
        {"question": " ", "doc_id": "BAD"},
    ]
    path = tmp_path / f"q{suffix}"
    if suffix == ".jsonl":  # a blank line before the bad record
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n\n" for r in rows)
        path.write_text(text, encoding="utf-8")
    elif suffix == ".csv":
        _write_csv(path, rows)
    else:
        pl.DataFrame(rows).write_parquet(path)
    with pytest.raises(InputError, match="question is empty") as info:
        load_question_file(path)
    err = info.value
    assert err.field == "question"
    if suffix == ".parquet":
        n = _row(err, path)
        assert pl.read_parquet(path)["doc_id"][n - 1] == "BAD"
    else:
        n = _line(err, path)
        assert "BAD" in _text_line(path, n)
        # JSON Lines: records on lines 1, 3, 5; CSV: the header, then 2-3, 4, 5.
        assert n == 5


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_qa_file_place_of_a_repeated_key(tmp_path: Path, suffix: str) -> None:
    rows = [
        {"question_id": "q1", "answer": "多行\n答案", "retrieved_doc_ids": "d1"},
        {"question_id": "q2", "answer": "b", "retrieved_doc_ids": "d2"},
        {"question_id": "q1", "answer": "again", "retrieved_doc_ids": "d3"},
    ]
    path = tmp_path / f"qa{suffix}"
    if suffix == ".jsonl":
        text = "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n"
        path.write_text("\n" + text, encoding="utf-8")  # a leading blank line
    elif suffix == ".csv":
        _write_csv(path, rows)
    else:
        pl.DataFrame(rows).write_parquet(path)
    with pytest.raises(InputError, match="repeats") as info:
        build_qa_index(QaFileSystemConfig(path=str(path)), tmp_path / "index")
    err = info.value
    message = str(err)
    if suffix == ".parquet":
        assert _row(err, path) == 3
        assert "repeats row 1 (1-based);" in message
        assert pl.read_parquet(path)["answer"][2] == "again"
    else:
        n = _line(err, path)
        first = 2  # after the blank line / the header
        assert f"repeats line {first};" in message
        assert "again" in _text_line(path, n)
        assert '"q1"' in _text_line(path, first) or _text_line(path, first)[:3] == "q1,"
