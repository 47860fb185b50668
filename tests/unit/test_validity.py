"""A fast version of the validity study (``benchmarks/validity.py``).

Fewer studies and resamples than the benchmark (whose numbers are in
BENCHMARKS.md); the bounds are wide enough for that sample size, yet each fails
if the property breaks: normalisation that does not remove judge offsets and
slopes, intervals that are too narrow or off centre (e.g. averaging fewer
judges than the headline), a separation rule that passes blind judges.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from cube_ray.aggregate import evaluate_replicates

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "validity.py"


@pytest.fixture(scope="module")
def validity() -> ModuleType:
    spec = importlib.util.spec_from_file_location("validity_bench", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_judge_estimates_the_true_cube(validity: ModuleType) -> None:
    """On a large study each judge's CuBE is near the truth, whatever its offset,
    slope and noise: the truth the coverage is measured against is right."""
    answers, scores = validity.simulate_tables(np.random.default_rng(0), 10_000)
    rep = evaluate_replicates(answers, scores)
    assert rep.recall[0, 0] == pytest.approx(validity.RECALL, abs=0.01)
    for ji in range(len(rep.judges)):
        assert rep.cube[ji, 0, 0] == pytest.approx(validity.TRUE_CUBE, abs=1.0)
    raw = 10 * rep.trimmed["system"][:, 0, 0, -1]
    assert np.ptp(raw) > 20  # the raw scores of the judges are far apart


def test_normalisation_cuts_the_cross_judge_sd(validity: ModuleType) -> None:
    sp = validity.spread(100, 10, seed=1)
    assert sp.cut >= 0.5
    assert sp.cube < sp.normalised < sp.raw


def test_interval_coverage(validity: ModuleType) -> None:
    cov = validity.coverage(100, 30, resamples=200, seed=2)
    # 95 % nominal; with 30 studies a coverage below 80 % has probability
    # < 1e-3 if the interval is right.
    assert cov.covered["percentile"] >= 0.8
    assert cov.covered["bca"] >= 0.8
    assert abs(cov.mean_estimate - validity.TRUE_CUBE) < 2.0


def test_separation_rule_false_positives_and_power(validity: ModuleType) -> None:
    blind = validity.separation_rates(30, 300, gap=0.0, noise=3.0, seed=3)
    assert blind <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 300)
    power = validity.separation_rates(100, 100, gap=1.5, noise=3.0, seed=4)
    assert power >= 0.9
    # The rule of CUBE_METHOD.md section 10 on hand-made cases.
    tiny = np.array([5.0, 5.1, 5.05, 5.1, 5.05, 5.1, 5.1, 5.05])
    gap, p, separated = validity.separation(tiny, np.full(8, 5.0))
    assert p < 0.05
    assert gap < 0.5
    assert not separated  # consistent but useless as a denominator
    gap, p, separated = validity.separation(np.full(5, 9.0), np.full(5, 1.0))
    assert (gap, p, separated) == (8.0, 1.0, False)  # fewer than 6 pairs
