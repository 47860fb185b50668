r"""One BM25 search, outside the pipeline: per-query time and the texts lookup.

    python benchmarks/bm25_search.py --docs 200000 --index /tmp/idx-200000

Builds (or reuses, when ``--index`` holds one) a synthetic index of
``--docs`` documents (:func:`benchmarks.retrieval.synthetic`), then times
``Bm25Index.search`` (k = 8) on the pipeline benchmark's fake questions
(``广州市 says <12 hex digits>``: the region name hits a long posting list)
and ``Bm25Index.texts`` of 8 positions (what the built-in RAG does per
question to fill its prompt). CPU milliseconds per call
(``time.process_time``) beside wall milliseconds. To time another checkout's
code on the same index, put it first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from pathlib import Path

from cube_ray.retrieval.bm25 import Bm25Index, build_bm25_index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    if not (args.index / "meta.json").is_file():
        from benchmarks.retrieval import synthetic

        build_bm25_index(synthetic(args.docs), args.index, language="zh")
    index = Bm25Index(args.index)
    queries = [
        f"广州市 says {hashlib.sha256(str(i).encode()).hexdigest()[:12]}"
        for i in range(args.queries)
    ]
    rng = random.Random(0)
    picks = [[rng.randrange(len(index)) for _ in range(8)] for _ in queries]
    index.search(queries[0], k=8)  # the tokeniser's dictionary
    out: dict[str, object] = {"docs": len(index), "queries": len(queries)}
    for name, call in (
        ("search", lambda i: index.search(queries[i], k=8)),
        ("texts", lambda i: index.texts(picks[i])),
    ):
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(len(queries)):
            call(i)
        n = len(queries)
        out[f"{name}_ms_wall"] = round((time.perf_counter() - wall) / n * 1e3, 3)
        out[f"{name}_ms_cpu"] = round((time.process_time() - cpu) / n * 1e3, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
