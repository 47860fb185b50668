"""``cube-ray judges check`` with controlled faults (CUBE_METHOD.md section 12).

The HTTP server of ``test_judges_check`` (the ``extractive`` generator answers
the full bound from the guide) on real Guangdong records, with one more judge:
``seeing`` scores the exact extractive answer 8, the zero answer 2 and any
other answer (a faulted one) 5: it notices every fault. The constant judge
notices none. The command prints a kinds x dimensions table per judge and
exits 1 because the constant judge misses expected kinds.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from cube_ray.cli import main
from cube_ray.commands.judges import EXIT_JUDGE_FAILED
from tests.e2e.test_judges_check import (
    _ANSWER,
    _DOCUMENT,
    RECORDS,
    ZERO_ANSWER,
    _config,
    _extractive,
    _Handler,
)

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        not RECORDS.is_file(), reason=f"needs the shared data {RECORDS} (its README)"
    ),
]
KINDS = ["number", "entity", "omission", "unsupported"]


def _seeing(prompt: str) -> str:
    document, answer = _DOCUMENT.search(prompt), _ANSWER.search(prompt)
    assert document is not None
    assert answer is not None
    if answer.group(1) == "根据办事指南：" + document.group(1)[:400]:
        return "8"
    return "2" if answer.group(1) == ZERO_ANSWER else "5"


class _FaultHandler(_Handler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = "\n".join(str(m["content"]) for m in body["messages"])
        self.requests.append(body["model"])
        reply = {"always-10": lambda _p: "10", "seeing": _seeing}
        text = reply.get(body["model"], _extractive)(prompt)
        payload = json.dumps(
            {
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}}
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def base_url() -> Iterator[str]:
    handler = type("Handler", (_FaultHandler,), {"requests": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_faults_table_per_judge_and_exit_1_on_a_missed_kind(
    tmp_path: Path, base_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, base_url)
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    http = {"backend": "openai_http", "base_url": base_url, "max_retries": 0}
    config["judges"] = {
        "seeing": {**http, "model": "seeing"},
        "always10": {**http, "model": "always-10"},
        "reference": {"backend": "reference"},
    }
    config["qualification"] = {"kinds": KINDS, "seed": 1}
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    out = tmp_path / "check.json"
    code = main(["judges", "check", str(path), "--sample", "10", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == EXIT_JUDGE_FAILED
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["sample"]["fault_kinds"] == KINDS
    assert data["sample"]["faulted_answers"] >= 6 * len(KINDS)

    seeing = data["judges"]["seeing"]
    assert seeing["ok"] is True, seeing["failures"]
    block = seeing["qualification"]
    assert set(block) == set(KINDS)
    for kind in KINDS:
        assert set(block[kind]) == {"relevance", "completeness", "weighted"}
        for test in block[kind].values():
            assert test["detected"] is True, (kind, test)
            assert test["drop"] == pytest.approx(3.0)
            assert test["n"] + test["skipped"] == 10

    constant = data["judges"]["always10"]
    assert constant["ok"] is False
    for kind in ("number", "entity", "unsupported"):
        assert any(
            f.startswith(f"misses faults: {kind} on relevance")
            for f in constant["failures"]
        ), constant["failures"]
    assert any(
        f.startswith("misses faults: omission on completeness")
        for f in constant["failures"]
    )
    for test in constant["qualification"]["number"].values():
        assert test["drop"] == 0.0
        assert test["p_value"] == 1.0

    # The printed table: one per judge, a row per kind.
    assert printed.count("faults (drop/p)") == 3
    for kind in KINDS:
        assert printed.count(f"  {kind} ") >= 3
    assert "+3.00/" in printed
    assert "PASS seeing" in printed
    assert "FAIL always10" in printed
