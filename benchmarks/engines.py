"""Engines benchmark: Ray Data actor pool vs bare ``vllm.LLM.generate``; prefix share.

Part 1 — judge throughput. The same judge prompts (Guangdong records, four
dimensions per answer) are scored with the same tiny random-weight model and
the same constrained sampling (structured choice "0".."10", 3 tokens), in one
process run:

* ``bare``: ``vllm.LLM.generate`` on all prompts at once (after a warm-up on
  other prompts, so every side runs warm; prefix cache reset before each timed
  run, so every side starts cold on the measured prompts), as text (vLLM
  tokenises: ``bare``) and as token ids tokenised outside the timer
  (``bare_ids``), alternating, median of two each;
* ``engine``: ``VllmEngine.score`` in-process (our tokenisation and parsing);
* ``ray``: a Ray Data ``map_batches`` actor pool whose actors build the engine
  with ``build_engine`` (warm-up in ``__init__``, like bare) and score per batch.

Requests/s of ``ray`` = rows / (last batch end - first batch start), measured
inside the actors: actor start-up (model load) is excluded on both sides, as
bare excludes ``LLM()`` construction. The end-to-end wall time including
start-up is printed too.

Part 2 — prefix share. For each of N Guangdong answers, the share of a judge
prompt's tokens that all four dimension prompts have in common (the part
vLLM's prefix cache computes once).

Usage::

    .venv/bin/python benchmarks/engines.py --answers 64 --batch-size 64
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

ENV = {
    # The same thread count in the driver (bare) and in the actor; otherwise
    # Ray sets OMP_NUM_THREADS from the actor's num_cpus and the comparison
    # measures thread settings, not Ray Data.
    "OMP_NUM_THREADS": "2",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
CORPUS = Path("/work/shared/data/guangdong_service_items/records.jsonl")
FIELDS = (
    ("TASK_NAME", "事项名称"),
    ("DEPT_NAME", "实施机构"),
    ("TASK_TYPE_TEXT", "事项类型"),
    ("accept_standard", "受理条件"),
    ("material_intro", "申请材料"),
    ("handle_time", "法定办结时限"),
    ("handle_time_limit", "承诺办结时限"),
    ("handle_location", "办理地点"),
    ("consult_phone", "咨询电话"),
)


def load_cases(n: int, *, skip: int = 0) -> list[tuple[str, str, str]]:
    """(document, question, answer) triples from the Guangdong corpus.

    The answer is a full-bound-like reply quoting the record's time limit,
    location and requirements (what a generator with the gold document writes).
    """
    if not CORPUS.is_file():
        sys.exit(f"benchmark needs {CORPUS} (see /work/shared/data/README.md)")
    cases = []
    with CORPUS.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i < skip:
                continue
            if len(cases) >= n:
                break
            rec = json.loads(line)
            doc = "\n".join(
                f"{label}: {rec[key]}"
                for key, label in FIELDS
                if rec.get(key) and rec[key] != "无"
            )
            name = rec.get("TASK_NAME") or "该事项"
            question = f"请问办理{name}需要满足什么条件，多久能办好？"
            answer = (
                f"办理{name}由{rec.get('DEPT_NAME') or '相关部门'}负责。"
                f"受理条件：{str(rec.get('accept_standard') or '无特别条件')[:300]}。"
                f"承诺办结时限为{rec.get('handle_time_limit') or '未注明'}，"
                f"{rec.get('handle_location') or ''}。"
            )
            cases.append((doc, question, answer))
    return cases


def judge_prompts(cases: list[tuple[str, str, str]]) -> list[list[str]]:
    from cube_ray.prompts import (
        DEFAULT_DIMENSIONS,
        default_rubric,
        fresh_nonce,
        render_judge,
    )

    nonce = fresh_nonce()
    return [
        [
            render_judge(d, q, a, default_rubric(dim), nonce=nonce)
            for dim in DEFAULT_DIMENSIONS
        ]
        for d, q, a in cases
    ]


def prefix_share(groups: list[list[str]], tokenizer: Any) -> dict[str, float]:
    """Per answer: common-prefix tokens of its 4 prompts / mean prompt tokens."""
    shares, lengths = [], []
    for prompts in groups:
        ids = [tokenizer.encode(p) for p in prompts]
        common = 0
        for column in zip(*ids, strict=False):
            if len(set(column)) != 1:
                break
            common += 1
        mean_len = statistics.fmean(len(x) for x in ids)
        shares.append(common / mean_len)
        lengths.append(mean_len)
    return {
        "answers": len(groups),
        "mean_prompt_tokens": round(statistics.fmean(lengths), 1),
        "share_mean": round(statistics.fmean(shares), 4),
        "share_min": round(min(shares), 4),
        "share_median": round(statistics.median(shares), 4),
    }


class BenchStage:
    """Judge stage shaped like the pipeline's: engine per actor, score per batch."""

    def __init__(self, config: dict[str, Any], warmup: list[str]) -> None:
        from cube_ray.engines import VllmEngineConfig, build_engine

        self.engine = build_engine(VllmEngineConfig.model_validate(config))
        self.engine.score(warmup, mode="argmax")

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        start = time.time()
        results = self.engine.score([str(p) for p in batch["prompt"]], mode="argmax")
        end = time.time()
        n = len(results)
        import torch

        return {
            "threads": [torch.get_num_threads()] * n,
            "score": [r.score for r in results],
            "status": [r.status for r in results],
            "t_start": [start] * n,
            "t_end": [end] * n,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=64, help="answers (x4 prompts)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--actors", type=int, default=1)
    parser.add_argument("--share-answers", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None, help="write results here")
    args = parser.parse_args()
    os.environ.update(ENV)

    from tests.tiny_model import build_tiny_model

    model = build_tiny_model()
    out: dict[str, Any] = {"model": model.name}

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    out["prefix_share_tiny_tokenizer"] = prefix_share(
        judge_prompts(load_cases(args.share_answers)), tok
    )
    from cube_ray.engines.embedded import model_dir

    embedded = model_dir()
    if (embedded / "tokenizer.json").is_file():
        gtok = AutoTokenizer.from_pretrained(str(embedded))
        out["prefix_share_embedded_tokenizer"] = prefix_share(
            judge_prompts(load_cases(args.share_answers)), gtok
        )
    print(json.dumps(out, ensure_ascii=False, indent=1), flush=True)

    prompts = [p for g in judge_prompts(load_cases(args.answers)) for p in g]
    warmup = [p for g in judge_prompts(load_cases(8, skip=1000)) for p in g]
    config = {
        "model": str(model),
        "max_model_len": 4096,
        "enforce_eager": True,
        "prompt_format": "completion",
        "env": ENV,
    }

    # -- bare vllm.LLM.generate -------------------------------------------
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from cube_ray.engines import SCORE_CHOICES, VllmEngineConfig, build_engine

    t0 = time.perf_counter()
    llm = LLM(
        model=str(model),
        max_model_len=4096,
        enforce_eager=True,
        enable_prefix_caching=True,
        seed=0,
    )
    bare_start_s = time.perf_counter() - t0
    params = SamplingParams(
        max_tokens=3,
        temperature=0.0,
        structured_outputs=StructuredOutputsParams(choice=list(SCORE_CHOICES)),
    )
    from vllm.inputs import TokensPrompt

    vtok = llm.get_tokenizer()
    llm.generate(warmup, params, use_tqdm=False)
    bare_runs: dict[str, list[float]] = {"text": [], "ids": []}
    tokenize_s = 0.0
    for _ in range(2):  # alternate, twice: the machine is shared and noisy
        for kind in ("text", "ids"):
            # Every timed run starts cold, like the engine and the pool do.
            llm.reset_prefix_cache()
            if kind == "ids":
                # Tokenised outside the timer: generation alone.
                t0 = time.perf_counter()
                batch: list[Any] = [
                    TokensPrompt(prompt_token_ids=list(vtok.encode(p))) for p in prompts
                ]
                tokenize_s = time.perf_counter() - t0
            else:
                batch = list(prompts)
            t0 = time.perf_counter()
            bare = llm.generate(batch, params, use_tqdm=False)
            bare_runs[kind].append(time.perf_counter() - t0)
            assert all(o.outputs[0].text in SCORE_CHOICES for o in bare)
    bare_s = statistics.median(bare_runs["text"])
    bare_ids_s = statistics.median(bare_runs["ids"])
    llm.llm_engine.engine_core.shutdown()
    del llm, bare

    # -- VllmEngine in-process --------------------------------------------
    engine = build_engine(VllmEngineConfig.model_validate(config))
    engine.score(warmup, mode="argmax")
    t0 = time.perf_counter()
    res = engine.score(prompts, mode="argmax")
    engine_s = time.perf_counter() - t0
    assert all(r.status == "ok" for r in res)
    engine.close()
    del engine

    # -- Ray Data actor pool ----------------------------------------------
    import ray
    import ray.data

    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": ENV},
    )
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        t0 = time.perf_counter()
        rows = (
            ray.data.from_items([{"prompt": p} for p in prompts])
            .map_batches(
                BenchStage,
                fn_constructor_kwargs={"config": config, "warmup": warmup},
                batch_size=args.batch_size,
                batch_format="numpy",
                num_cpus=0.5,
                compute=ray.data.ActorPoolStrategy(
                    min_size=args.actors, max_size=args.actors
                ),
            )
            .take_all()
        )
        ray_e2e_s = time.perf_counter() - t0
    finally:
        ray.shutdown()
    assert len(rows) == len(prompts)
    assert all(r["status"] == "ok" for r in rows)
    ray_s = max(float(r["t_end"]) for r in rows) - min(
        float(r["t_start"]) for r in rows
    )
    spans = {(float(r["t_start"]), float(r["t_end"])) for r in rows}
    ray_busy_s = sum(b - a for a, b in spans)

    n = len(prompts)
    import torch

    out["threads_bare"] = torch.get_num_threads()
    out["threads_actor"] = sorted({int(r["threads"]) for r in rows})
    out.update(
        requests=n,
        batch_size=args.batch_size,
        actors=args.actors,
        bare_start_s=round(bare_start_s, 2),
        bare_rps=round(n / bare_s, 1),
        bare_ids_rps=round(n / bare_ids_s, 1),
        bare_runs_s={k: [round(x, 2) for x in v] for k, v in bare_runs.items()},
        tokenize_s=round(tokenize_s, 2),
        engine_rps=round(n / engine_s, 1),
        ray_rps=round(n / ray_s, 1),
        ray_end_to_end_s=round(ray_e2e_s, 1),
        ratio_ray_vs_bare=round(bare_s / ray_s, 3),
        ratio_engine_vs_bare=round(bare_s / engine_s, 3),
        ratio_ray_vs_bare_ids=round(bare_ids_s / ray_s, 3),
        ray_batch_engine_s=round(ray_busy_s, 2),
    )
    print(json.dumps(out, ensure_ascii=False, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
