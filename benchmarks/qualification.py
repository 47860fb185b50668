"""Qualification benchmark: does the reference judge notice controlled faults?

CUBE_METHOD.md section 12 on real Guangdong records: the first ``--records``
documents of the seeded order ``sha256(f"{seed}:{doc_id}")`` (section 11) of
``../shared/data/guangdong_service_items/records.jsonl`` (the 2,262 records;
the package's 120-record sample when shared/ is absent), with the fields of
``conf/guangdong.yaml``:

1. a full-bound-style answer per document, composed from its fields
   (``cube_ray.qualification.compose_answer``: agency, materials, time limits,
   place, phone; no generator, so the run is fast and exactly repeatable) and a
   question ("如何办理<item>？需要哪些材料，多久办结？");
2. one faulted copy per kind (``number``, ``entity``, ``negation``,
   ``omission``, ``unsupported``), the other sampled documents as donors;
   the count built per kind;
3. the reference judge (``backend: reference``: relevance and specificity =
   ``support``, completeness and quality = ``coverage``) scores the originals
   and the faulted copies through the real ``JudgeStage``;
4. per kind and dimension and for the equal-weighted total: drop = mean of
   score(original) - score(faulted), the one-sided Wilcoxon p, detected =
   drop >= 0.5 and p < 0.05 (``cube_ray.aggregate.fault_detection``), and
   which expected kinds (``dimensions[].detects`` defaults) it misses.

Prints a JSON document and Markdown tables; wall time per step.

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/qualification.py --records 40 \
        --out runs/qualification.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RECORDS = REPO.parent / "shared" / "data" / "guangdong_service_items" / "records.jsonl"
SAMPLE = REPO / "examples" / "data" / "guangdong_sample.jsonl"
DIMS = ("relevance", "specificity", "completeness", "quality")
MEASURES = {
    "relevance": "support",
    "specificity": "support",
    "completeness": "coverage",
    "quality": "coverage",
}


def main() -> None:
    import polars as pl
    import pyarrow as pa

    from cube_ray import schema
    from cube_ray.aggregate import fault_detection, fault_misses, qualification_block
    from cube_ray.aggregate._qualification import fixed_weights
    from cube_ray.config import DEFAULT_DETECTS
    from cube_ray.corpus import stable_hash
    from cube_ray.engines import build_engine
    from cube_ray.engines.config import ReferenceJudgeConfig
    from cube_ray.qualification import KINDS, compose_answer, seeded_sample
    from cube_ray.qualification._table import fault_rows
    from cube_ray.stages import JudgeStage, judge_inputs
    from cube_ray.stages.inputs import DOC_HASH
    from cube_ray.stages.qualify import qualification_judge_inputs
    from tests.qualification_data import guangdong_documents

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    corpus = RECORDS if RECORDS.is_file() else SAMPLE
    docs = guangdong_documents(corpus)
    by_id = {d.doc_id: d for d in docs}
    chosen = seeded_sample(((d, d) for d in by_id), size=args.records, seed=args.seed)
    gold = [by_id[q] for q in chosen]
    timings["read corpus and sample"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    answers = {g.doc_id: compose_answer(g) for g in gold}
    question = {
        g.doc_id: f"如何办理{g.fields.get('事项名称', '')}？需要哪些材料，多久办结？"
        for g in gold
    }
    items = [(g.doc_id, g.doc_id, answers[g.doc_id], g) for g in gold]
    rows = fault_rows(items, donors=gold, kinds=KINDS, seed=args.seed)
    timings["build faults"] = time.perf_counter() - t0
    built = {
        k: sum(r["kind"] == k and r["status"] == "ok" for r in rows) for k in KINDS
    }

    def table(system: list[str], answer: list[str], qids: list[str]) -> pa.Table:
        return pa.table(
            {
                schema.QUESTION_ID: qids,
                schema.SYSTEM: system,
                schema.ANSWER: answer,
                schema.QUESTION: [question[q] for q in qids],
                schema.TEXT: [by_id[q].text for q in qids],
                DOC_HASH: [stable_hash(by_id[q].text) for q in qids],
            }
        )

    ok = [r for r in rows if r["status"] == "ok"]
    qids = [g.doc_id for g in gold]
    full = table([schema.FULL] * len(qids), [answers[q] for q in qids], qids)
    faulted = table(
        [r["kind"] for r in ok],
        [r["faulted"] for r in ok],
        [r["question_id"] for r in ok],
    ).rename_columns(
        [schema.QUESTION_ID, "kind", "faulted", schema.QUESTION, schema.TEXT, DOC_HASH]
    )
    cfg = ReferenceJudgeConfig(measures=MEASURES)
    stage = JudgeStage(
        "reference",
        cfg,
        rubrics={d: d for d in DIMS},
        engine_factory=build_engine,
    )
    fps = {d: d for d in DIMS}
    t0 = time.perf_counter()
    orig_scores = stage(
        judge_inputs(full, judge="reference", fingerprints=fps, dimensions=DIMS)
    )
    fault_scores = stage(
        qualification_judge_inputs(
            faulted, judge="reference", fingerprints=fps, dimensions=DIMS
        )
    )
    timings["reference judge"] = time.perf_counter() - t0
    n_scores = orig_scores.num_rows + fault_scores.num_rows

    faults = pl.DataFrame(
        [{k: r[k] for k in ("question_id", "kind", "status")} for r in rows]
    )
    original = pl.from_arrow(orig_scores)
    faulted_frame = pl.from_arrow(fault_scores)
    assert isinstance(original, pl.DataFrame)
    assert isinstance(faulted_frame, pl.DataFrame)
    detection = fault_detection(
        original,
        faulted_frame,
        faults,
        weights=fixed_weights("equal", ["reference"], DIMS),
        min_drop=0.5,
        alpha=0.05,
    )
    skipped = {k: len(gold) - built[k] for k in KINDS}
    block = qualification_block(
        detection,
        judges=["reference"],
        kinds=KINDS,
        figures=[*DIMS, "weighted"],
        skipped=skipped,
    )
    expected = {d: list(DEFAULT_DETECTS[d]) for d in DIMS}
    misses = fault_misses(block, expected)
    result: dict[str, Any] = {
        "corpus": str(corpus),
        "records": len(gold),
        "seed": args.seed,
        "built": built,
        "reference": block["reference"],
        "misses": [f"{k} on {f}" for _, k, f in misses],
        "scores": n_scores,
        "wall_s": {k: round(v, 3) for k, v in timings.items()},
    }
    print(json.dumps(result, ensure_ascii=False, indent=1))
    print()
    print("| kind | built | " + " | ".join(DIMS) + " | weighted |")
    print("|---|---:|" + "---|" * (len(DIMS) + 1))
    for kind in KINDS:
        cells = []
        for fig in [*DIMS, "weighted"]:
            t = block["reference"][kind][fig]
            if t["drop"] is None:
                cells.append("—")
                continue
            mark = "**detected**" if t["detected"] else "missed"
            cells.append(f"{t['drop']:+.2f}, p = {t['p_value']:.2g}, {mark}")
        print(f"| {kind} | {built[kind]}/{len(gold)} | " + " | ".join(cells) + " |")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
