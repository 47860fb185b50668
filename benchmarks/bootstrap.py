"""Speed of the headline's bootstrap: B = 1000 replicates, BCa (issue 23).

The tables are the validity study's simulated jury (``benchmarks/validity.py``:
four judges, three dimensions, one system, integer scores 0-10 as real judges
give). Times :func:`cube_ray.aggregate.bootstrap_cube`: 1000 resamples, the
point replicate and the BCa jackknife (200 groups), judges held fixed.

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/bootstrap.py --sizes 2000 200000
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np

from cube_ray.aggregate import bootstrap_cube


def _validity() -> object:
    path = Path(__file__).with_name("validity.py")
    spec = importlib.util.spec_from_file_location("validity_bench", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 200_000])
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--method", choices=["bca", "percentile"], default="bca")
    args = parser.parse_args()
    validity = _validity()
    print(
        f"# bootstrap: {platform.node()} cpus={os.cpu_count()} "
        f"B={args.resamples} method={args.method}"
    )
    print("| questions | score rows | seconds | interval of CuBE | defined |")
    print("|---:|---:|---:|---|---:|")
    for n in args.sizes:
        answers, scores = validity.simulate_tables(  # type: ignore[attr-defined]
            np.random.default_rng(0), n, integer=True
        )
        t0 = time.perf_counter()
        result = bootstrap_cube(
            answers, scores, n_resamples=args.resamples, seed=0, method=args.method
        )["rag"]
        elapsed = time.perf_counter() - t0
        lo, hi = result.cube
        print(
            f"| {n} | {scores.height} | {elapsed:.1f} | [{lo:.3f}, {hi:.3f}] | "
            f"{result.n_defined} |",
            flush=True,
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MB")


if __name__ == "__main__":
    main()
