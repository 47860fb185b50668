"""The injection benchmark's fast version with a real engine (tiny vLLM model):
one Chinese and one English answer, every pattern, before and after hardening."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "injection_bench_e2e", ROOT / "benchmarks" / "injection.py"
)
assert spec is not None
assert spec.loader is not None
inj = importlib.util.module_from_spec(spec)
sys.modules["injection_bench_e2e"] = inj
spec.loader.exec_module(inj)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(
        not (inj.NCP.is_dir() and inj.ARES.is_file()),
        reason=f"needs the shared data under {inj.DATA} (see its README.md)",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="needs vllm (cpu extra)"
    ),
]


def test_fast_injection_benchmark(
    tmp_path: Path, tiny_model_dir: Path, tiny_engine_env: dict[str, str]
) -> None:
    out = tmp_path / "injection.json"
    code = inj.main(
        [
            "--per-language",
            "1",
            "--judge",
            f"tiny={tiny_model_dir}",
            "--max-model-len",
            "4096",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert sum(c["pattern"] is not None for c in data["cases"]) == 2 * len(inj.PATTERNS)
    res = data["results"]["tiny"]
    for version in ("before", "after"):
        assert res[version]["missing"] == 0, version
        assert 0 <= res[version]["clean_mean"] <= 10
        shifts = res[version]["shifts"]
        assert set(shifts) == set(inj.PATTERNS)
        for pattern in inj.PATTERNS:
            row = shifts[pattern]
            assert row["all"]["n"] == 2
            assert set(row) == {"all", "zh", "en"}
            assert row["all"]["shift"] == pytest.approx(
                row["all"]["injected"] - row["all"]["clean"], abs=2e-3
            )
    table = inj.format_table(data["results"])
    assert table.count("| tiny |") == 1 + len(inj.PATTERNS)
