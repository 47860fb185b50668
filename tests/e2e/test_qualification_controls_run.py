"""``cube-ray run`` with qualification net of controls (CUBE_METHOD.md §12).

A real Ray run of 40 real Guangdong records with qualification on 30, the
generator and four judges served over the OpenAI chat API by one stub server
on 127.0.0.1 (the ``extractive`` generator of ``test_judges_check``):

- ``digits`` checks every digit run of the answer against the document: 9 if
  all are there, 4 otherwise (the text read in NFKC, as a reader reads ３０ as
  30). It must detect a changed number net of its control, with no false alarm
  there;
- ``length``: the score follows the answer's length. Detected on no kind;
- ``any-edit``: 9 for the full-bound answer exactly as written, 3 for any edit.
  Detected on no kind, false alarms on at least three;
- ``noise``: a score drawn from the prompt's hash. Detected on at most one
  kind.

The summary's certificate, its flags, the ``qualification`` table's control
rows and the report's certificate are checked too.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from cube_ray import schema
from cube_ray.cli import main
from cube_ray.pipeline import part_files
from cube_ray.qualification import KINDS, control_kind
from tests.e2e.test_judges_check import (
    _ANSWER,
    _DOCUMENT,
    RECORDS,
    _extractive,
    _Handler,
)
from tests.local_http import serving
from tests.pipeline_helpers import make_qa_file

pytestmark = [
    pytest.mark.ray,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(
        not RECORDS.is_file(), reason=f"needs the shared data {RECORDS} (its README)"
    ),
]
N_RECORDS = 40
QUESTIONS = 30
DIMS = ("relevance", "completeness")


def _parts(prompt: str) -> tuple[str, str]:
    document, answer = _DOCUMENT.search(prompt), _ANSWER.search(prompt)
    assert document is not None
    assert answer is not None
    return document.group(1), answer.group(1)


def _digits(prompt: str) -> str:
    document, answer = (unicodedata.normalize("NFKC", t) for t in _parts(prompt))
    runs = re.findall(r"[0-9]+", answer)
    return "9" if all(r in document for r in runs) else "4"


def _length(prompt: str) -> str:
    return str(min(10, round(len(_parts(prompt)[1]) / 50)))


def _any_edit(prompt: str) -> str:
    document, answer = _parts(prompt)
    return "9" if answer == "根据办事指南：" + document[:400] else "3"


def _noise(prompt: str) -> str:
    return str(1 + hashlib.sha256(prompt.encode()).digest()[0] % 9)


MODELS = ("extractive", "digits", "length", "any-edit", "noise")


def _reply(text: str) -> bytes:
    """An OpenAI chat completion whose message is ``text``."""
    return json.dumps(
        {
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}}
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1},
        }
    ).encode()


class _JuryHandler(_Handler):
    def _send(self, payload: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        """The model list the run's preflight asks for."""
        self._send(json.dumps({"data": [{"id": m} for m in MODELS]}).encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = "\n".join(str(m["content"]) for m in body["messages"])
        if _DOCUMENT.search(prompt) is None and "<reference" not in prompt:
            self._send(_reply("5"))  # the preflight's probe request
            return
        reply = {
            "digits": _digits,
            "length": _length,
            "any-edit": _any_edit,
            "noise": _noise,
        }.get(body["model"], _extractive)
        self._send(_reply(reply(prompt)))


@pytest.fixture
def base_url() -> Iterator[str]:
    with serving(type("Handler", (_JuryHandler,), {"requests": []})) as url:
        yield url


def _read(table_dir: Path) -> list[dict[str, object]]:
    return pa.concat_tables(
        [pq.read_table(f) for f in part_files(table_dir)], promote_options="default"
    ).to_pylist()


def test_four_stub_judges_certificates_net_of_controls(
    tmp_path: Path, base_url: str
) -> None:
    lines = RECORDS.read_text(encoding="utf-8").splitlines()[:N_RECORDS]
    corpus = tmp_path / "records.jsonl"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ids = [json.loads(x)["TASK_CODE"] for x in lines]
    http = {
        "backend": "openai_http",
        "base_url": base_url,
        "max_retries": 0,
        "pool": {"batch_size": 32, "num_cpus": 0.25},
    }
    config = {
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
        "generator": {**http, "model": "extractive"},
        "judges": {
            name: {**http, "model": name}
            for name in ("digits", "length", "any-edit", "noise")
        },
        "systems": [
            {
                "name": "rag",
                "kind": "qa_file",
                "path": str(make_qa_file(tmp_path, ids)),
                "k": 8,
            }
        ],
        "dimensions": [{"name": d} for d in DIMS],
        "qualification": {"questions": QUESTIONS, "seed": 0},
        "aggregate": {"require_separation": False, "weights": "equal"},
        "ray": {"num_cpus": 4, "write_rows": 64},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "run"
    assert main(["run", str(path), "--out", str(run_dir), "--no-progress"]) == 0

    # The table: a fault row and a control row per (question, kind).
    rows = _read(run_dir / "qualification")
    assert len(rows) == QUESTIONS * 2 * len(KINDS)
    by_key = {(r[schema.QUESTION_ID], r["kind"]): r for r in rows}
    for (qid, kind), r in by_key.items():
        if kind in KINDS and r[schema.STATUS] == "ok":
            control = by_key[(qid, control_kind(kind))]
            assert control[schema.STATUS] == "ok"
            assert control["original"] == r["original"]
            assert control["faulted"] not in (r["faulted"], r["original"])

    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    blocks = {j: summary["judges"][j]["qualification"] for j in summary["judges"]}

    def weighted(judge: str, kind: str) -> dict[str, object]:
        return blocks[judge][kind]["weighted"]  # type: ignore[no-any-return]

    for judge, block in blocks.items():  # shown with pytest -s
        for kind, per in block.items():
            t = per["weighted"]
            print(
                f"{judge:9} {kind:12} n={t['n']:>2} no_control={t['no_control']:>2} "
                f"drop={t['drop']} control={t['control_drop']} net={t['net_drop']} "
                f"net_p={t['net_p']} detected={t['detected']} "
                f"false_alarm={t['false_alarm']}"
            )

    def tested(judge: str) -> list[str]:
        return [k for k in KINDS if int(weighted(judge, k)["n"]) >= 6]  # type: ignore[call-overload]

    # (a) the digit checker notices a changed number beyond its control.
    number = weighted("digits", "number")
    assert number["detected"] is True, number
    assert number["false_alarm"] is False, number
    assert blocks["digits"]["number"]["relevance"]["detected"] is True
    ci = number["net_drop_interval"]
    assert ci["low"] is not None  # type: ignore[index]
    assert ci["low"] > 0  # type: ignore[index]
    # (b) the length judge and (c) the any-edit judge detect nothing.
    for judge in ("length", "any-edit"):
        assert len(tested(judge)) >= 3, (judge, tested(judge))
        for kind in KINDS:
            for fig, test in blocks[judge][kind].items():
                assert test["detected"] is False, (judge, kind, fig, test)
    alarms = [k for k in KINDS if weighted("any-edit", k)["false_alarm"]]
    assert len(alarms) >= 3, alarms
    for kind in alarms:
        test = weighted("any-edit", kind)
        assert test["drop"] == test["control_drop"] == 6.0
        assert test["net_drop"] == 0.0
    # (d) noise: at most one kind.
    assert sum(bool(weighted("noise", k)["detected"]) for k in KINDS) <= 1

    flags = {(f.get("judge"), f["flag"]) for f in summary["flags"]}
    for kind in alarms:
        assert ("any-edit", f"punishes harmless edits: {kind} control on weighted") in (
            flags
        )
    assert ("any-edit", "misses faults: number on relevance") in flags
    assert not any(
        j == "digits" and f.startswith("punishes harmless edits: number")
        for j, f in flags
    )

    report = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "any-edit: certificate on the weighted total" in report
    assert "any-edit punishes harmless edits" in report
