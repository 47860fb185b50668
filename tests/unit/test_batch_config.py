"""``batch`` and ``batch_api`` of an ``openai_http`` engine: strict, priced."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from cube_ray.engines.config import (
    BatchApiConfig,
    OpenAIHttpEngineConfig,
    PriceConfig,
    engine_price,
)
from cube_ray.plan import engine_label
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

ROOT = Path(__file__).resolve().parents[2]
URL = "http://127.0.0.1:9/v1"


def _engine(**kw: Any) -> OpenAIHttpEngineConfig:
    return OpenAIHttpEngineConfig(base_url=URL, model="m", **kw)


def test_defaults_are_openais_documented_limits() -> None:
    api = _engine(batch=True).batch_api
    assert api == BatchApiConfig()
    assert (api.completion_window, api.max_requests_per_file, api.max_file_mb) == (
        "24h",
        50_000,
        200.0,
    )
    assert _engine().batch is False


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"batch_api": {"poll_s": 5}}, "batch_api is set but batch is false"),
        ({"batch": True, "batch_api": {"completion_window": "1d"}}, "pattern"),
        ({"batch": True, "batch_api": {"poll_s": 10, "poll_max_s": 5}}, "poll_max_s"),
        ({"batch": True, "batch_api": {"max_requests_per_file": 0}}, "greater"),
        ({"batch": True, "batch_api": {"window": "24h"}}, "Extra inputs"),
    ],
)
def test_bad_batch_settings_are_refused(kw: dict[str, Any], said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        _engine(**kw)


def test_batch_engines_are_priced_at_the_batch_price() -> None:
    price = {"prompt": 2.0, "completion": 8.0}
    assert engine_price(_engine(price_per_mtok=price)) == (2.0, 8.0)
    assert engine_price(_engine(batch=True, price_per_mtok=price)) == (1.0, 4.0)
    cheaper = {**price, "batch_discount": 0.25, "batch_completion": 3.0}
    assert engine_price(_engine(batch=True, price_per_mtok=cheaper)) == (0.5, 3.0)
    assert engine_price(_engine(batch=True)) is None
    with pytest.raises(ValidationError):
        PriceConfig(prompt=1, completion=1, batch_discount=0)
    assert engine_label(_engine(batch=True)) == "openai_http:m (batch)"


def test_batch_api_without_batch_through_cube_ray_run_exits_2(tmp_path: Path) -> None:
    corpus, ids = make_corpus(tmp_path, 2)
    path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg["judges"]["api"] = {
        "backend": "openai_http",
        "base_url": URL,
        "model": "m",
        "batch_api": {"max_file_mb": 100},
    }
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "cube_ray.cli", "run", str(path), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "judges.api" in proc.stderr
    assert "batch_api is set but batch is false; set batch: true" in proc.stderr
