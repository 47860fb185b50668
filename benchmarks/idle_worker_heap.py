"""Idle Ray workers after a join: what glibc's thresholds leave resident.

    python benchmarks/idle_worker_heap.py [--rows 1200000] [--repeat 1]

Writes two Parquet tables like a judge stage's source (answers of ~900 bytes,
a third as many documents of ~3 kB, row groups of 4,096 rows), then, for each
worker environment below, starts a fresh local Ray in a child process (glibc
reads its settings when a process starts), joins the tables with Ray Data as
the pipeline does (``DataOps.join``'s partitions, 64 MiB shuffle batches, two
footer readers, 32 MiB read units), consumes the result, and samples the
private memory (``RssAnon``) of every idle worker (``ray::IDLE``) two seconds
later. The baseline is glibc's defaults with Arrow's system allocator (the
run's workers before ``cube_ray.pipeline.heap``); the other row is the run's
``WORKER_ENV``. Reports per variant: idle workers, their summed and mean
private MB, and the wall time of the child; then the ratios against the
baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cube_ray.pipeline.heap import WORKER_ENV

_CHILD = r"""
import json, os, sys, time, glob
import psutil, ray, ray.data
d = sys.argv[1]
A = sorted(glob.glob(d + "/a*.parquet")); Q = sorted(glob.glob(d + "/q*.parquet"))
rows = int(sys.argv[2])
ray.init(address="local", num_cpus=4, include_dashboard=False)
ctx = ray.data.DataContext.get_current(); ctx.enable_progress_bars = False
ctx.shuffle_input_batch_bytes = 64 * 2**20
t0 = time.perf_counter()
a = ray.data.read_parquet(A)
q = ray.data.read_parquet(Q)
j = a.join(q, join_type="inner", num_partitions=min(256, rows // 50000 + 1),
           on=("question_id",), aggregator_ray_remote_args={"num_cpus": 0.25})
n = sum(b.num_rows for b in j.iter_batches(batch_format="pyarrow", batch_size=None))
join_s = time.perf_counter() - t0
time.sleep(2)
idle = []
for p in psutil.Process().children(recursive=True):
    try:
        if p.cmdline()[:1] == ["ray::IDLE"]:
            with open(f"/proc/{p.pid}/status") as fh:
                idle += [int(x.split()[1]) / 1024 for x in fh
                         if x.startswith("RssAnon")]
    except (psutil.Error, OSError, IndexError):
        pass
ray.shutdown()
print("RESULT " + json.dumps({"rows": n, "join_s": join_s, "idle": idle}))
"""


def write_tables(rows: int, out: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    base = "".join(chr(0x4E00 + int(x)) for x in rng.integers(0, 2000, 200_000))

    def text(n: int, k: int) -> pa.Array:
        starts = rng.integers(0, len(base) - k, n)
        return pa.array([base[s : s + k] for s in starts])

    questions = rows // 3
    per = 4096 * 25
    for i, lo in enumerate(range(0, rows, per)):
        ids = np.arange(lo, min(rows, lo + per)) % questions
        answers = text(len(ids), 300)
        table = pa.table({"question_id": ids.astype(str), "answer": answers})
        pq.write_table(table, out / f"a{i:04d}.parquet", row_group_size=4096)
    for i, lo in enumerate(range(0, questions, per)):
        ids = np.arange(lo, min(questions, lo + per))
        table = pa.table({"question_id": ids.astype(str), "doc": text(len(ids), 1000)})
        pq.write_table(table, out / f"q{i:04d}.parquet", row_group_size=4096)


def run_variant(tables: Path, rows: int, env: dict[str, str]) -> dict[str, float]:
    child_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MALLOC_")
        and k not in ("ARROW_DEFAULT_MEMORY_POOL", "RAY_ADDRESS")
    }
    child_env.update(env)
    child_env["RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"] = "2"
    child_env["RAY_DATA_PARQUET_BIN_PACKING_BYTES"] = str(32 * 2**20)
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tables), str(rows)],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    wall = time.perf_counter() - t0
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    got = json.loads(line[len("RESULT ") :])
    assert got["rows"] == rows, got["rows"]
    idle = got["idle"]
    return {
        "idle_workers": len(idle),
        "idle_sum_mb": round(sum(idle), 1),
        "idle_mean_mb": round(sum(idle) / max(len(idle), 1), 1),
        "join_s": round(got["join_s"], 1),
        "wall_s": round(wall, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_200_000)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    variants = {
        "glibc defaults (baseline)": {"ARROW_DEFAULT_MEMORY_POOL": "system"},
        "WORKER_ENV": dict(WORKER_ENV),
    }
    with tempfile.TemporaryDirectory(prefix="cube-heap-") as tmp:
        tables = Path(tmp)
        write_tables(args.rows, tables)
        results: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
        for _ in range(args.repeat):
            for name, env in variants.items():  # interleaved: load drifts alike
                results[name].append(run_variant(tables, args.rows, env))
                print(name, results[name][-1], flush=True)
    base = results["glibc defaults (baseline)"]
    ours = results["WORKER_ENV"]

    def mean(rows: list[dict[str, float]], key: str) -> float:
        return sum(r[key] for r in rows) / len(rows)

    print(
        json.dumps(
            {
                "rows": args.rows,
                "repeat": args.repeat,
                "results": results,
                "idle_mean_mb_ratio": round(
                    mean(ours, "idle_mean_mb") / mean(base, "idle_mean_mb"), 3
                ),
                "join_s_ratio": round(mean(ours, "join_s") / mean(base, "join_s"), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
