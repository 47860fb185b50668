"""A run dir belongs to one run, and a damaged part is set aside and redone.

Real ``cube-ray run`` processes (local Ray, fake engines): another corpus or
config into a run's dir is refused naming both fingerprints; an added judge
with a smaller ``--limit`` runs, and the summary counts only the current
questions; a truncated part and a part with one flipped bit are refused by
``aggregate``/``report`` (file and fix named) and set aside by the next run,
which recomputes exactly their rows; a system whose retrieved ids are not
corpus ids stops the run instead of scoring 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from cube_ray.pipeline import part_files
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

ROOT = Path(__file__).resolve().parents[2]
N_DOCS = 6


def cube_ray(*args: Any, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "cube_ray.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def run(cfg: Path, run_dir: Path, log: Path, *extra: Any) -> Any:
    return cube_ray(
        "run", cfg, "--out", run_dir, "--call-log", log, "--no-progress",
        "--no-report", *extra,
    )  # fmt: skip


def calls(log: Path, stage: str) -> list[str]:
    """The keys of a stage's engine calls in a call log (``stage\tkey`` lines)."""
    if not log.exists():
        return []
    lines = log.read_text(encoding="utf-8").splitlines()
    return [line.split("\t", 1)[1] for line in lines if line.startswith(stage + "\t")]


def rounded(value: Any) -> Any:
    """A JSON value with floats rounded to 9 digits."""
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def flip_a_score_bit(path: Path) -> None:
    """Flip one bit inside the last data page of the ``score`` column."""
    meta = pq.ParquetFile(path).metadata
    rg = meta.row_group(0)
    names = [rg.column(i).path_in_schema for i in range(rg.num_columns)]
    col = rg.column(names.index("score"))
    start = col.dictionary_page_offset or col.data_page_offset
    pos = start + col.total_compressed_size - 2
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x04
    path.write_bytes(bytes(data))


@pytest.mark.timeout(1200)
def test_run_dir_belongs_to_one_run_and_heals_damaged_parts(tmp_path: Path) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    qa = make_qa_file(tmp_path, ids)
    cfg = fake_config(tmp_path, corpus, qa)
    run_dir = tmp_path / "run"
    first = run(cfg, run_dir, tmp_path / "c1.log")
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["counts"]["questions"] == N_DOCS

    # 1. Two damaged score parts: one truncated, one with a flipped bit.
    parts = part_files(run_dir / "scores")
    assert len(parts) >= 2
    truncated, flipped = parts[0], parts[-1]
    damaged_rows = sum(
        pq.ParquetFile(p).metadata.num_rows for p in [*parts[:1], flipped]
    )
    total_rows = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    flip_a_score_bit(flipped)
    (documents,) = part_files(run_dir / "documents")
    documents.write_bytes(documents.read_bytes()[:100])
    for argv in (["aggregate", run_dir], ["report", run_dir]):
        done = cube_ray(*argv)
        assert done.returncode == 2, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
        named = [p for p in (truncated, documents) if f"file {p}" in done.stderr]
        assert len(named) == 1, done.stderr
        assert "rerun the same `cube-ray run CONFIG --out RUN_DIR`" in done.stderr
    # aggregate of the flipped file alone: the page checksum catches the bit
    alone = cube_ray("aggregate", "--answers", run_dir / "answers", "--scores", flipped)
    assert alone.returncode == 2
    assert f"file {flipped}" in alone.stderr
    assert "CRC checksum verification failed" in alone.stderr

    # 2. The next run sets both aside (named on the console), redoes their rows.
    second = run(cfg, run_dir, tmp_path / "c2.log")
    assert second.returncode == 0, second.stderr[-3000:]
    console = second.stdout + second.stderr
    for path in (truncated, flipped, documents):
        assert f"part file {path} does not read" in console
        assert len(list(path.parent.glob(f"{path.name}.corrupt-*"))) == 1
    restaged = part_files(run_dir / "documents")
    assert sum(pq.ParquetFile(p).metadata.num_rows for p in restaged) == N_DOCS
    assert len(calls(tmp_path / "c2.log", "judge")) == damaged_rows
    assert calls(tmp_path / "c2.log", "questions") == []
    rows = sum(
        pq.ParquetFile(p).metadata.num_rows for p in part_files(run_dir / "scores")
    )
    assert rows == total_rows
    again = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert rounded(again) == rounded(summary)  # rows in another order: sums too

    # 3. Another corpus (same config, edited file; or another path): refused.
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    text = corpus.read_text(encoding="utf-8")
    record = json.loads(text.splitlines()[0])
    record["DEPT_NAME"] = "另一个机构"
    edited = json.dumps(record, ensure_ascii=False) + "\n"
    corpus.write_text(edited + "".join(text.splitlines(True)[1:]), encoding="utf-8")
    before = sorted((p.name, p.stat().st_mtime) for p in run_dir.rglob("*"))
    refused = run(cfg, run_dir, tmp_path / "c3.log")
    assert refused.returncode == 2
    err = refused.stderr
    assert f"run dir '{run_dir}' belongs to another run" in err
    assert (
        f"its manifest has corpus fingerprint {manifest['corpus_fingerprint']}" in err
    )
    assert f"e.g. doc_id {record['TASK_CODE']!r}, new or changed" in err
    assert "choose another --out" in err
    assert "Traceback" not in err
    assert sorted((p.name, p.stat().st_mtime) for p in run_dir.rglob("*")) == before
    corpus.write_text(text, encoding="utf-8")
    (tmp_path / "other").mkdir()
    other, _ = make_corpus(tmp_path / "other", 3)
    data = yaml.safe_load(cfg.read_text(encoding="utf-8"))
    data["corpus"]["path"] = str(other)
    cfg_b = tmp_path / "b.yaml"
    cfg_b.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    refused = run(cfg_b, run_dir, tmp_path / "c4.log")
    assert refused.returncode == 2
    assert "this config has" in refused.stderr
    assert f'corpus.path ("{corpus}" -> "{other}")' in refused.stderr
    assert not (tmp_path / "c4.log").exists()

    # 4. An added judge and a smaller --limit only add (or leave out) work: the
    #    run goes on, and the summary counts the current questions only.
    data = yaml.safe_load(cfg.read_text(encoding="utf-8"))
    data["judges"]["j3"] = {**data["judges"]["j1"], "name": "j3", "seed": 3}
    data["aggregate"] = {"trim": 0.2}
    cfg.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    grown = run(cfg, run_dir, tmp_path / "c5.log", "--limit", 4)
    assert grown.returncode == 0, grown.stderr[-3000:]
    judged = {key.split("/")[2] for key in calls(tmp_path / "c5.log", "judge")}
    assert judged == {"j3"}
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["counts"]["questions"] == 4
    assert summary["judge_names"] == ["j1", "j2", "j3"]
    assert summary["parameters"]["trim"] == 0.2

    # 5. aggregate RUN_DIR takes the run's options; flags override them.
    out = tmp_path / "s.json"
    assert cube_ray("aggregate", run_dir, "--out", out).returncode == 0
    mine = json.loads(out.read_text(encoding="utf-8"))
    assert mine["parameters"]["trim"] == 0.2
    assert mine["parameters"]["k"] == {"rag": 8}
    assert cube_ray("aggregate", run_dir, "--out", out, "--trim", 0).returncode == 0
    assert json.loads(out.read_text(encoding="utf-8"))["parameters"]["trim"] == 0.0


@pytest.mark.timeout(900)
def test_unknown_retrieved_ids_stop_the_run(tmp_path: Path) -> None:
    corpus, ids = make_corpus(tmp_path, 4)
    qa = make_qa_file(tmp_path, [f"other-{i}" for i in ids])
    rows = [json.loads(x) for x in qa.read_text(encoding="utf-8").splitlines()]
    for row, doc_id in zip(rows, ids, strict=True):
        row["question_id"] = doc_id  # answers every question, with foreign ids
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = fake_config(tmp_path, corpus, qa)
    done = run(cfg, tmp_path / "run", tmp_path / "c.log")
    assert done.returncode == 2, done.stderr[-3000:]
    err = done.stderr[done.stderr.index("cube-ray: error: ") :]
    assert (
        "system 'rag': 4 of its 4 answers retrieved ids none of which is a "
        "document of the corpus" in err
    )
    assert f"e.g. question {rows[0]['question_id']!r} got ids " in err
    assert rows[0]["answer"] in err
    assert "check its retrieved_field" in err
    assert calls(tmp_path / "c.log", "judge") == []
