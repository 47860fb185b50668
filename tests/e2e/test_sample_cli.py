"""A planned sample end to end through ``cube-ray run`` and ``cube-ray plan``.

The 2,262 real Guangdong records with fake engines, a stratified sample of 60
by region: only the sampled documents get questions, the built-in RAG
searches every record, the summary says what was sampled; the same run dir
grown to 120 keeps every row it had; shrinking is refused without
``--shrink``; ``cube-ray plan`` writes its JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from cube_ray.cli import main
from cube_ray.sample import load_strata
from tests.pipeline_helpers import read_all

RECORDS = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "data"
    / "guangdong_service_items"
    / "records.jsonl"
)
SEED = 7

pytestmark = pytest.mark.skipif(
    not RECORDS.is_file(), reason=f"the shared Guangdong corpus is not at {RECORDS}"
)


def _qa_file(tmp: Path) -> Path:
    """Answers of a system under test for every record (its question id is the
    record's: generated questions take their document's id): the gold document
    retrieved first for two of three, missed for the rest."""
    path = tmp / "qa.jsonl"
    if path.exists():
        return path
    ids = [json.loads(x)["TASK_CODE"] for x in RECORDS.read_text().splitlines()]
    rows = [
        {
            "question_id": d,
            "answer": f"请携带材料到窗口办理（{i}）",
            "retrieved_doc_ids": [d] if i % 3 else [ids[i - 1]],
        }
        for i, d in enumerate(ids)
    ]
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
        encoding="utf-8",
    )
    return path


def _config(tmp: Path, size: int) -> Path:
    pool = {"batch_size": 32, "num_cpus": 0.25}
    cfg: dict[str, Any] = {
        "data_dirs": [str(RECORDS.parent)],
        "corpus": {
            "path": str(RECORDS),
            "id_field": "TASK_CODE",
            "title_field": "TASK_NAME",
            "fields": [
                {"TASK_NAME": "事项名称"},
                {"DEPT_NAME": "实施机构"},
                {"AREA_CODE_TEXT": "行政区划"},
                {"accept_standard": "受理条件"},
            ],
        },
        "sample": {"size": size, "strata": ["AREA_CODE_TEXT"], "seed": SEED},
        # The fake generator's questions are "<name> says <hash>": named after
        # a word of the corpus, they retrieve documents that hold it.
        "generator": {"backend": "fake", "name": "广州市", "pool": pool},
        "judges": {
            "j1": {"backend": "fake", "name": "j1", "seed": 1, "pool": pool},
            "j2": {"backend": "fake", "name": "j2", "seed": 2, "pool": pool},
        },
        "systems": [
            {"name": "rag", "kind": "builtin_rag", "k": 8, "pool": {"num_cpus": 0.25}},
            {"name": "rag@qa", "kind": "qa_file", "path": str(_qa_file(tmp)), "k": 8},
        ],
        "allow_fake_engines": True,
        "ray": {"num_cpus": 4, "progress": False},
    }
    path = tmp / f"run{size}.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return path


def _run(cfg: Path, run_dir: Path, *extra: str) -> int:
    return main(["run", str(cfg), "--out", str(run_dir), "--no-progress", *extra])


def _rows(run_dir: Path, table: str, ids: set[str]) -> pl.DataFrame:
    frame = read_all(run_dir / table).filter(pl.col("question_id").is_in(list(ids)))
    key = {"questions": ["question_id"], "answers": ["question_id", "system"]}.get(
        table, ["question_id", "system", "judge", "dimension"]
    )
    return frame.sort(key)


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(1500)
def test_sample_grow_shrink_and_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    records = [json.loads(x) for x in RECORDS.read_text(encoding="utf-8").splitlines()]
    population = pl.DataFrame(
        {
            "doc_id": [r["TASK_CODE"] for r in records],
            "area": [r.get("AREA_CODE_TEXT") or "(missing)" for r in records],
        }
    )
    n_total = population.height
    assert n_total == 2262

    assert _run(_config(tmp_path, 60), run_dir) == 0
    out = capsys.readouterr().out
    assert "sample: 60 of 2,262 documents, stratified by AREA_CODE_TEXT" in out

    strata = load_strata(run_dir)
    assert strata is not None
    assert strata.height == 60
    assert read_all(run_dir / "questions").height == 60
    answers = read_all(run_dir / "answers")
    assert answers["question_id"].n_unique() == 60
    assert set(answers["question_id"]) == set(strata["question_id"])
    # Per-stratum counts within +-1 of proportional.
    counts = dict(strata.group_by("stratum").len().iter_rows())
    for area, pop in population.group_by("area").len().iter_rows():
        assert abs(counts.get(area, 0) - 60 * pop / n_total) <= 1.0, area
    # The built-in RAG searched the whole corpus, not the sample.
    questions = read_all(run_dir / "questions")
    sampled_docs = set(questions["doc_id"])
    assert sampled_docs == {q for q in strata["question_id"]}  # generated: id = doc
    retrieved = {
        d
        for ids in answers.filter(pl.col("system") == "rag")["retrieved_doc_ids"]
        for d in ids
    }
    assert retrieved - sampled_docs, "no document outside the sample was retrieved"
    index_dirs = sorted(p.name for p in (run_dir / "index").iterdir())
    index_meta = {p: p.stat().st_mtime_ns for p in (run_dir / "index").rglob("*")}
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    block = summary["sample"]
    assert block["size"] == 60
    assert block["population"] == n_total
    assert block["seed"] == SEED
    assert block["fields"] == ["AREA_CODE_TEXT"]
    assert sum(s["size"] for s in block["strata"].values()) == 60
    assert {k: v["size"] for k, v in block["strata"].items()} == counts
    tables = ("questions", "answers", "scores")
    first = {t: _rows(run_dir, t, set(strata["question_id"])) for t in tables}

    # Grow to 120: the first 60 questions' rows stay byte-identical.
    assert _run(_config(tmp_path, 120), run_dir) == 0
    capsys.readouterr()
    grown = load_strata(run_dir)
    assert grown is not None
    assert grown.height == 120
    assert set(strata["question_id"]) < set(grown["question_id"])
    for table, before in first.items():
        after = _rows(run_dir, table, set(strata["question_id"]))
        assert after.equals(before), table
    assert read_all(run_dir / "answers")["question_id"].n_unique() == 120
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["sample"]["size"] == 120
    # The index over the whole corpus was not rebuilt.
    assert sorted(p.name for p in (run_dir / "index").iterdir()) == index_dirs
    assert {
        p: p.stat().st_mtime_ns for p in (run_dir / "index").rglob("*")
    } == index_meta

    # Shrinking is refused (exit 2) unless --shrink.
    before = (run_dir / "summary.json").read_text(encoding="utf-8")
    assert _run(_config(tmp_path, 60), run_dir) == 2
    err = capsys.readouterr().err
    assert "leaves out 60 of those documents" in err
    assert "--shrink" in err
    assert (run_dir / "summary.json").read_text(encoding="utf-8") == before

    # With --shrink: the rows stay, the summary and the report use the 60.
    assert _run(_config(tmp_path, 60), run_dir, "--shrink") == 0
    out = capsys.readouterr().out
    assert "sample: 60 of 2,262 documents" in out
    assert read_all(run_dir / "answers")["question_id"].n_unique() == 120
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["sample"]["size"] == 60
    assert summary["counts"]["questions"] == 60
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["report_error"] is None
    assert (run_dir / "report.html").is_file()
    # Grown back to 120: nothing to do, every row was kept.
    assert _run(_config(tmp_path, 120), run_dir) == 0
    capsys.readouterr()
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    written = {k: v["rows_written"] for k, v in manifest["stages"].items()}
    assert written.pop("documents") == n_total  # read and checked on every run
    assert set(written.values()) == {0}, written

    # The plan from this pilot of 120 questions.
    plan_path = tmp_path / "plan.json"
    code = main(["plan", str(run_dir), "--half-width", "2", "--json", str(plan_path)])
    assert code == 0
    text = capsys.readouterr().out
    assert "extrapolates" in text
    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    assert set(plan) == {"systems", "cost"}
    assert {k.split("/")[0] for k in plan["systems"]} == {"rag", "rag@qa"}
    defined = 0
    for entry in plan["systems"].values():
        assert set(entry) == {"n_pilot", "half_width_pilot", "n_required"}
        assert entry["n_pilot"] == 120
        h0 = entry["half_width_pilot"]
        if h0 is not None:
            defined += 1
            exact = 120 * (h0 / 2) ** 2  # h0 is rounded to 4 decimals in the JSON
            assert entry["n_required"] == pytest.approx(exact, rel=1e-4, abs=1.0)
    assert defined, plan["systems"]  # rag@qa retrieves: its interval is defined
    assert plan["cost"]["corpus"]["questions"] == n_total
    assert plan["cost"]["pilot"]["questions"] == 120
    for row in plan["cost"].values():
        assert set(row) == {
            "questions",
            "prompt_tokens",
            "completion_tokens",
            "engine_hours",
            "gpu_hours",
            "api_cost",
        }
        assert row["prompt_tokens"] > 0
    ratio = (
        plan["cost"]["corpus"]["prompt_tokens"] / plan["cost"]["pilot"]["prompt_tokens"]
    )
    assert ratio == pytest.approx(n_total / 120, rel=1e-3)
