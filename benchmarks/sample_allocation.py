"""How close each sample size's strata counts are to proportional, by rule.

Over the 2,262 Guangdong records, for every n = 1..N and every stratum h, the
deviation ``|n_h - n * N_h / N|`` of the sample of size n, for

- ``key``: CUBE_METHOD.md section 11's rule, the n smallest keys
  ``(i + u_h) / N_h`` (reimplemented here: the package no longer has it);
- ``quota``: :func:`cube_ray.sample.sample_order` (the quota sequence).

Prints, per strata fields, rule and seed: the share of (n, h) counts off by
more than 1, the sizes n with any such count, and the worst deviation.

    PYTHONPATH=. .venv/bin/python benchmarks/sample_allocation.py
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from cube_ray.sample import doc_hash, sample_order, stratum_key, unit_offset

RECORDS = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "data"
    / "guangdong_service_items"
    / "records.jsonl"
)
FIELDS = (
    ["AREA_CODE_TEXT"],
    ["TASK_TYPE_TEXT"],
    ["AREA_CODE_TEXT", "TASK_TYPE_TEXT"],
    ["DEPT_NAME"],
)


def key_rule(ids: list[str], strata: list[str], seed: int) -> list[str]:
    """The strata of section 11's key order (smallest keys first)."""
    pops = Counter(strata)
    keyed = []
    for h in pops:
        members = sorted(
            (d for d, s in zip(ids, strata, strict=True) if s == h),
            key=lambda d: doc_hash(seed, d),
        )
        u = unit_offset(seed, h)
        keyed += [
            ((i + u) / pops[h], doc_hash(seed, d), h) for i, d in enumerate(members)
        ]
    return [h for _, _, h in sorted(keyed)]


def deviations(sequence: list[str]) -> tuple[int, int, int, float]:
    """(counts off by > 1, counts checked, sizes with one, worst deviation)."""
    pops = Counter(sequence)
    total = len(sequence)
    running: Counter[str] = Counter()
    off = checked = sizes = 0
    worst = 0.0
    for n, h in enumerate(sequence, start=1):
        running[h] += 1
        any_off = False
        for g, n_g in pops.items():
            dev = abs(running[g] - n * n_g / total)
            checked += 1
            worst = max(worst, dev)
            if dev > 1.0:
                off += 1
                any_off = True
        sizes += any_off
    return off, checked, sizes, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[7, 0])
    args = parser.parse_args()
    records = [json.loads(x) for x in RECORDS.read_text(encoding="utf-8").splitlines()]
    ids = [r["TASK_CODE"] for r in records]
    print("fields  strata  rule  seed  off>1 (share)  sizes with one  worst")
    for fields in FIELDS:
        strata = [stratum_key([r.get(f) for f in fields]) for r in records]
        for seed in args.seeds:
            for rule in ("key", "quota"):
                if rule == "key":
                    sequence = key_rule(ids, strata, seed)
                else:
                    sequence = sample_order(ids, strata, seed=seed)["stratum"].to_list()
                off, checked, sizes, worst = deviations(sequence)
                print(
                    f"{'+'.join(fields)}  {len(set(strata))}  {rule}  {seed}  "
                    f"{off}/{checked} ({off / checked:.2%})  {sizes}/{len(ids)}  "
                    f"{worst:.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
