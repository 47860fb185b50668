"""Wall time of the demo, per stage, with the machine's load meanwhile.

    PYTHONPATH=. .venv/bin/python benchmarks/demo_time.py --out /tmp/demo-x \
        [--dtype float32] [-- --sample-size 4]

Runs ``cube-ray run conf/demo.yaml --out OUT`` (what ``make demo`` runs, plus
the arguments after ``--``) in a fresh run dir and reports, as JSON on stdout:
the command, the CPU (model name, native bfloat16 or not, cores), the wall
time, the load average sampled every 10 s (min, median, max), and from the
run's ``manifest.json`` each stage's seconds, rows and tokens and the engine's
start-up and busy seconds. ``--dtype float32`` runs the demo with the embedded
engine's ``dtype: float32`` (a copy of the config beside it, deleted after):
the code path a CPU without native bfloat16 takes (``cpu_dtype``), so that
path can be measured on a machine that has it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cube_ray.engines.embedded import cpu_dtype  # noqa: E402


def _cpu() -> dict[str, Any]:
    model = "?"
    for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "model": model or platform.processor(),
        "native_bfloat16": cpu_dtype() == "bfloat16",
        "cores": len(os.sched_getaffinity(0)),
    }


def _config(dtype: str | None) -> Path:
    """conf/demo.yaml, or a copy beside it whose embedded engines use ``dtype``."""
    demo = ROOT / "conf" / "demo.yaml"
    if dtype is None:
        return demo
    text = demo.read_text(encoding="utf-8")
    text = text.replace(
        "  backend: embedded\n", f"  backend: embedded\n  dtype: {dtype}\n", 1
    ).replace(
        "    backend: embedded\n", f"    backend: embedded\n    dtype: {dtype}\n", 1
    )
    if text.count(f"dtype: {dtype}") != 2:
        raise SystemExit("conf/demo.yaml: expected one embedded generator and judge")
    out = demo.with_name(f".demo-{dtype}.yaml")
    out.write_text(text, encoding="utf-8")
    return out


def main() -> None:
    """Run the demo once and print what it took."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="run dir (must not exist)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"])
    parser.add_argument("extra", nargs="*", help="more `cube-ray run` arguments")
    args = parser.parse_args()
    out = Path(args.out)
    if out.exists():
        raise SystemExit(f"{out} exists: a fresh run dir is measured")
    config = _config(args.dtype)
    cli = Path(sys.executable).with_name("cube-ray")
    command = [str(cli), "run", str(config), "--out", str(out), *args.extra]
    loads: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            loads.append(os.getloadavg()[0])
            stop.wait(10)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.monotonic()
    try:
        proc = subprocess.run(command, check=False, capture_output=True, text=True)
    finally:
        wall = time.monotonic() - start
        stop.set()
        if config.name.startswith(".demo-"):
            config.unlink(missing_ok=True)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    stages = {
        name: {
            k: s.get(k)
            for k in ("seconds", "rows_written", "prompt_tokens", "completion_tokens")
        }
        for name, s in (manifest.get("stages") or {}).items()
    }
    print(
        json.dumps(
            {
                "command": " ".join(command),
                "dtype": args.dtype or cpu_dtype(),
                "cpu": _cpu(),
                "rc": proc.returncode,
                "wall_s": round(wall, 1),
                "manifest_wall_s": manifest.get("wall_s"),
                "load_1min": {
                    "min": min(loads),
                    "median": statistics.median(loads),
                    "max": max(loads),
                }
                if loads
                else None,
                "stages": stages,
                "engines": manifest.get("engines"),
                "console_head": proc.stderr.splitlines()[:40],
                "stdout": proc.stdout.splitlines()[:12],
            },
            indent=1,
            ensure_ascii=False,
        )
    )
    if proc.returncode != 0:
        sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
