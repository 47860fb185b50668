"""Importing the aggregation and the table readers loads no heavy dependency."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("ray", "vllm", "torch")


@pytest.mark.parametrize(
    "module", ["cube_ray.aggregate", "cube_ray.tables", "cube_ray.commands.aggregate"]
)
def test_import_loads_no_ray_vllm_or_torch(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "", f"{module} imported {result.stdout.strip()}"


# Every Ray worker that runs a stage imports these; Polars and SciPy there
# would cost about 80 MB in each such process (BENCHMARKS.md, pipeline scale).
STAGE_WORKER = (
    "cube_ray.config",
    "cube_ray.stages",
    "cube_ray.pipeline.data",
    "cube_ray.pipeline.engine_pool",
    "cube_ray.pipeline.runner",
)


def test_stage_workers_load_no_polars_or_scipy() -> None:
    code = (
        f"import sys\nfor m in {STAGE_WORKER!r}: __import__(m)\n"
        "print(','.join(m for m in ('polars', 'scipy') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "", f"stage modules imported {result.stdout}"
    # The aggregation's names still resolve, from their modules, on first use.
    code = (
        "import sys, cube_ray.aggregate as a\n"
        "assert 'polars' not in sys.modules\n"
        "from cube_ray.aggregate import summarize, rank_scores\n"
        "assert summarize.__module__ == 'cube_ray.aggregate._summary'\n"
        "assert a.rank_scores is rank_scores and 'polars' in sys.modules\n"
        "assert sorted(a._HOME) == sorted(a.__all__)\n"
        "assert all(getattr(a, n) is not None for n in a.__all__)\n"
        "try:\n    a.nothing\nexcept AttributeError as e:\n    print(e)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert "has no attribute 'nothing'" in result.stdout
