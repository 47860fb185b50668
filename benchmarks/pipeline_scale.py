r"""Pipeline scale: every stage with zero-latency fake engines, records/s, peak RSS.

    python benchmarks/pipeline_scale.py --records 100000 [--records 1000000]
    python benchmarks/pipeline_scale.py --records 200000 --builtin-rag \
        --sample-size 2000       # questions for a stratified sample only
    python benchmarks/pipeline_scale.py --records 200000 --builtin-rag \
        --sample-size 2000 --grow-to 4000   # then the same dir grown

With ``--grow-to M`` the same run dir runs again with ``sample.size: M`` (in
a fresh process of its own): the figures of the growth
(wall, new questions, memory) and whether the built-in RAG's index was
rebuilt (``index_rebuilt``: any ``RUN_DIR/index`` entry added or rewritten;
the index dir ``bm25-<key>`` is keyed by the documents' fingerprint, which a
growing sample does not change).

Each size runs in a fresh process of its own (a driver that ran a smaller size
first would carry what that run left behind): a synthetic corpus
(benchmarks/synth_corpus.py, written in a child process so that it does not
count in the driver), then a full ``run_pipeline`` (documents, questions,
zero/full answers, one QA-file system, one judge x four dimensions, summary) on
a local Ray. Reports wall time, corpus records/s, engine rows/s, the driver's
peak RSS (the process that must not collect tables), split into private memory
and shared pages (shared libraries and the pages of the plasma object store it
has touched), and the peak summed RSS (and summed private RSS) of the driver
and every process it started (Ray workers, raylet), sampled every 0.5 s.
To trace that sum it also reports the peak private memory of each kind of Ray
process (its ``ray::`` name), the kinds at the summed peak, the eight largest
processes with when they peaked, and writes a 10 s time series by kind to
``benchmarks/out/scale<N>-memory.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import resource
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import yaml

from benchmarks.synth_corpus import write as write_corpus

OUT = Path(__file__).resolve().parent / "out"


def status_bytes(pid: int) -> dict[str, int]:
    """``RssAnon``, ``RssFile`` and ``RssShmem`` of a process from /proc (Linux)."""
    fields: dict[str, int] = {}
    with Path(f"/proc/{pid}/status").open(encoding="ascii") as fh:
        for line in fh:
            name, _, rest = line.partition(":")
            if name in ("RssAnon", "RssFile", "RssShmem"):
                fields[name] = int(rest.split()[0]) * 1024
    return fields


def _rss_parts(pid: int) -> tuple[int, int]:
    """(private, shared) resident bytes of a process.

    Private is ``RssAnon``: memory the process itself allocated. Shared is
    ``RssFile + RssShmem``: mapped files and shared memory, which for a Ray
    process is mostly the pages of the plasma object store it has touched;
    those pages belong to the object store (bounded by its size) and are
    counted again in every process that maps them.
    """
    fields = status_bytes(pid)
    return fields["RssAnon"], fields["RssFile"] + fields["RssShmem"]


def process_kind(p: psutil.Process) -> str:
    """A Ray process's kind: its ``ray::`` task or actor name, else its program."""
    cmd: list[str] = p.cmdline()
    if cmd and cmd[0].startswith("ray::"):
        return cmd[0].split("(")[0][:60]
    for word in ("dashboard", "log_monitor", "runtime_env", "monitor"):
        if any(word in part for part in cmd):
            return word
    return str(p.name())


class RssSampler:
    """Peaks of this process's RSS split private/shared, and of the summed
    RSS (and summed private RSS) of this process and its descendants."""

    def __init__(self, interval: float = 0.5) -> None:
        self.peak_total = 0
        self.peak_total_private = 0
        self.peak_driver_private = 0
        self.peak_driver_shared = 0
        self.peak_processes = 0
        # per process kind: peak summed private bytes and peak process count
        self.kinds: dict[str, list[int]] = {}
        self.at_peak: dict[str, list[int]] = {}  # by kind at the summed peak
        self.peak_at_s = 0.0  # when the summed private peak was sampled
        # pid -> [peak private bytes, kind then, seconds since start then]
        self.by_pid: dict[int, list[Any]] = {}
        # every 10 s: (seconds since start, kind -> [private bytes, processes])
        self.series: list[tuple[float, dict[str, list[int]]]] = []
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        start = time.perf_counter()
        next_point = 0.0
        while not self._stop.is_set():
            total = private = 0
            procs = [me, *me.children(recursive=True)]
            self.peak_processes = max(self.peak_processes, len(procs))
            now: dict[str, list[int]] = {}
            for p in procs:
                with contextlib.suppress(psutil.Error, OSError, KeyError):
                    total += p.memory_info().rss
                    mine = _rss_parts(p.pid)[0]
                    private += mine
                    name = "driver" if p.pid == me.pid else process_kind(p)
                    kind = now.setdefault(name, [0, 0])
                    top = self.by_pid.setdefault(p.pid, [0, "", 0.0])
                    if mine > top[0]:
                        top[:] = [mine, name, round(time.perf_counter() - start, 1)]
                    kind[0] += mine
                    kind[1] += 1
            for name, (mem, count) in now.items():
                peak = self.kinds.setdefault(name, [0, 0])
                peak[0] = max(peak[0], mem)
                peak[1] = max(peak[1], count)
            with contextlib.suppress(OSError, KeyError):
                mine, shared = _rss_parts(me.pid)
                self.peak_driver_private = max(self.peak_driver_private, mine)
                self.peak_driver_shared = max(self.peak_driver_shared, shared)
            self.peak_total = max(self.peak_total, total)
            elapsed = time.perf_counter() - start
            if private > self.peak_total_private:
                self.peak_total_private = private
                self.at_peak = now
                self.peak_at_s = elapsed
            if elapsed >= next_point:
                self.series.append((round(elapsed, 1), now))
                next_point += 10.0
            self._stop.wait(self._interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _by_kind(kinds: dict[str, list[int]]) -> dict[str, list[float]]:
    """Kind -> [private MB, processes], largest first."""
    ranked = sorted(kinds.items(), key=lambda kv: -kv[1][0])
    return {k: [round(m / 2**20, 1), c] for k, (m, c) in ranked}


def config(
    corpus: Path,
    qa: Path,
    run_dir: Path,
    *,
    sample_size: int | None = None,
    builtin_rag: bool = False,
) -> dict[str, Any]:
    pool = {"min_size": 1, "max_size": 2, "num_cpus": 0.5, "batch_size": 1024}
    systems: list[dict[str, Any]] = [
        {"name": "rag", "kind": "qa_file", "path": str(qa), "pool": pool}
    ]
    if builtin_rag:
        # The built-in RAG over the whole corpus (its index build is measured).
        systems.append(
            {
                "name": "rag@builtin",
                "kind": "builtin_rag",
                "k": 8,
                "index_workers": 1,
                "pool": {**pool, "batch_size": 256},
            }
        )
    out: dict[str, Any] = {
        "corpus": {
            "path": str(corpus),
            "id_field": "TASK_CODE",
            "title_field": "TASK_NAME",
            "fields": [
                {"TASK_NAME": "事项名称"},
                {"DEPT_NAME": "实施机构"},
                {"TASK_TYPE_TEXT": "事项类型"},
                {"AREA_CODE_TEXT": "行政区划"},
                {"accept_standard": "受理条件"},
                {"material_intro": "申请材料"},
                {"handle_time": "法定办结时限"},
                {"handle_time_limit": "承诺办结时限"},
                {"handle_location": "办理地点"},
                {"consult_phone": "咨询电话"},
            ],
        },
        # Fake questions are "<name> says <hash>": a region name makes the
        # built-in RAG's searches hit the documents of that region.
        "generator": {"backend": "fake", "name": "广州市", "pool": pool},
        "judges": {"j1": {"backend": "fake", "name": "j1", "pool": pool}},
        "systems": systems,
        "allow_fake_engines": True,
        "output_dir": str(run_dir),
        "ray": {"num_cpus": 4, "progress": False},
    }
    if sample_size is not None:
        out["sample"] = {"size": sample_size, "strata": ["AREA_CODE_TEXT"], "seed": 0}
    return out


def in_fresh_process(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a new (spawned) Python process."""
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as child:
        return child.submit(fn, *args, **kwargs).result()


def _index_state(run_dir: Path) -> dict[str, int]:
    """``RUN_DIR/index`` entries (relative paths) -> modification time (ns)."""
    root = run_dir / "index"
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def grow_one(
    records: int, sample_size: int, size: int, *, out_dir: Path = OUT
) -> dict[str, Any]:
    """Run :func:`run_one`'s kept dir again with ``sample.size: size``."""
    from cube_ray.config import RunConfig
    from cube_ray.pipeline import RunOptions, run_pipeline

    base = out_dir / f"scale{records}-sample{sample_size}"
    run_dir, cfg_path = base / "run", base / "run.yaml"
    cfg_dict = yaml.safe_load(cfg_path.read_text())
    before = _index_state(run_dir)
    cfg_dict = {**cfg_dict, "sample": {**cfg_dict["sample"], "size": size}}
    cfg_path.write_text(yaml.safe_dump(cfg_dict, allow_unicode=True))
    cfg = RunConfig.from_yaml(cfg_path)
    with RssSampler() as sampler:
        t0 = time.perf_counter()
        result = run_pipeline(cfg, RunOptions(run_dir=run_dir, report=False))
        wall = time.perf_counter() - t0
    after = _index_state(run_dir)
    changed = sorted(k for k, v in after.items() if before.get(k) != v)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return {
        "grow_to": size,
        "grow_wall_seconds": round(wall, 1),
        "grow_new_questions": result.stages["questions"].written,
        "grow_stage_seconds": {
            k: round(v.seconds, 1) for k, v in result.stages.items()
        },
        "grow_driver_peak_private_mb": round(sampler.peak_driver_private / 2**20, 1),
        "grow_total_peak_private_mb": round(sampler.peak_total_private / 2**20, 1),
        "index_dirs": sorted(p.name for p in (run_dir / "index").iterdir()),
        "index_rebuilt": bool(changed),
        "index_changed": changed[:8],
        "corpus_fingerprint": manifest.get("corpus_fingerprint"),
    }


def run_one(
    records: int,
    *,
    keep: bool,
    sample_size: int | None = None,
    builtin_rag: bool = False,
    out_dir: Path = OUT,
) -> dict[str, Any]:
    from cube_ray.config import RunConfig
    from cube_ray.pipeline import RunOptions, run_pipeline

    name = f"scale{records}" + (f"-sample{sample_size}" if sample_size else "")
    base = out_dir / name
    shutil.rmtree(base, ignore_errors=True)
    t0 = time.perf_counter()
    # In a child process: the driver's memory is then the run's alone (writing
    # a 1M corpus here left this process 160 MB larger before the run began).
    corpus, qa = in_fresh_process(write_corpus, records, base)
    synth_s = time.perf_counter() - t0
    run_dir = base / "run"
    cfg_path = base / "run.yaml"
    cfg_dict = config(
        corpus, qa, run_dir, sample_size=sample_size, builtin_rag=builtin_rag
    )
    cfg_path.write_text(yaml.safe_dump(cfg_dict, allow_unicode=True))
    cfg = RunConfig.from_yaml(cfg_path)
    with RssSampler() as sampler:
        t0 = time.perf_counter()
        result = run_pipeline(cfg, RunOptions(run_dir=run_dir, report=False))
        wall = time.perf_counter() - t0
    driver_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    stages = {k: round(v.seconds, 1) for k, v in result.stages.items()}
    rows = sum(v.written for v in result.stages.values())
    index = sorted((run_dir / "index").glob("bm25-*/meta.json"))
    meta = json.loads(index[0].read_text()) if index else {}
    out = {
        "records": records,
        "sample_size": sample_size,
        "questions": result.stages["answers:bounds"].expected // 2,
        "index_docs": meta.get("num_docs"),
        "index_build_seconds": meta.get("build_seconds"),
        "synth_seconds": round(synth_s, 1),
        "wall_seconds": round(wall, 1),
        "records_per_s": round(records / wall, 1),
        "rows_written": rows,
        "rows_per_s": round(rows / wall, 1),
        "driver_peak_rss_mb": round(driver_peak / 2**20, 1),
        "driver_peak_private_mb": round(sampler.peak_driver_private / 2**20, 1),
        "driver_peak_shared_mb": round(sampler.peak_driver_shared / 2**20, 1),
        "total_peak_rss_mb": round(sampler.peak_total / 2**20, 1),
        "total_peak_private_mb": round(sampler.peak_total_private / 2**20, 1),
        "peak_processes": sampler.peak_processes,
        "peak_by_kind": _by_kind(sampler.kinds),
        "at_total_private_peak": _by_kind(sampler.at_peak),
        "total_private_peak_at_s": round(sampler.peak_at_s, 1),
        "largest_processes": [
            [round(m / 2**20, 1), kind, t]
            for m, kind, t in sorted(sampler.by_pid.values(), reverse=True)[:8]
        ],
        "stage_seconds": stages,
        "summary": result.summary_path is not None,
    }
    if not keep:
        shutil.rmtree(base, ignore_errors=True)
    series = [{"t": t, "kinds": _by_kind(kinds)} for t, kinds in sampler.series]
    (out_dir / f"{name}-memory.json").write_text(json.dumps(series))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, action="append", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the run dirs")
    parser.add_argument(
        "--sample-size",
        type=int,
        help="sample: {size: N, strata: [AREA_CODE_TEXT]} (questions for N records)",
    )
    parser.add_argument(
        "--builtin-rag",
        action="store_true",
        help="add the built-in RAG over the whole corpus (its index build timed)",
    )
    parser.add_argument(
        "--grow-to",
        type=int,
        help="then run the same dir with sample.size GROW_TO (needs --sample-size)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=OUT,
        help="folder of the run dirs and memory series (default benchmarks/out)",
    )
    args = parser.parse_args()
    if args.grow_to is not None and args.sample_size is None:
        parser.error("--grow-to needs --sample-size")
    for n in args.records:
        result = in_fresh_process(
            run_one,
            n,
            keep=args.keep or args.grow_to is not None,
            sample_size=args.sample_size,
            builtin_rag=args.builtin_rag,
            out_dir=args.out,
        )
        # Printed before a growth, so that a growth cut short loses nothing.
        print(json.dumps(result), flush=True)
        if args.grow_to is not None:
            # A fresh process again: the grown run starts as a user's would.
            grown = in_fresh_process(
                grow_one, n, args.sample_size, args.grow_to, out_dir=args.out
            )
            print(json.dumps({"records": n, **grown}), flush=True)
            if not args.keep:
                shutil.rmtree(args.out / f"scale{n}-sample{args.sample_size}")


if __name__ == "__main__":
    main()
