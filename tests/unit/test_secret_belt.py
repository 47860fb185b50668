"""What cube_ray writes after a run masks its secrets too (issue 34, item 8).

The tables of a run are masked as they are written; the audit sheet and the
report mask again (a run dir written by an older version, or a table edited
by hand), with the secrets the recorded config names, as set now. And the
part-file writer's masking itself, on an Arrow table.
"""

from __future__ import annotations

import base64
import json
import zipfile
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from cube_ray.audit import write_worksheet
from cube_ray.credentials import recorded_secrets, secret_names
from cube_ray.pipeline.parts import redact_table
from tests.unit.test_audit import make_run

KEY_VAR = "CUBE_RAY_BELT_KEY"
KEY = "sk-belt-" + "Tn5y" * 6


def test_the_audit_sheet_masks_a_secret_the_tables_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = make_run(tmp_path / "run", n=6)
    answers = pl.read_parquet(run / "answers" / "part-00000.parquet")
    leaked = answers.with_columns(
        pl.format("{} key={}", pl.col("answer"), pl.lit(KEY)).alias("answer")
    )
    leaked.write_parquet(run / "answers" / "part-00000.parquet")
    config = {"judges": {"j": {"backend": "openai_http", "api_key_env": KEY_VAR}}}
    (run / "manifest.json").write_text(json.dumps({"config": config}), "utf-8")
    monkeypatch.setenv(KEY_VAR, KEY)
    sheet = write_worksheet(run, size=3)
    text = sheet.sheet.read_text(encoding="utf-8-sig")
    assert KEY not in text
    assert "key=***" in text
    if sheet.xlsx is not None:
        with zipfile.ZipFile(sheet.xlsx) as book:
            for name in book.namelist():
                assert KEY.encode() not in book.read(name), name
    # Without the variable set here nothing is known to mask.
    monkeypatch.delenv(KEY_VAR)
    assert recorded_secrets({"config": config}) == ()


def test_secret_names_of_a_recorded_config() -> None:
    config = {
        "judges": {"j": {"api_key_env": "OPENAI_API_KEY"}},
        "generator": {"backend": "vllm", "env": {"HF_TOKEN": "${HF_TOKEN}"}},
        "systems": [
            {
                "url": "https://u:${RAG_PW}@h/ask?q=${RAG_Q}",
                "headers": {"x-api-key": "${RAG_KEY}", "X-Tenant": "${TENANT}"},
            }
        ],
    }
    assert secret_names(config) == [
        "CUBE_RAY_PROMPT_KEY",
        "HF_TOKEN",
        "OPENAI_API_KEY",
        "RAG_KEY",
        "RAG_PW",
    ]


def test_the_writer_masks_every_text_column_and_counts_per_system() -> None:
    b64 = base64.b64encode(f"Bearer {KEY}".encode()).decode()
    table = pa.table(
        {
            "question_id": ["q1", "q2", "q3"],
            "system": ["rag", "rag", "zero"],
            "answer": [f"the key is {KEY}", f"encoded {b64}", None],
            "raw": [None, "fine", f"{KEY}{KEY}"],
            "rank": [1, 2, None],
        }
    )
    out, hits = redact_table(table, (KEY,))
    assert hits == {"rag": 2, "zero": 1}
    dumped = json.dumps(out.to_pylist())
    assert KEY not in dumped
    assert b64[4:-4] not in dumped
    assert out.column("answer").to_pylist()[0] == "the key is ***"
    assert out.column("raw").to_pylist()[2] == "******"
    assert out.column("rank").to_pylist() == [1, 2, None]
    assert out.schema == table.schema
    same, none = redact_table(table, ())
    assert same is table
    assert none == {}
