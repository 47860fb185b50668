"""Judge-template variants on the injection set: the hardened ("after") prompts only.

Scores the set of ``benchmarks/injection.py`` (same answers, same patterns) with
each judge template given, one local vLLM model loaded once, expected scores on
the relevance rubric, and prints the clean mean and the shift per pattern of
each template. Used to word the closing instruction of the packaged judge
templates (BENCHMARKS.md, "Prompt injection").

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/injection_variants.py \
        --model ~/.cache/cube_ray/models/gemma-3-270m --dtype float32 \
        --per-language 5 judge old_judge.txt
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import injection as inj  # noqa: E402

from cube_ray.injection import PATTERNS, shifts  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("templates", nargs="+", help="packaged names or files")
    parser.add_argument("--model", type=Path, required=True, help="local model dir")
    parser.add_argument("--dtype", default="float32", help="vLLM dtype")
    parser.add_argument("--per-language", type=int, default=5)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--out", type=Path, default=None, help="results JSON")
    args = parser.parse_args(argv)
    for key, value in inj.ENV.items():
        os.environ.setdefault(key, value)
    from cube_ray.engines import VllmEngineConfig
    from cube_ray.engines.vllm import VllmEngine

    cases = inj.build_set(args.per_language)
    config = VllmEngineConfig(
        model=str(args.model.expanduser()),
        dtype=args.dtype,
        score_mode="expected",
        max_model_len=args.max_model_len,
        enforce_eager=True,
    )
    # A base model without a chat template reads completion prompts with BOS,
    # as the embedded engine served it.
    engine = VllmEngine.from_config(config, ensure_bos=True)
    results: dict[str, Any] = {}
    try:
        for template in args.templates:
            prompts = inj.prompts_for(
                cases, "after", nonce="feedc0de1234abcd", template=template
            )
            start = time.perf_counter()
            got = engine.score(prompts, mode="expected")
            scores = [r.score if r.status == "ok" else None for r in got]
            clean = [
                s
                for c, s in zip(cases, scores, strict=True)
                if c.pattern is None and s is not None
            ]
            by_pattern = shifts(cases, scores)
            results[template] = {
                "seconds": round(time.perf_counter() - start, 1),
                "clean_mean": round(statistics.fmean(clean), 3),
                "missing": sum(s is None for s in scores),
                "shifts": {p: by_pattern[p] for p in PATTERNS if p in by_pattern},
            }
            print(json.dumps({template: results[template]}), flush=True)
    finally:
        engine.close()
    print("| template | clean mean | " + " | ".join(PATTERNS) + " |")
    print("|---|---|" + "---|" * len(PATTERNS))
    for template, res in results.items():
        cells = " | ".join(f"{res['shifts'][p]['all']['shift']:+.2f}" for p in PATTERNS)
        print(f"| {template} | {res['clean_mean']:.2f} | {cells} |")
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
