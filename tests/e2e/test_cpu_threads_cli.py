"""``pool.cpu_threads`` through ``cube-ray run``: accepted, or refused with exit 2.

What the knob does inside an engine host is tested on a real vLLM engine in
``tests/ray/test_engine_host_threads.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cube_ray.cli import main
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file


def _config(tmp_path: Path, cpu_threads: int) -> Path:
    corpus, ids = make_corpus(tmp_path, 3)
    path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg["generator"]["pool"]["cpu_threads"] = cpu_threads
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def test_cpu_threads_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    code = main(["run", str(_config(tmp_path, 2)), "--out", str(run_dir), "--dry-run"])
    assert code == 0, capsys.readouterr().err
    assert "No engine was started" in capsys.readouterr().out


def test_cpu_threads_zero_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    code = main(["run", str(_config(tmp_path, 0)), "--out", str(run_dir)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("cube-ray: error: ")
    assert "generator.fake.pool.cpu_threads: Input should be greater than" in err
    assert "Traceback" not in err
    assert not run_dir.exists()
