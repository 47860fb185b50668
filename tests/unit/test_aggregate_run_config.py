"""``cube-ray aggregate RUN_DIR`` gives the summary the run wrote (section 12).

The run's config in ``manifest.json`` gives what only it knows: which judge
shares a model with a writer ("judges its own model's answers", and the
headline without those judges beside the headline). Real tables: the worked
example (three judges, two systems); real configs validated by ``RunConfig``.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from cube_ray.cli import main
from cube_ray.config import RunConfig
from cube_ray.pipeline import summarize_run
from cube_ray.qualification import OWN_MODEL
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

WORKED = Path(__file__).resolve().parents[2] / "examples" / "worked"
SYSTEMS = ("rag@bm25", "rag@hybrid")


def _run_dir(tmp_path: Path) -> tuple[Path, RunConfig]:
    """A run dir of the worked example's tables, judged by HTTP judges whose
    judge-a is the generator's model (Qwen) and judge-b rag@hybrid's (GLM)."""
    if not WORKED.is_dir():
        pytest.skip(f"worked example not found at {WORKED}")
    corpus, ids = make_corpus(tmp_path, 4)
    qa = make_qa_file(tmp_path, ids)
    cfg = yaml.safe_load(fake_config(tmp_path, corpus, qa).read_text(encoding="utf-8"))
    http = {"backend": "openai_http", "base_url": "http://127.0.0.1:9/v1"}
    cfg["generator"] = {**http, "model": "Qwen/Qwen2.5-7B-Instruct"}
    cfg["judges"] = {
        "judge-a": {**http, "model": "qwen2.5-7b-instruct"},
        "judge-b": {**http, "model": "glm-4-9b-chat"},
        "judge-c": {**http, "model": "llama-3.1-8b-instruct"},
    }
    cfg["systems"] = [
        {"name": "rag@bm25", "kind": "qa_file", "path": str(qa), "k": 8},
        {
            "name": "rag@hybrid",
            "kind": "qa_file",
            "path": str(qa),
            "k": 8,
            "model": "/models/glm-4-9b-chat",
        },
    ]
    config = RunConfig.model_validate(cfg)
    run_dir = tmp_path / "run"
    for table in ("answers", "scores"):
        (run_dir / table).mkdir(parents=True)
        pl.read_parquet(WORKED / f"{table}.parquet").write_parquet(
            run_dir / table / "part-00000.parquet"
        )
    manifest = {"config": config.manifest_config()}
    (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return run_dir, config


def _same(a: Any, b: Any) -> bool:
    """Equal JSON documents, floats to 1e-9 (the run reads lean tables: the
    summation order may differ in the last digit)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9, abs=1e-12)
    return bool(a == b)


def _aggregate(run_dir: Path, out: Path) -> dict[str, Any]:
    assert main(["aggregate", str(run_dir), "--resamples", "0", "--out", str(out)]) == 0
    data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return data


def test_aggregate_run_dir_equals_the_runs_summary(tmp_path: Path) -> None:
    run_dir, config = _run_dir(tmp_path)
    run = summarize_run(config, run_dir, intervals=False)
    assert run is not None
    got = _aggregate(run_dir, tmp_path / "s.json")
    assert got.pop("inputs") == {
        "answers": str(run_dir / "answers"),
        "scores": str(run_dir / "scores"),
    }
    want = run.model_dump(mode="json")
    # Only where the tables were read from is said by the command alone.
    assert want.pop("inputs") is None
    assert _same(got, want)

    own = {(f["judge"], f["system"]) for f in got["flags"] if f["flag"] == OWN_MODEL}
    assert own == {("judge-a", "generator"), ("judge-b", "rag@hybrid")}
    # Beside each headline: the CuBE without its own-model judges, from the
    # per-judge CuBE (the generator's judge counts for every system).
    for system, kept in (
        ("rag@bm25", ["judge-b", "judge-c"]),
        ("rag@hybrid", ["judge-c"]),
    ):
        across = got["across_judges"][system]
        assert set(across["judges"]) == {"judge-a", "judge-b", "judge-c"}
        cube = [got["judges"][j]["cube"][system] for j in kept]
        block = across["without_own_model"]
        assert block["judges"] == kept
        assert block["n_judges"] == len(kept)
        assert block["mean"] == pytest.approx(statistics.fmean(cube))
        assert block["mean"] != pytest.approx(across["cube"]["mean"])
        if len(kept) >= 2:
            assert block["sd"] == pytest.approx(statistics.stdev(cube))
        else:
            assert block["sd"] is None


def test_a_config_that_no_longer_validates_costs_only_its_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, _ = _run_dir(tmp_path)
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["config"]["judges"]["judge-a"]["temperature_typo"] = 0.0
    path.write_text(json.dumps(manifest), encoding="utf-8")
    got = _aggregate(run_dir, tmp_path / "s.json")
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "no longer validates" in line]
    assert len(lines) == 1
    assert str(path) in lines[0]
    assert "judges.judge-a" in lines[0]
    assert not [f for f in got["flags"] if f["flag"] == OWN_MODEL]
    for system in SYSTEMS:
        assert "without_own_model" not in got["across_judges"][system]
        assert got["across_judges"][system]["cube"]["mean"] is not None
