"""How an LLM stage's writer tasks write part files, and how the driver counts them.

``_write_part`` is the function Ray Data runs in a task per finished block;
here it is called directly (no Ray). The pipeline tests in ``tests/ray/`` run
it inside real Ray Data executions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cube_ray import pipeline, schema
from cube_ray.pipeline.parts import count_unseen
from cube_ray.stages import NODE_ID

KEY = (schema.QUESTION_ID, schema.SYSTEM)
OUT = pa.schema(
    [
        (schema.QUESTION_ID, pa.string()),
        (schema.SYSTEM, pa.string()),
        (schema.ANSWER, pa.string()),
        (schema.STATUS, pa.string()),
        (schema.PROMPT_TOKENS, pa.int64()),
        (schema.COMPLETION_TOKENS, pa.int64()),
    ]
)


def _block(ids: list[str], answer: str, node: str = "n1") -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            # Columns out of order and int32 tokens: the writer selects and casts.
            schema.ANSWER: [f"{answer} {i}" for i in ids],
            schema.QUESTION_ID: ids,
            schema.SYSTEM: ["rag"] * n,
            schema.STATUS: ["ok"] * (n - 1) + ["timeout"],
            schema.PROMPT_TOKENS: pa.array([10] * n, pa.int32()),
            schema.COMPLETION_TOKENS: pa.array([3] * n, pa.int32()),
            NODE_ID: [node] * n,
        }
    )


def _write(
    directory: Path, block: pa.Table, stem: str = "part-20261130T000000Z-x-000000"
) -> dict[str, Any]:
    out = pipeline._write_part(
        block, directory=str(directory), stem=stem, key=KEY, schema_=OUT
    )
    assert out.schema == pipeline._WRITTEN
    assert out.num_rows == 1
    return out.to_pylist()[0]


def test_a_block_becomes_one_complete_part_file(tmp_path: Path) -> None:
    info = _write(tmp_path, _block(["q1", "q2", "q3"], "first"))
    files = pipeline.part_files(tmp_path, "x")
    assert [f.name for f in files] == [info["file"]]
    assert not list(tmp_path.glob(".tmp-*"))
    table = pq.read_table(files[0])
    assert table.schema == OUT  # node column dropped, columns cast and ordered
    assert table.column(schema.QUESTION_ID).to_pylist() == ["q1", "q2", "q3"]
    assert info["rows"] == 3
    assert info["prompt_tokens"] == 30
    assert info["completion_tokens"] == 9
    assert json.loads(info["statuses"]) == {"ok": 2, "timeout": 1}
    assert json.loads(info["nodes"]) == {"n1": 3}


def test_a_retried_block_replaces_its_file_instead_of_adding_rows(
    tmp_path: Path,
) -> None:
    first = _write(tmp_path, _block(["q1", "q2"], "first", node="n1"))
    # Ray retries the task on another node; a sampled answer may differ.
    again = _write(tmp_path, _block(["q1", "q2"], "second", node="n2"))
    other = _write(tmp_path, _block(["q3"], "first"))
    assert again["file"] == first["file"]
    assert other["file"] != first["file"]
    files = pipeline.part_files(tmp_path, "x")
    assert len(files) == 2
    rows = pa.concat_tables([pq.read_table(f) for f in files])
    assert sorted(rows.column(schema.QUESTION_ID).to_pylist()) == ["q1", "q2", "q3"]
    assert "second q1" in rows.column(schema.ANSWER).to_pylist()


def test_an_empty_block_writes_nothing(tmp_path: Path) -> None:
    out = pipeline._write_part(
        _block(["q1"], "a").slice(0, 0),
        directory=str(tmp_path),
        stem="part-20261130T000000Z-x-000000",
        key=KEY,
        schema_=OUT,
    )
    assert out.num_rows == 0
    assert not tmp_path.exists() or not list(tmp_path.iterdir())


def test_files_whose_description_never_arrived_are_counted_once(
    tmp_path: Path,
) -> None:
    stem = "part-20261130T000000Z-answers_rag-000003"
    seen_info = _write(tmp_path, _block(["q1", "q2"], "a"), stem)
    _write(tmp_path, _block(["q3", "q4", "q5"], "a"), stem)  # its row was lost
    _write(tmp_path, _block(["q6"], "a"), stem.replace("000003", "000002"))
    stats = pipeline.StageStats(expected=6)
    pipeline._count(stats, seen_info)
    seen = {seen_info["file"]: seen_info["rows"]}

    written = count_unseen(stats, tmp_path, stem, seen)

    assert written == 5  # this attempt's files only
    assert stats.written == 5
    assert stats.prompt_tokens == 50
    assert stats.statuses == {"ok": 3, "timeout": 2}
    assert stats.nodes == {"n1": 2}  # an undescribed file names no node
    assert len(seen) == 2
    assert count_unseen(stats, tmp_path, stem, seen) == 5
    assert stats.written == 5  # counted once


@pytest.mark.parametrize(
    ("name", "matches"),
    [
        ("part-20261130T101010123456Z-scores_j1-000002-0123456789abcdef.parquet", True),
        ("part-20261130T101010123456Z-scores_j1-000002.parquet", True),
        ("part-20261130T101010123456Z-scores_j1-000002-0123.parquet", False),
        (
            "part-20261130T101010123456Z-scores_j10-000002-0123456789abcdef.parquet",
            False,
        ),
    ],
)
def test_part_file_names_of_a_stage(tmp_path: Path, name: str, matches: bool) -> None:
    (tmp_path / name).write_bytes(b"")
    assert bool(pipeline.part_files(tmp_path, "scores:j1")) is matches
