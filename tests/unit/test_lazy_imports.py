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
    # Not even the aggregation's package: the options models the config needs
    # live in the config (cube_ray.config._scoring), so nothing lazy is needed.
    code = (
        f"import sys\nfor m in {STAGE_WORKER!r}: __import__(m)\n"
        "agg = [m for m in sys.modules if m.startswith('cube_ray.aggregate')]\n"
        "print(','.join(agg))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "", f"stage modules imported {result.stdout}"


def test_the_aggregation_exports_each_name_from_its_module() -> None:
    """``cube_ray.aggregate`` imports eagerly and names each export once
    (``name as name``): every public name is its home module's object."""
    import importlib
    import inspect

    import cube_ray.aggregate as a

    public = {n: v for n, v in vars(a).items() if not n.startswith("_")}
    exported = {n: v for n, v in public.items() if not inspect.ismodule(v)}
    assert len(exported) > 100
    for name, value in exported.items():
        home = getattr(value, "__module__", None)
        if home and home.startswith("cube_ray."):
            assert getattr(importlib.import_module(home), name) is value, name
    assert a.summarize.__module__ == "cube_ray.aggregate._summary"
    assert a.AggregateOptions.__module__ == "cube_ray.config._scoring"
