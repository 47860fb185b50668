"""``cube-ray plan --half-width``: a value out of bounds is a sentence and exit 2.

``1e-300`` overflowed the sample size (an OverflowError traceback); the
bounds are :data:`cube_ray.sizing.HALF_WIDTH_RANGE`, checked before the pilot
is read.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cube_ray.sizing import HALF_WIDTH_RANGE, required_n

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("value", ["1e-300", "0", "-2", "nan", "inf", "1e300", "100.5"])
def test_an_out_of_bounds_half_width_is_exit_2_without_a_traceback(
    tmp_path: Path, value: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cube_ray.cli", "plan", str(tmp_path),
         f"--half-width={value}"],
        capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    low, high = HALF_WIDTH_RANGE
    assert proc.stderr.startswith(
        f"cube-ray: error: --half-width must be {low} to {high} CuBE points, got "
    ), proc.stderr
    assert "--half-width 2" in proc.stderr  # the fix


def test_the_bounds_keep_the_sample_size_finite() -> None:
    low, high = HALF_WIDTH_RANGE
    # The widest pilot interval (100 points) at the smallest target.
    assert required_n(10_000, high, low) == 10_000 * 10_000**2
    assert required_n(60, 10.0, high) == 1
    with pytest.raises(ValueError, match=r"must be 0\.01 to 100\.0"):
        required_n(60, 10.0, 1e-300)
