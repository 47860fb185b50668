"""Shared helpers of the pipeline tests: a small corpus, a QA file, fake configs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import yaml

from cube_ray import pipeline, schema
from cube_ray.config import RunConfig
from cube_ray.pipeline import RunOptions, part_files
from cube_ray.stages import KEYS

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "data" / "guangdong_sample.jsonl"
"""120 real Guangdong records shipped with the repo (see examples/data/SOURCE.md)."""


def make_corpus(tmp: Path, n: int) -> tuple[Path, list[str]]:
    """The first ``n`` sample records; returns the file and their ids."""
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()[:n]
    path = tmp / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, [json.loads(x)["TASK_CODE"] for x in lines]


def make_qa_file(tmp: Path, doc_ids: list[str]) -> Path:
    """A trivially built QA set: question ids are doc ids (one question per
    document); every other question retrieves its gold doc at rank 2."""
    rows = []
    for i, d in enumerate(doc_ids):
        retrieved = [doc_ids[(i + 1) % len(doc_ids)], d] if i % 2 == 0 else ["x"]
        rows.append(
            {"question_id": d, "answer": f"答复 {i}", "retrieved_doc_ids": retrieved}
        )
    path = tmp / "qa.jsonl"
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
        encoding="utf-8",
    )
    return path


def fake_config(
    tmp: Path,
    corpus: Path,
    qa: Path,
    *,
    judge_latency: float = 0.0,
    judge_batch: int = 8,
    judges: int = 2,
    judge_resources: dict[str, float] | None = None,
    generator_resources: dict[str, float] | None = None,
    ray_options: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """A run config with fake engines and a QA-file system; returns its path.

    ``ray_options`` are added to the ``ray`` section, ``extra`` replaces
    top-level sections."""
    judge_pool: dict[str, Any] = {"batch_size": judge_batch, "num_cpus": 0.5}
    if judge_resources:
        judge_pool["resources"] = judge_resources
    gen_pool: dict[str, Any] = {"batch_size": 8, "num_cpus": 0.5}
    if generator_resources:
        gen_pool["resources"] = generator_resources
    cfg: dict[str, Any] = {
        "corpus": {
            "path": str(corpus),
            "id_field": "TASK_CODE",
            "title_field": "TASK_NAME",
            "fields": [
                {"TASK_NAME": "事项名称"},
                {"DEPT_NAME": "实施机构"},
                {"accept_standard": "受理条件"},
                {"handle_time": "法定办结时限"},
            ],
        },
        "generator": {"backend": "fake", "name": "gen", "pool": gen_pool},
        "judges": {
            f"j{i + 1}": {
                "backend": "fake",
                "name": f"j{i + 1}",
                "seed": i + 1,
                "latency_s": judge_latency,
                "pool": judge_pool,
            }
            for i in range(judges)
        },
        "systems": [{"name": "rag", "kind": "qa_file", "path": str(qa), "k": 8}],
        "allow_fake_engines": True,
        "ray": {
            "num_cpus": 4,
            "write_rows": 16,
            **(ray_options or {}),
        },
    }
    if extra:
        cfg.update(extra)
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return path


def read_all(table_dir: Path) -> pl.DataFrame:
    """Every complete part file of a table, no dedup (to find duplicates)."""
    files = part_files(table_dir)
    assert files, f"no part files in {table_dir}"
    frames = [pl.from_arrow(pq.read_table(f)) for f in files]
    return pl.concat([f for f in frames if isinstance(f, pl.DataFrame)], how="vertical")


def assert_complete(run_dir: Path, n_docs: int, *, judges: int, dims: int = 4) -> None:
    """Every table has exactly the expected keys, each once."""
    expected = {
        "questions": n_docs,
        "answers": 3 * n_docs,
        "scores": 3 * n_docs * judges * dims,
    }
    for table, n in expected.items():
        df = read_all(run_dir / table)
        key = list(KEYS[table])
        assert df.height == n, (table, df.height, n)
        assert df.select(key).unique().height == n, f"duplicate keys in {table}"
        assert df[schema.CONTENT_HASH].null_count() == 0


def make_driver(tmp: Path, **ray_opts: Any) -> pipeline._Driver:
    """The driver of a 4-record fake run (nothing started), ``ray:`` options set."""
    corpus, ids = make_corpus(tmp, 4)
    qa = make_qa_file(tmp, ids)
    cfg = fake_config(tmp, corpus, qa, ray_options=ray_opts)
    options = RunOptions(run_dir=tmp / "run", progress=False, report=False)
    return pipeline._Driver(RunConfig.from_yaml(cfg), options)


NCP = ROOT.parent / "shared" / "data" / "ncp_policy_qa"
"""Human-written NCP policy questions with gold documents (research use only:
read by path, never copied into the package; see shared/data/README.md)."""


def ncp_subset(tmp: Path, n: int, *, max_chars: int = 300) -> tuple[Path, Path]:
    """The first ``n`` NCP questions whose gold document is short, with their
    documents, written to ``tmp``; returns (corpus, questions). Skips the test
    with the reason when the NCP folder is absent."""
    import pytest

    if not (NCP / "corpus.jsonl").is_file() or not (NCP / "queries.jsonl").is_file():
        pytest.skip(f"NCP policy QA data not found at {NCP} (shared/data absent)")
    docs = {}
    for line in (NCP / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        docs[rec["doc_id"]] = rec
    picked: list[dict[str, Any]] = []
    used: set[str] = set()
    for line in (NCP / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        doc = docs.get(q["gold_doc_id"])
        if doc is None or len(doc["text"]) > max_chars or q["gold_doc_id"] in used:
            continue
        used.add(q["gold_doc_id"])
        picked.append(q)
        if len(picked) == n:
            break
    corpus = tmp / "ncp_corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps(docs[d], ensure_ascii=False) + "\n" for d in sorted(used)),
        encoding="utf-8",
    )
    questions = tmp / "ncp_queries.jsonl"
    questions.write_text(
        "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in picked),
        encoding="utf-8",
    )
    return corpus, questions


def ncp_config_sections(corpus: Path, questions: Path) -> dict[str, Any]:
    """The ``corpus`` and ``questions`` sections for NCP (as in conf/ncp.yaml)."""
    return {
        "corpus": {"path": str(corpus), "id_field": "doc_id", "fields": ["text"]},
        "questions": {
            "source": "file",
            "path": str(questions),
            "question_id_field": "query_id",
            "doc_id_field": "gold_doc_id",
            "reference_answer_field": "answer",
        },
    }
