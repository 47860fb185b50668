"""Retrieval benchmark of the built-in BM25 (bm25s layout + jieba).

Usage::

    .venv/bin/python benchmarks/retrieval.py quality          # NCP + Guangdong
    .venv/bin/python benchmarks/retrieval.py scale --sizes 10000 40000

``quality``: recall@1/5/8/20 and MRR on
  * the NCP policy corpus with its 1,262 human-written questions, and
  * the Guangdong service-item corpus (conf/guangdong.yaml field map) with two
    transparent PROXY question sets (there are no generated questions yet):
    ``name`` = the item name (TASK_NAME) verbatim, ``templated`` =
    "我想办理{TASK_NAME}，需要准备哪些材料，多久能办好？".
  Also index build time and queries/s (single thread, warm).

``scale``: synthetic corpora recombined field by field from real Guangdong
records (each field drawn from an independent random record, fresh ids), built
with the streaming index builder; wall time, peak RSS (psutil, sampled every
50 ms, whole process), index size on disk, queries/s. Larger sizes are
extrapolated linearly by the caller (labelled as such in BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cube_ray import schema  # noqa: E402
from cube_ray.config import RunConfig  # noqa: E402
from cube_ray.corpus import iter_document_batches  # noqa: E402
from cube_ray.retrieval import (  # noqa: E402
    Bm25Index,
    build_bm25_index,
    ensure_bm25_index,
    gold_rank,
    mean_reciprocal_rank,
    recall_at,
    tokenize,
)
from cube_ray.systems import load_question_file  # noqa: E402

DATA = Path(os.environ.get("CUBE_RAY_SHARED_DATA", ROOT.parent / "shared" / "data"))
NCP = DATA / "ncp_policy_qa"
GD_CONF = ROOT / "conf" / "guangdong.yaml"


class PeakRss:
    """Sample this process's RSS in a thread; ``peak`` in bytes."""

    def __init__(self, interval: float = 0.05) -> None:
        self.proc = psutil.Process()
        self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self.interval = interval

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def evaluate(
    index: Bm25Index, questions: list[str], gold: list[str]
) -> dict[str, float]:
    tokenize("预热", language=index.language)  # load jieba outside the timing
    t, c = time.perf_counter(), time.process_time()
    ranks = [
        gold_rank([h.doc_id for h in index.search(q, k=20)], g)
        for q, g in zip(questions, gold, strict=True)
    ]
    dt, cpu = time.perf_counter() - t, time.process_time() - c
    out: dict[str, float] = {
        f"recall@{k}": round(recall_at(ranks, k), 4) for k in (1, 5, 8, 20)
    }
    out["mrr"] = round(mean_reciprocal_rank(ranks), 4)
    out["queries"] = len(ranks)
    out["queries_per_s"] = round(len(ranks) / dt, 1)
    out["queries_per_cpu_s"] = round(len(ranks) / cpu, 1)
    return out


def ncp(work: Path) -> dict[str, object]:
    rows = [
        json.loads(x) for x in (NCP / "corpus.jsonl").read_text("utf-8").splitlines()
    ]
    docs = work / "ncp" / "documents"
    docs.mkdir(parents=True)
    pl.DataFrame(
        {
            schema.DOC_ID: [r["doc_id"] for r in rows],
            schema.TITLE: [None] * len(rows),
            schema.TEXT: [r["text"] for r in rows],
            schema.CONTENT_HASH: [str(hash(r["text"])) for r in rows],
        },
        schema={c: pl.String for c in schema.DOCUMENTS_SCHEMA.names},
    ).write_parquet(docs / "part-0.parquet")
    tokenize("预热", language="zh")
    t, c = time.perf_counter(), time.process_time()
    index = Bm25Index(ensure_bm25_index(docs, index_root=work / "ncp" / "index"))
    build, build_cpu = time.perf_counter() - t, time.process_time() - c
    q = load_question_file(NCP / "queries.jsonl")
    res = evaluate(index, q[schema.QUESTION].to_list(), q[schema.DOC_ID].to_list())
    chars = sum(len(r["text"]) for r in rows)
    return {
        "docs": len(rows),
        "chars": chars,
        "build_s": round(build, 2),
        "build_cpu_s": round(build_cpu, 2),
        **res,
    }


def guangdong(work: Path) -> dict[str, object]:
    cfg = RunConfig.from_yaml(GD_CONF).corpus
    docs = work / "gd" / "documents"
    docs.mkdir(parents=True)
    for i, table in enumerate(iter_document_batches(cfg)):
        pq.write_table(table, docs / f"part-{i:05d}.parquet")
    table = pl.read_parquet(docs)
    tokenize("预热", language="zh")
    t, c = time.perf_counter(), time.process_time()
    index = Bm25Index(ensure_bm25_index(docs, index_root=work / "gd" / "index"))
    build, build_cpu = time.perf_counter() - t, time.process_time() - c
    titles = table[schema.TITLE].to_list()
    ids = table[schema.DOC_ID].to_list()
    shared = Counter(titles)
    out: dict[str, object] = {
        "docs": table.height,
        "chars": int(table[schema.TEXT].str.len_chars().sum()),
        "build_s": round(build, 2),
        "build_cpu_s": round(build_cpu, 2),
        "docs_whose_item_name_is_shared": sum(1 for t in titles if shared[t] > 1),
    }
    out["proxy_name"] = evaluate(index, titles, ids)
    templated = [f"我想办理{t}，需要准备哪些材料，多久能办好？" for t in titles]
    out["proxy_templated"] = evaluate(index, templated, ids)
    return out


def synthetic(n: int, seed: int = 0) -> Iterator[tuple[list[str], list[str]]]:
    """Documents recombined field by field from real Guangdong records."""
    cfg = RunConfig.from_yaml(GD_CONF).corpus
    real = pl.DataFrame(pa.concat_tables(list(iter_document_batches(cfg))))
    # Split each real text into its "label: value" lines, grouped by label.
    by_label: dict[str, list[str]] = {}
    for text in real[schema.TEXT].to_list():
        for line in text.split("\n"):
            label = line.split(":", 1)[0]
            by_label.setdefault(label, []).append(line)
    labels = [f.display for f in cfg.fields if f.display in by_label]
    rng = random.Random(seed)
    batch_ids: list[str] = []
    batch_texts: list[str] = []
    for i in range(n):
        lines = [
            rng.choice(by_label[lab])
            for lab in labels
            if rng.random() < len(by_label[lab]) / real.height
        ]
        batch_ids.append(f"syn-{i:08d}")
        batch_texts.append("\n".join(lines) or rng.choice(by_label[labels[0]]))
        if len(batch_ids) == 4096:
            yield batch_ids, batch_texts
            batch_ids, batch_texts = [], []
    if batch_ids:
        yield batch_ids, batch_texts


def scale(work: Path, sizes: list[int]) -> list[dict[str, object]]:
    results = []
    tokenize("预热", language="zh")
    for n in sizes:
        out = work / f"syn-{n}"
        chars = 0

        def counted(n: int = n) -> Iterator[tuple[list[str], list[str]]]:
            nonlocal chars
            for ids, texts in synthetic(n):
                chars += sum(len(t) for t in texts)
                yield ids, texts

        base = psutil.Process().memory_info().rss
        with PeakRss() as peak:
            t, c = time.perf_counter(), time.process_time()
            meta = build_bm25_index(counted(), out, language="zh")
            build, build_cpu = time.perf_counter() - t, time.process_time() - c
        size = sum(f.stat().st_size for f in out.iterdir())
        index = Bm25Index(out)
        rng = random.Random(1)
        picks = [rng.randrange(n) for _ in range(200)]
        texts = index.texts(picks)
        queries = [t.split("\n")[0].split(":", 1)[-1] for t in texts]
        gold = [index.doc_ids()[i] for i in picks]
        res = evaluate(index, queries, gold)
        results.append(
            {
                "docs": n,
                "chars": chars,
                "build_s": round(build, 1),
                "build_cpu_s": round(build_cpu, 1),
                "docs_per_s": round(n / build, 1),
                "docs_per_cpu_s": round(n / build_cpu, 1),
                "peak_rss_mb": round(peak.peak / 2**20),
                "rss_before_mb": round(base / 2**20),
                "index_mb": round(size / 2**20, 1),
                "nnz": meta["nnz"],
                "terms": meta["num_terms"],
                "queries_per_s": res["queries_per_s"],
                "queries_per_cpu_s": res["queries_per_cpu_s"],
            }
        )
        print(json.dumps(results[-1]), flush=True)
        del index
        shutil.rmtree(out)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["quality", "scale"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 40_000])
    args = parser.parse_args()
    if not DATA.is_dir():
        sys.exit(f"shared data not found at {DATA}")
    with tempfile.TemporaryDirectory(prefix="cube-ray-bench-") as tmp:
        work = Path(tmp)
        if args.what == "quality":
            print(json.dumps({"ncp": ncp(work)}, ensure_ascii=False), flush=True)
            print(json.dumps({"guangdong": guangdong(work)}, ensure_ascii=False))
        else:
            scale(work, args.sizes)


if __name__ == "__main__":
    main()
