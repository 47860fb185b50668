"""The qa_file system and the question-file loader (bring your own questions)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from cube_ray import schema
from cube_ray.errors import InputError
from cube_ray.systems import (
    QaFileSystemConfig,
    QuestionIn,
    SystemAnswer,
    SystemUnderTest,
    build_system,
    load_question_file,
)
from cube_ray.systems.qa_file import QaFileSystem, build_qa_index, qa_index_path

NCP = Path(__file__).resolve().parents[3] / "shared" / "data" / "ncp_policy_qa"

QUESTIONS = [
    QuestionIn("q1", "How do I renew?", "d1"),
    QuestionIn("q2", "What does it cost?", "d2"),
    QuestionIn("q3", "Unanswered?", "d3"),
]


def _write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
        encoding="utf-8",
    )
    return path


def _qa(path: Path, **kw: object) -> SystemUnderTest:
    cfg = QaFileSystemConfig(path=str(path), **kw)  # type: ignore[arg-type]
    return build_system(cfg, documents_path="unused", generator=None)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_qa_file_formats_and_retrieved_encodings(tmp_path: Path, fmt: str) -> None:
    rows = {
        "question_id": ["q1", "q2"],
        "answer": ["Renew online.", "Free."],
        "retrieved_doc_ids": ['["d1", "d9"]', "d7, d2"],
    }
    path = tmp_path / f"qa.{fmt}"
    if fmt == "jsonl":
        _write_jsonl(
            path,
            [
                {
                    "question_id": "q1",
                    "answer": "Renew online.",
                    "retrieved_doc_ids": ["d1", "d9"],
                },
                {"question_id": "q2", "answer": "Free.", "retrieved_doc_ids": "d7, d2"},
            ],
        )
    elif fmt == "csv":
        pl.DataFrame(rows).write_csv(path)
    else:
        pl.DataFrame(rows).write_parquet(path)
    system = _qa(path, name="rag@ext", k=4)
    assert isinstance(system, SystemUnderTest)
    assert (system.name, system.k) == ("rag@ext", 4)
    result = system.answer(QUESTIONS)
    expected = [
        SystemAnswer("Renew online.", ["d1", "d9"]),
        SystemAnswer("Free.", ["d7", "d2"]),
        SystemAnswer(None, [], status="missing_in_qa_file"),
    ]
    assert result == expected


def test_qa_file_parquet_list_column_and_match_by_text(tmp_path: Path) -> None:
    path = tmp_path / "qa.parquet"
    pl.DataFrame(
        {
            "q": ["  How do I renew?", "What does it cost?"],
            "reply": ["A", None],
            "docs": [["d1"], []],
        }
    ).write_parquet(path)
    system = _qa(path, question_field="q", answer_field="reply", retrieved_field="docs")
    result = system.answer(QUESTIONS)
    assert result[0] == SystemAnswer("A", ["d1"])
    assert result[1] == SystemAnswer(None, [], status="empty_answer_in_qa_file")
    assert result[2].status == "missing_in_qa_file"


def test_qa_file_bad_json_names_file_row_field(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "qa.jsonl",
        [
            {"question_id": "q1", "answer": "x", "retrieved_doc_ids": "[]"},
            {"question_id": "q2", "answer": "y", "retrieved_doc_ids": "[d1, d2"},
        ],
    )
    with pytest.raises(InputError) as info:
        _qa(path)
    err = info.value
    assert (err.path, err.row, err.field) == (str(path), 1, "retrieved_doc_ids")
    assert "JSON list" in str(err)


def test_qa_file_missing_column_and_duplicates(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "a.jsonl", [{"question_id": "q1", "answer": "x"}])
    with pytest.raises(InputError, match=r"lacks column\(s\) \['retrieved_doc_ids'\]"):
        _qa(path)
    dup = _write_jsonl(
        tmp_path / "b.jsonl",
        [{"question_id": "q1", "answer": "x", "retrieved_doc_ids": []}] * 2,
    )
    with pytest.raises(InputError, match=r"line 2, .*repeats line 1;") as info:
        _qa(dup)
    assert info.value.row == 1
    bad = tmp_path / "c.jsonl"
    bad.write_text('{"question_id": "q1"}\nnot json\n', encoding="utf-8")
    with pytest.raises(InputError, match="not valid JSON") as info:
        _qa(bad)
    assert info.value.row == 1
    with pytest.raises(InputError, match="not found"):
        _qa(tmp_path / "nope.jsonl")
    odd = tmp_path / "a.xlsx"
    odd.write_text("x", encoding="utf-8")
    with pytest.raises(InputError, match=r"suffix '\.xlsx'"):
        _qa(odd)


def test_question_file_columns_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    pl.DataFrame(
        {"question": ["A?", "B?"], "doc_id": ["007", "008"], "answer": ["a", ""]}
    ).write_csv(path)
    df = load_question_file(path)
    assert df.columns == [
        schema.QUESTION_ID,
        schema.DOC_ID,
        schema.QUESTION,
        schema.REFERENCE_ANSWER,
    ]
    assert df[schema.DOC_ID].to_list() == ["007", "008"]  # leading zeros kept
    assert df[schema.REFERENCE_ANSWER].to_list() == ["a", None]
    assert df[schema.QUESTION_ID].str.starts_with("q-").all()
    again = load_question_file(path)
    assert again.equals(df)  # hashed ids are stable


def test_question_file_errors(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "q.jsonl",
        [
            {"id": 1, "question": "A?", "gold": "d1"},
            {"id": 2, "question": " ", "gold": "d2"},
        ],
    )
    with pytest.raises(InputError, match="no gold document id column"):
        load_question_file(path)
    with pytest.raises(InputError, match="question is empty") as info:
        load_question_file(path, doc_id_field="gold")
    assert (info.value.row, info.value.field) == (1, "question")
    ok = _write_jsonl(
        tmp_path / "ok.jsonl", [{"id": 1, "question": "A?", "gold": "d1"}]
    )
    with pytest.raises(InputError, match="not a document of the corpus"):
        load_question_file(ok, doc_id_field="gold", known_doc_ids={"d2"})
    df = load_question_file(ok, doc_id_field="gold", known_doc_ids={"d1"})
    assert df[schema.QUESTION_ID].to_list() == ["1"]
    dup = _write_jsonl(
        tmp_path / "dup.jsonl",
        [{"question_id": "x", "question": "A?", "doc_id": "d"}] * 2,
    )
    with pytest.raises(InputError, match=r"line 2, .*repeats line 1;"):
        load_question_file(dup)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(InputError, match="has no rows"):
        load_question_file(empty, doc_id_field="doc_id")


@pytest.mark.skipif(not NCP.is_dir(), reason=f"shared NCP data not found at {NCP}")
def test_question_file_ncp_human_questions() -> None:
    df = load_question_file(NCP / "queries.jsonl")
    assert df.height == 1262
    assert df[schema.QUESTION_ID].n_unique() == 1262
    assert df[schema.REFERENCE_ANSWER].null_count() == 0
    corpus_ids = {
        json.loads(line)["doc_id"]
        for line in (NCP / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    }
    checked = load_question_file(NCP / "queries.jsonl", known_doc_ids=corpus_ids)
    assert checked.equals(df)


def test_qa_index_is_built_once_per_file_and_looked_up_in_chunks(
    tmp_path: Path,
) -> None:
    n = 1203  # more keys than one SELECT takes
    path = _write_jsonl(
        tmp_path / "qa.jsonl",
        [
            {"question_id": f"q{i}", "answer": f"a{i}", "retrieved_doc_ids": [f"d{i}"]}
            for i in range(n)
        ],
    )
    cfg = QaFileSystemConfig(path=str(path))
    index_dir = tmp_path / "run" / "index"
    index = build_qa_index(cfg, index_dir)
    assert index.parent == index_dir
    stamp = index.stat().st_mtime_ns
    system = QaFileSystem(cfg, index_dir)
    assert qa_index_path(cfg, index_dir) == index
    assert index.stat().st_mtime_ns == stamp  # opened, not rebuilt
    asked = [QuestionIn(f"q{i}", "?", f"d{i}") for i in reversed(range(n))]
    asked += [QuestionIn("q5", "?", "d5"), QuestionIn("zz", "?", "d")]
    got = system.answer(asked)
    assert got[:n] == [SystemAnswer(f"a{i}", [f"d{i}"]) for i in reversed(range(n))]
    assert got[n] == SystemAnswer("a5", ["d5"])
    assert got[n + 1] == SystemAnswer(None, status="missing_in_qa_file")
    system.close()
    system.close()
    # A changed file gets its own index; nothing partial is left behind.
    _write_jsonl(
        path, [{"question_id": "q0", "answer": "new", "retrieved_doc_ids": []}]
    )
    assert qa_index_path(cfg, index_dir) != index
    again = QaFileSystem(cfg, index_dir)
    assert again.answer([QUESTIONS[0], QuestionIn("q0", "?", "d0")]) == [
        SystemAnswer(None, status="missing_in_qa_file"),
        SystemAnswer("new", []),
    ]
    again.close()
    assert len(list(index_dir.glob("qa-*.sqlite"))) == 2
    assert list(index_dir.glob(".tmp-*")) == []


def test_temporary_index_is_removed_and_a_bad_file_leaves_no_index(
    tmp_path: Path,
) -> None:
    path = _write_jsonl(
        tmp_path / "qa.jsonl",
        [{"question_id": "q1", "answer": "x", "retrieved_doc_ids": []}],
    )
    system = QaFileSystem(QaFileSystemConfig(path=str(path)))
    assert system._tmp is not None
    tmp = Path(system._tmp)
    assert len(list(tmp.glob("qa-*.sqlite"))) == 1
    system.close()
    assert not tmp.exists()
    dup = _write_jsonl(
        tmp_path / "dup.jsonl",
        [
            {"question_id": "q1", "answer": "x", "retrieved_doc_ids": []},
            {"question_id": "q2", "answer": "y", "retrieved_doc_ids": []},
            {"question_id": "q1", "answer": "z", "retrieved_doc_ids": []},
        ],
    )
    index_dir = tmp_path / "run" / "index"
    with pytest.raises(InputError, match=r"line 3, .*repeats line 1;") as info:
        build_qa_index(QaFileSystemConfig(path=str(dup)), index_dir)
    assert (info.value.path, info.value.row, info.value.field) == (
        str(dup),
        2,
        "question_id",
    )
    assert not index_dir.exists()
