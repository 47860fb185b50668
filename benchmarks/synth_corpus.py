"""Synthetic Guangdong-like corpus for scale benchmarks.

Each synthetic record recombines real field values of the Guangdong service
items (every field drawn independently from that field's real values) under a
fresh id, so documents have the real length and vocabulary but are all
distinct. Also writes a QA file (the "system under test" answers) whose gold
document is retrieved for about half of the questions.

    python benchmarks/synth_corpus.py --records 100000 --out benchmarks/out/synth100k
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SOURCE = (
    Path(__file__).resolve().parents[1] / "examples" / "data" / "guangdong_sample.jsonl"
)
FULL = Path("/work/shared/data/guangdong_service_items/records.jsonl")
FIELDS = (
    "TASK_NAME",
    "DEPT_NAME",
    "TASK_TYPE_TEXT",
    "AREA_CODE_TEXT",
    "accept_standard",
    "material_intro",
    "handle_time",
    "handle_time_limit",
    "handle_location",
    "consult_phone",
)


def field_pools(source: Path) -> dict[str, list[object]]:
    """Real values of each field (empty ones too, so sparsity is realistic)."""
    pools: dict[str, list[object]] = {f: [] for f in FIELDS}
    with source.open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            for f in FIELDS:
                pools[f].append(rec.get(f))
    return pools


def write(records: int, out: Path, *, seed: int = 0) -> tuple[Path, Path]:
    """Write ``corpus.jsonl`` and ``qa.jsonl`` under ``out``; return both paths."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    pools = field_pools(FULL if FULL.exists() else SOURCE)
    corpus, qa = out / "corpus.jsonl", out / "qa.jsonl"
    with corpus.open("w", encoding="utf-8") as fc, qa.open("w", encoding="utf-8") as fq:
        for i in range(records):
            doc_id = f"SYN{i:010d}"
            rec: dict[str, object] = {"TASK_CODE": doc_id}
            for f in FIELDS:
                rec[f] = rng.choice(pools[f])
            # A unique suffix keeps similar names distinguishable, as in reality.
            rec["TASK_NAME"] = f"{rec['TASK_NAME'] or '事项'}（{i}）"
            fc.write(json.dumps(rec, ensure_ascii=False) + "\n")
            other = f"SYN{rng.randrange(records):010d}"
            retrieved = [other, doc_id] if i % 2 == 0 else [other]
            fq.write(
                json.dumps(
                    {
                        "question_id": doc_id,
                        "answer": f"答复{i}",
                        "retrieved_doc_ids": retrieved,
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    return corpus, qa


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    corpus, qa = write(args.records, args.out, seed=args.seed)
    print(f"{corpus} ({corpus.stat().st_size / 1e6:.1f} MB), {qa}")


if __name__ == "__main__":
    main()
