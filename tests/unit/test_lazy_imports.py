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
