"""Stage overlap on a two-node local cluster: job makespan against engine busy time.

    PYTHONPATH=. .venv/bin/python benchmarks/pipeline_overlap.py \
        --records 24 --latency 4 --startup 5 --batch 8 --waves 4

A ``ray.cluster_utils.Cluster`` with a head node advertising ``generator`` and
a second node advertising ``judge``; fake engines that sleep like a GPU:
``--startup`` seconds to load, ``--latency`` seconds per batch. The job: one
question per record, the zero/full bounds, one QA-file system, two judges
(different engines) x four dimensions. It runs three times on the same
cluster, in this process, each into a fresh run dir: ``ray.overlap: false``
(stages one after another, as on main before the redesign), ``ray.overlap:
true`` (stages side by side), and ``ray.overlap: true`` with ``ray.waves``
(each stage once per wave of the records, so judges start on the first
wave's answers). For each it reports the makespan (``wall_s`` of the manifest), each
engine pool's start-ups, start-up and busy seconds, and the ratio makespan /
busiest pool's (start-up + busy) seconds; the target is <= 1.25 with overlap.
Results go to ``benchmarks/out/overlap.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "out"
SAMPLE = ROOT / "examples" / "data" / "guangdong_sample.jsonl"


def _corpus(tmp: Path, n: int) -> tuple[Path, Path]:
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    lines = (lines * (n // len(lines) + 1))[:n]
    rows = [json.loads(x) for x in lines]
    for i, r in enumerate(rows):  # unique ids when the sample repeats
        r["TASK_CODE"] = f"{r['TASK_CODE']}-{i}"
    corpus = tmp / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
        encoding="utf-8",
    )
    qa = tmp / "qa.jsonl"
    qa.write_text(
        "".join(
            json.dumps(
                {
                    "question_id": r["TASK_CODE"],
                    "answer": f"答复 {i}",
                    "retrieved_doc_ids": [r["TASK_CODE"]],
                },
                ensure_ascii=False,
            )
            + "\n"
            for i, r in enumerate(rows)
        ),
        encoding="utf-8",
    )
    return corpus, qa


def _config(
    tmp: Path, corpus: Path, qa: Path, args: argparse.Namespace, mode: str
) -> Path:
    def engine(name: str, seed: int, resource: str) -> dict[str, Any]:
        return {
            "backend": "fake",
            "name": name,
            "seed": seed,
            "latency_s": args.latency,
            "startup_s": args.startup,
            "pool": {
                "batch_size": args.batch,
                "num_cpus": 1,
                "resources": {resource: 1},
            },
        }

    cfg = {
        "corpus": {
            "path": str(corpus),
            "id_field": "TASK_CODE",
            "title_field": "TASK_NAME",
            "fields": [{"TASK_NAME": "事项名称"}, {"accept_standard": "受理条件"}],
        },
        "generator": engine("gen", 0, "generator"),
        "judges": {f"j{i}": engine(f"j{i}", i, "judge") for i in (1, 2)},
        "systems": [{"name": "rag", "kind": "qa_file", "path": str(qa), "k": 8}],
        "allow_fake_engines": True,
        "ray": {
            "write_rows": 64,
            "overlap": mode != "sequential",
            "waves": args.waves if mode == "waves" else 1,
            "task_num_cpus": 0.25,
        },
    }
    path = tmp / f"run-{mode}.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return path


def _measure(cfg: Path, run_dir: Path) -> dict[str, Any]:
    from cube_ray.config import RunConfig
    from cube_ray.pipeline import RunOptions, run_pipeline

    start = time.monotonic()
    result = run_pipeline(
        RunConfig.from_yaml(cfg),
        RunOptions(run_dir=run_dir, progress=False, report=False),
    )
    outer = time.monotonic() - start
    manifest = json.loads(result.manifest_path.read_text())
    engines = manifest["engines"]
    busiest = max(e["startup_s"] + e["busy_s"] for e in engines.values())
    return {
        "wall_s": manifest["wall_s"],
        "outer_s": round(outer, 2),
        "engines": engines,
        "busiest_pool_s": round(busiest, 2),
        "ratio": round(manifest["wall_s"] / busiest, 3),
        "stage_seconds": {k: v["seconds"] for k, v in manifest["stages"].items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=48)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--startup", type=float, default=5.0)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--waves", type=int, default=4)
    parser.add_argument(
        "--modes", default="sequential,overlap,waves", help="runs, in this order"
    )
    parser.add_argument("--tmp", type=Path, default=Path("/tmp/cube-overlap-bench"))
    args = parser.parse_args()

    import shutil

    import ray
    from ray.cluster_utils import Cluster

    shutil.rmtree(args.tmp, ignore_errors=True)
    args.tmp.mkdir(parents=True)
    corpus, qa = _corpus(args.tmp, args.records)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 4, "resources": {"generator": 1}},
    )
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    try:
        cluster.add_node(num_cpus=4, resources={"judge": 2})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        for name in args.modes.split(","):
            cfg = _config(args.tmp, corpus, qa, args, name)
            results[name] = _measure(cfg, args.tmp / f"run-{name}")
            print(name, json.dumps(results[name], indent=1), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    OUT.mkdir(exist_ok=True)
    (OUT / "overlap.json").write_text(json.dumps(results, indent=2) + "\n")
    for name in args.modes.split(","):
        r = results[name]
        print(
            f"{name:10s} makespan {r['wall_s']:7.1f} s  busiest pool "
            f"{r['busiest_pool_s']:7.1f} s  ratio {r['ratio']:.2f}"
        )


if __name__ == "__main__":
    main()
