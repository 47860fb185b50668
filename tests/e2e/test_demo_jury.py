"""``cube-ray run`` with a config shaped like ``conf/demo.yaml`` (issues 33 and 36).

Real Guangdong records, a stratified sample, two variants of the built-in RAG
(k = 3 and k = 1), the generator served over the OpenAI chat API by a stub on
127.0.0.1 (the ``extractive`` generator of ``test_judges_check``: the full
bound quotes the guide, the zero bound says "ask at the counter"), the tiny
random-weight vLLM model as the LLM judge and the reference judge with the
fact check. Only the reference judge is qualified (``qualification.judges``),
and ``aggregate.require_qualification`` keeps the headline to judges holding a
certificate:

- the headline's jury is the certified reference judge only; the LLM judge
  is left out for having no certificate, and the console says the jury is
  deterministic;
- the result line names the judge and the fault kinds its certificate shows
  (derived from the summary, checked against it);
- the two variants have a paired comparison;
- a tiny ``--fit-minutes`` keeps the questions a verdict needs and says that it
  dropped the uncertified LLM judge instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cube_ray.aggregate import verdict_minimum
from cube_ray.cli import main
from cube_ray.report._format import CAUGHT_WORDS
from tests.conftest import TINY_ENGINE_ENV
from tests.e2e.test_judges_check import RECORDS, _extractive, _Handler
from tests.local_http import serving

pytestmark = [
    pytest.mark.ray,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(
        not RECORDS.is_file(), reason=f"needs the shared data {RECORDS} (its README)"
    ),
]
N_RECORDS = 40
SAMPLE = 12


class _GeneratorHandler(_Handler):
    def _send(self, payload: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        """The model list the run's preflight asks for."""
        self._send(json.dumps({"data": [{"id": "extractive"}]}).encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = "\n".join(str(m["content"]) for m in body["messages"])
        asked = "<document" in prompt or "<reference" in prompt or "<question" in prompt
        text = _extractive(prompt) if asked else "ok"  # else: the preflight's probe
        reply = {"choices": [{"index": 0, "message": {"content": text}}]}
        self._send(json.dumps(reply, ensure_ascii=False).encode())


@pytest.fixture
def base_url() -> Iterator[str]:
    with serving(type("Handler", (_GeneratorHandler,), {"requests": []})) as url:
        yield url


def _config(tmp_path: Path, base_url: str, model: Path) -> Path:
    lines = RECORDS.read_text(encoding="utf-8").splitlines()[:N_RECORDS]
    corpus = tmp_path / "records.jsonl"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tiny = {
        "backend": "vllm",
        "model": str(model),
        "max_model_len": 2048,
        "enforce_eager": True,
        "score_mode": "expected",
        "env": {k: TINY_ENGINE_ENV[k] for k in ("VLLM_ENABLE_V1_MULTIPROCESSING",)},
        "pool": {"batch_size": 64, "num_cpus": 0.5},
    }
    config: dict[str, Any] = {
        "corpus": {
            "path": str(corpus),
            "id_field": "TASK_CODE",
            "title_field": "TASK_NAME",
            "fields": [
                {"TASK_NAME": "事项名称"},
                {"DEPT_NAME": "实施机构"},
                {"material_intro": "申请材料"},
                {"handle_time_limit": "承诺办结时限"},
                {"handle_location": "办理地点"},
                {"consult_phone": "咨询电话"},
            ],
        },
        "sample": {"size": SAMPLE, "strata": ["AREA_CODE_TEXT"]},
        "generator": {
            "backend": "openai_http",
            "base_url": base_url,
            "model": "extractive",
            "max_retries": 0,
            "pool": {"batch_size": 32, "num_cpus": 0.25},
        },
        "judges": {
            "tiny": tiny,
            "reference": {
                "backend": "reference",
                "measures": {"relevance": "facts", "completeness": "coverage"},
            },
        },
        "dimensions": [{"name": "relevance"}, {"name": "completeness"}],
        "systems": [
            {"name": "rag", "kind": "builtin_rag", "k": 3},
            {"name": "rag@k1", "kind": "builtin_rag", "k": 1},
        ],
        "qualification": {
            "questions": SAMPLE,
            "judges": ["reference"],
            "certify_on": "dimensions",
        },
        "aggregate": {"require_qualification": True},
        "ray": {"num_cpus": 4, "write_rows": 64},
    }
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return path


def test_demo_shaped_run_headline_from_the_certified_jury(
    tmp_path: Path,
    base_url: str,
    tiny_model_dir: Path,
    tiny_engine_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = _config(tmp_path, base_url, tiny_model_dir)
    run_dir = tmp_path / "run"

    # A tiny budget: the sample keeps the questions a verdict needs, and the
    # uncertified LLM judge is dropped instead (said on the console).
    fewest = verdict_minimum(0.05)
    args = ["run", str(path), "--out", str(run_dir), "--dry-run"]
    assert main([*args, "--fit-minutes", "0.01"]) == 0
    captured = capsys.readouterr()
    [note] = [x for x in captured.err.splitlines() if "--fit-minutes 0.01" in x]
    # Left with the HTTP generator only, nothing on this CPU is estimated: the
    # whole sample, never fewer than a verdict needs.
    assert f"sample size {SAMPLE} of {SAMPLE}" in note, note
    assert fewest <= SAMPLE
    assert "no work left on a local CPU engine" in note
    assert "the fewest that can give a verdict" in note
    assert "dropped: tiny left out of the run" in note
    stages = {x.split()[0] for x in captured.out.splitlines() if x.strip()}
    assert "scores:reference" in stages
    assert "scores:tiny" not in stages
    assert "qualification:tiny" not in stages  # only the reference is qualified

    # The whole run: every judge, the headline from the certified one only.
    assert main(["run", str(path), "--out", str(run_dir), "--no-progress"]) == 0
    out = capsys.readouterr().out
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    judges = summary["judges"]
    assert judges["reference"]["certified"] is True
    assert judges["tiny"]["certified"] is False
    assert judges["tiny"].get("qualification") is None  # never qualified
    block = judges["reference"]["qualification"]
    caught = [
        k for k in CAUGHT_WORDS if any(t["detected"] for t in block.get(k, {}).values())
    ]
    assert caught, block  # the fact check catches something on these answers
    for system in ("rag", "rag@k1"):
        across = summary["across_judges"][system]
        assert across["judges"] == ["reference"], across
        assert "tiny" in across["excluded"], across

    words = ", ".join(CAUGHT_WORDS[k] for k in caught)
    result = [x for x in out.splitlines() if x.startswith("result:")]
    assert result, out
    assert f"1 of 2 judges: reference (certified here: {words})" in result[0], out
    assert "jury: no LLM judge holds a certificate on this run (tiny)" in out
    assert "the headline's jury is deterministic (reference, no LLM)" in out
    assert "left out: tiny: " in out

    # The paired comparison of the two variants.
    [pair] = summary["intervals"]["comparisons"]
    assert {pair["first"], pair["second"]} == {"rag", "rag@k1"}, pair
    assert pair["judges"] == ["reference"], pair
    assert pair["difference"] is not None, pair
    assert [x for x in out.splitlines() if "compared: " in x], out
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    assert f"reference (certified here: {words})" in report
