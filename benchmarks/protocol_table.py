"""Issue 33 item 4's table: one row per judging protocol, from the runs' JSON.

Reads the ``--out`` files of ``benchmarks/qualification.py`` (one per protocol,
``LABEL=PATH``) and of ``benchmarks/bound_separation.py``, and prints, per
protocol: bound separation of the mean over the dimensions (section 10), the
weighted net drop per fault kind with its 95 % interval and whether it is
detected (section 12, net of controls), false alarms, and per answer the judge
prompts and CPU seconds of the qualification run.

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/protocol_table.py \
        --bounds runs/bounds16.json score=runs/score.json checklist=runs/cl.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

KINDS = ("number", "entity", "negation", "omission", "unsupported")


def cell(fig: dict[str, Any] | None) -> str:
    """A kind's weighted figure in a few characters.

    >>> cell({"n": 30, "net_drop": 0.46, "detected": False, "false_alarm": False,
    ...       "net_drop_interval": {"low": 0.3, "high": 0.6}})
    '+0.46 [+0.30, +0.60]'
    >>> cell(None)
    'not tested'
    """
    if not fig or not fig.get("n"):
        return "not tested"
    low = fig["net_drop_interval"]["low"]
    high = fig["net_drop_interval"]["high"]
    text = f"{fig['net_drop']:+.2f} [{low:+.2f}, {high:+.2f}]"
    if fig["detected"]:
        text = f"**{text} detected**"
    if fig["false_alarm"]:
        text += " false alarm"
    return text


def per_answer(res: dict[str, Any]) -> tuple[float, float]:
    """(judge prompts, CPU s) per judged answer of a qualification run."""
    calls = res["judge_calls"]
    dims = len(res["dimensions"])
    answers = sum(c["rows"] for c in calls.values()) / dims
    prompts = sum(c.get("engine_calls", 0) for c in calls.values())
    cpu = sum(c.get("cpu_s", 0.0) for c in calls.values())
    return prompts / answers, cpu / answers


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--bounds", type=Path, required=True)
    ap.add_argument("runs", nargs="+", help="LABEL=qualification --out JSON")
    args = ap.parse_args(argv)
    bounds = json.loads(args.bounds.read_text(encoding="utf-8"))["results"]
    print(
        "| protocol | records | bounds: zero → full, gap, p (n) | "
        + " | ".join(KINDS)
        + " | false alarms | prompts / answer | CPU s / answer |"
    )
    print("|---|---:|---|" + "---|" * len(KINDS) + "---:|---:|---:|")
    for item in args.runs:
        label, _, path = item.partition("=")
        res = json.loads(Path(path).read_text(encoding="utf-8"))
        judge = "reference" if res["judge"] == "reference" else "qwen"
        block = res[judge]
        sep = bounds.get(label.replace(":", "-"), {}).get("bounds", {}).get("mean")
        sep_text = (
            f"{sep['zero']:.2f} → {sep['full']:.2f}, {sep['gap']:+.2f}, "
            f"p = {sep['p_value']:.2g} ({sep['n_pairs']})"
            + (" **separated**" if sep["separated"] else "")
            if sep
            else "—"
        )
        prompts, cpu = per_answer(res)
        kinds = [cell(block.get(k, {}).get("weighted")) for k in KINDS]
        print(
            f"| {label} | {res['records_done']} | {sep_text} | "
            + " | ".join(kinds)
            + f" | {len(res['false_alarms'])} | {prompts:.1f} | {cpu:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
