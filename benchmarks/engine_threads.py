"""CPU engine threads: prefill speed outside Ray and in a ``num_cpus=0.5`` host.

    PYTHONPATH=. .venv/bin/python benchmarks/engine_threads.py --out threads.json

One random-weight Llama built like ``tests/tiny_model.py`` but wider
(``--hidden`` 768, ``--layers`` 4, float32 as on a CPU without native
bfloat16), served by the project's vLLM engine (in-process, prefix caching off
so every round prefills again) three ways, all alive at once:

* ``outside``: in this process, outside Ray (torch's own thread count);
* ``before``: an engine host of the job's ``EnginePools`` with ``num_cpus``
  0.5 and ``OMP_NUM_THREADS=1`` in its engine ``env``: the thread count Ray
  gives a fractional-CPU worker, which hosts ran with before issue 28;
* ``after``: the same host without it: it sets its threads from its CPU
  affinity (``cube_ray.engines.threads``).

Each round times one prefill (``max_tokens`` 1) of ``--prompts`` prompts of
about ``--tokens`` tokens on each engine in turn (the order rotates per round),
so a load that comes and goes hits all three alike. Reports prompt tokens per
second per engine (median over rounds), the per-round ratios' medians, and
the threads each engine computed with. JSON on stdout.
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

import ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cube_ray.engines.base import SamplingParams
from cube_ray.engines.config import PoolConfig, VllmEngineConfig
from cube_ray.engines.identity import engine_id
from cube_ray.engines.registry import build_engine
from cube_ray.pipeline.engine_pool import EnginePools
from tests.tiny_model import build_tiny_model, training_lines

ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
"""As the embedded engine runs: in-process, offline."""


def _prompts(engine: Any, n: int, tokens: int) -> list[str]:
    lines = training_lines()
    out = []
    for i in range(n):
        text, k = f"{i}:", i
        while len(engine.encode(text)) < tokens:
            text += " " + lines[k % len(lines)]
            k += 7
        out.append(text)
    return out


def _threads(_: Any) -> int:
    import torch

    return int(torch.get_num_threads())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()

    model = build_tiny_model(hidden_size=args.hidden, num_layers=args.layers)
    config = VllmEngineConfig(
        model=str(model),
        max_model_len=args.tokens * 2,
        dtype="float32",
        enforce_eager=True,
        enable_prefix_caching=False,
        env=dict(ENV),
        pool=PoolConfig(num_cpus=0.5),
    )
    before_config = config.model_copy(update={"env": {**ENV, "OMP_NUM_THREADS": "1"}})
    for key, value in ENV.items():
        os.environ.setdefault(key, value)
    # Ray first: its raylet (and so every worker) inherits this process's
    # environment, which vLLM changes once it has started here.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    pools = EnginePools()
    engines: dict[str, Any] = {}
    threads: dict[str, int] = {}
    for name, cfg in (("before", before_config), ("after", config)):
        engines[name] = pools.factory([cfg], stage=name)(cfg)
        dispatcher = pools._pools[engine_id(cfg)][0]
        [host] = ray.get(dispatcher.hosts.remote())
        threads[name] = ray.get(host.__ray_call__.remote(_threads))
    outside = build_engine(config)
    engines["outside"], threads["outside"] = outside, _threads(None)
    prompts = _prompts(outside, args.prompts, args.tokens)
    sampling = SamplingParams(max_tokens=1)

    names = list(engines)
    for engine in engines.values():  # warm-up, not timed
        engine.generate(prompts[:1], sampling=sampling)
    rates: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            start = time.perf_counter()
            out = engines[name].generate(prompts, sampling=sampling)
            seconds = time.perf_counter() - start
            rates[name].append(sum(g.prompt_tokens for g in out) / seconds)

    def ratio(a: str, b: str) -> float:
        per_round = [x / y for x, y in zip(rates[a], rates[b], strict=True)]
        return round(statistics.median(per_round), 3)

    result = {
        "model": {"hidden": args.hidden, "layers": args.layers, "dtype": "float32"},
        "prompts": args.prompts,
        "prompt_tokens": sum(len(outside.encode(p)) for p in prompts),
        "rounds": args.rounds,
        "cores": len(os.sched_getaffinity(0)),
        "threads": threads,
        "tok_s": {n: [round(x, 1) for x in v] for n, v in rates.items()},
        "median_tok_s": {n: round(statistics.median(v), 1) for n, v in rates.items()},
        "after_over_before": ratio("after", "before"),
        "before_over_outside": ratio("before", "outside"),
        "after_over_outside": ratio("after", "outside"),
        "loadavg_end": os.getloadavg(),
    }
    pools.close()
    outside.close()
    ray.shutdown()
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
