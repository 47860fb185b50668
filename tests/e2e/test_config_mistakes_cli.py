"""The documented config mistakes fail in ``--dry-run`` and at ``run`` start,
before Ray or any engine starts: exit 2, one message naming file and field."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cube_ray.cli import main
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file


def _k0(cfg: dict[str, Any], tmp: Path) -> str:
    cfg["aggregate"] = {"k": 0}
    return "aggregate.k is 0; it must be >= 1"


def _unknown_weight(cfg: dict[str, Any], tmp: Path) -> str:
    cfg["aggregate"] = {"weights": {"relevance": 1, "relevence": 1}}
    return "aggregate.weights.relevence: 'relevence' is not a dimension"


def _expected_without_logprobs(cfg: dict[str, Any], tmp: Path) -> str:
    cfg["judges"]["j2"] = {
        "backend": "openai_http",
        "base_url": "http://127.0.0.1:9/v1",
        "model": "m",
        "score_mode": "expected",
    }
    return "judges.j2.score_mode is 'expected' but judges.j2.logprobs is false"


def _missing_template(cfg: dict[str, Any], tmp: Path) -> str:
    cfg["prompts"] = {"judge": str(tmp / "judge_zh.txt")}
    return f"prompts.judge: prompt template file '{tmp / 'judge_zh.txt'}'"


def _missing_rubric(cfg: dict[str, Any], tmp: Path) -> str:
    cfg["dimensions"] = [{"name": "relevance"}, {"name": "tone"}]
    return "dimensions[1].rubric: dimension 'tone' has no rubric"


MISTAKES: dict[str, Callable[[dict[str, Any], Path], str]] = {
    "k0": _k0,
    "unknown_weight": _unknown_weight,
    "expected_without_logprobs": _expected_without_logprobs,
    "missing_template": _missing_template,
    "missing_rubric": _missing_rubric,
}


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_mistake_fails_before_any_work(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    mistake: str,
    dry_run: bool,
) -> None:
    import yaml

    corpus, ids = make_corpus(tmp_path, 4)
    qa = make_qa_file(tmp_path, ids)
    path = fake_config(tmp_path, corpus, qa)
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    expected = MISTAKES[mistake](cfg, tmp_path)
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "run"
    calls = tmp_path / "calls.log"
    argv = ["run", str(path), "--out", str(run_dir), "--call-log", str(calls)]
    code = main([*argv, "--dry-run"] if dry_run else argv)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"cube-ray: error: config file '{path}' is invalid")
    assert expected in err
    assert "Traceback" not in err
    assert not run_dir.exists()
    assert not calls.exists()
