"""How reading blocks from Ray's object store shows up in a driver's RSS.

    python benchmarks/plasma_rss.py

A local Ray; the driver gets sixty 10 MB arrays one after another from tasks,
dropping each before the next. Prints the driver's private (``RssAnon``) and
shared (``RssFile``, ``RssShmem``) resident memory before and after, and the
largest mappings by RSS: the pages of the plasma store the driver touched stay
in its RSS although it holds no object.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import ray

from benchmarks.pipeline_scale import status_bytes


def status_mb() -> dict[str, int]:
    return {k: v // 2**20 for k, v in status_bytes(os.getpid()).items()}


def largest_mappings(n: int = 4) -> list[tuple[str, int]]:
    rss: dict[str, int] = {}
    current = None
    with Path("/proc/self/smaps").open(encoding="utf-8") as fh:
        for line in fh:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                parts = line.split()
                current = parts[5] if len(parts) > 5 else "[anon]"
            elif line.startswith("Rss:") and current:
                rss[current] = rss.get(current, 0) + int(line.split()[1]) // 1024
    return sorted(rss.items(), key=lambda kv: -kv[1])[:n]


@ray.remote
def make(i: int) -> np.ndarray:
    return np.full(10_000_000, i % 256, dtype=np.uint8)


def main() -> None:
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    before = status_mb()
    for i in range(60):
        block = ray.get(make.remote(i))
        assert int(block.sum()) == 10_000_000 * (i % 256)
        del block
    after = status_mb()
    mappings = largest_mappings()
    ray.shutdown()
    print("MB before", before)
    print("MB after ", after)
    print("largest mappings (MB)", mappings)


if __name__ == "__main__":
    main()
