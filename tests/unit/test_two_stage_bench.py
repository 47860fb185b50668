"""``benchmarks/two_stage.py`` runs its studies over worker processes.

A study's result depends on its own seed only, so the table is the same with
one worker or several; the JSON holds every row and every study; and the
benchmark runs where only numpy, scipy, polars, pydantic, yaml (and pyarrow,
which ``cube_ray.schema`` needs) are installed: no ray, vllm or torch.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARGS = [
    "--studies",
    "2",
    "--resamples",
    "20",
    "--pilots",
    "60",
    "--targets",
    "8",
    "--fixed-n",
    "40",
]
KEYS = ("row", "seed", "covered", "half", "n")
EXACT = ("row", "seed", "covered", "n")


HEAVY = ("ray", "vllm", "torch")


def _run(tmp_path: Path, workers: int) -> dict[str, object]:
    out = tmp_path / f"w{workers}.json"
    # After the run, the heavy modules the benchmark's process had loaded.
    code = (
        "import runpy, sys\n"
        "sys.argv = sys.argv[1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
        f"print('heavy:', sorted(set({HEAVY!r}) & set(sys.modules)))\n"
    )
    # One Polars thread in both runs: with one worker the studies run in this
    # process, whose Polars would otherwise use every core and sum in another
    # order than the spawned workers (one thread each) -- a last-bit difference
    # (6.381176229070032 against ...036) that once failed this test by chance.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "POLARS_MAX_THREADS": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(ROOT / "benchmarks" / "two_stage.py"),
            *ARGS,
            "--workers",
            str(workers),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "heavy: []" in result.stdout, result.stdout[-2000:]
    report: dict[str, object] = json.loads(out.read_text())
    return report


@pytest.mark.timeout(300)
def test_workers_do_not_change_the_results(tmp_path: Path) -> None:
    one = _run(tmp_path, 1)
    two = _run(tmp_path, 2)
    picked = [
        [{k: r[k] for k in KEYS} for r in report["studies"]]  # type: ignore[attr-defined]
        for report in (one, two)
    ]
    assert len(picked[0]) == len(picked[1]) == 4
    for a, b in zip(*picked, strict=True):
        # Same seed, same verdict, same n; the half-width within 1e-12 (bit
        # equality is not promised where float sums may run in another order).
        assert {k: a[k] for k in EXACT} == {k: b[k] for k in EXACT}
        assert math.isclose(a["half"], b["half"], rel_tol=1e-12, abs_tol=1e-12)
    rows = {r["row"]: r for r in one["rows"]}  # type: ignore[union-attr]
    assert set(rows) == {"two-stage n0=60 H=8", "fixed n=40"}
    assert rows["two-stage n0=60 H=8"]["studies"] == 2
    assert rows["fixed n=40"]["mean_n"] == 40
    assert all(r["cpu_s_per_study"] > 0 for r in rows.values())
    assert two["workers"] == 2


def test_stratified_counts_stop_at_the_corpus() -> None:
    """``proportional(n)`` draws from a corpus of 10,000: exact shares at n and
    no silent cap above it (the population's truth once took 10,000 questions
    for the 200,000 it asked for)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "two_stage_bench", ROOT / "benchmarks" / "two_stage.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    assert module.proportional(300) == {
        "easy": 120,
        "usual": 90,
        "hard": 60,
        "obscure": 30,
    }
    with pytest.raises(ValueError, match="at most 10000"):
        module.proportional(200_000)
