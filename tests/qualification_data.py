"""Real documents and the hand-checked fault examples of the qualification tests.

``python -m tests.qualification_data`` rewrites
``tests/data/qualification/faults.jsonl`` from the generator's current output
(then hand-check the diff: exactly one controlled change per row).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml

from cube_ray.config import CorpusConfig
from cube_ray.corpus import record_to_document
from cube_ray.qualification import (
    KINDS,
    GoldDocument,
    compose_answer,
    make_fault,
)
from cube_ray.sample import doc_hash

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "data" / "guangdong_sample.jsonl"
"""120 real Guangdong records shipped with the repo (see examples/data/SOURCE.md)."""
ARES = ROOT.parent / "shared" / "data" / "ares_nq" / "nq_synthetic_queries.tsv"
"""English Wikipedia passages (ARES, Apache-2.0); absent in a fresh clone."""
FAULTS = ROOT / "tests" / "data" / "qualification" / "faults.jsonl"
"""The checked-in, hand-checked faulted answers (20 per kind and language)."""
PER_KIND = 20
SEED = 0
EN_POOL = 400
"""English passages used as gold and donor documents (the first distinct ones)."""


def guangdong_documents(path: Path = SAMPLE) -> list[GoldDocument]:
    """The sample's records as the run builds them (conf/guangdong.yaml fields)."""
    corpus = yaml.safe_load((ROOT / "conf" / "guangdong.yaml").read_text())["corpus"]
    cfg = CorpusConfig(**{**corpus, "path": str(path)})
    docs = []
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            d = record_to_document(json.loads(line), cfg, path=str(path), row=i)
            docs.append(GoldDocument.of(d.doc_id, d.text))
    return docs


def english_documents(path: Path = ARES, limit: int = EN_POOL) -> list[GoldDocument]:
    """Distinct ARES NQ passages, in file order."""
    csv.field_size_limit(10**7)
    seen: dict[str, str] = {}
    with path.open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            seen.setdefault(row["document_index"], row["document"])
            if len(seen) >= limit:
                break
    return [GoldDocument.of(f"nq{k}", v) for k, v in seen.items()]


def examples(docs: list[GoldDocument], lang: str) -> list[dict[str, Any]]:
    """Per kind the first ``PER_KIND`` faults over ``docs`` in the seeded order."""
    ordered = sorted(docs, key=lambda d: doc_hash(SEED, d.doc_id))
    rows = []
    for kind in KINDS:
        n = 0
        for gold in ordered:
            answer = compose_answer(gold)
            fault = make_fault(
                kind, answer, gold, donors=docs, seed=SEED, question_id=gold.doc_id
            )
            if fault is None:
                continue
            s = fault.span
            rows.append(
                {
                    "lang": lang,
                    "kind": kind,
                    "question_id": gold.doc_id,
                    "answer": answer,
                    "faulted": fault.faulted,
                    "start": s.start,
                    "end": s.end,
                    "original": s.original,
                    "replacement": s.replacement,
                }
            )
            n += 1
            if n == PER_KIND:
                break
    return rows


def main() -> None:
    rows = examples(guangdong_documents(), "zh")
    rows += examples(english_documents(), "en")
    FAULTS.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
        encoding="utf-8",
    )
    print(f"wrote {len(rows)} rows to {FAULTS}")


if __name__ == "__main__":
    main()
