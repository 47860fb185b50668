"""``cube-ray judges check`` with controlled faults (CUBE_METHOD.md section 12).

The HTTP server of ``test_judges_check`` (the ``extractive`` generator answers
the full bound from the guide) on real Guangdong records, with two more
judges: ``seeing`` scores the exact extractive answer 8, the zero answer 2 and
any other answer 5 (a faulted one, and a control: a harmless edit that keeps
every fact); ``digits`` scores the zero answer 2 and any other 8 when every
digit run of the answer (read in NFKC) is in the document, 4 otherwise. Net of
the controls, ``seeing`` detects nothing and punishes every harmless edit (a
false alarm); ``digits`` detects a changed number and misses a swapped name.
The constant judge notices nothing. The command prints each judge's
certificate and exits 1.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
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
from tests.local_http import serving

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


def _digits(prompt: str) -> str:
    document, answer = _DOCUMENT.search(prompt), _ANSWER.search(prompt)
    assert document is not None
    assert answer is not None
    if answer.group(1) == ZERO_ANSWER:
        return "2"
    text = unicodedata.normalize("NFKC", answer.group(1))
    known = unicodedata.normalize("NFKC", document.group(1))
    return "8" if all(r in known for r in re.findall(r"[0-9]+", text)) else "4"


class _FaultHandler(_Handler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = "\n".join(str(m["content"]) for m in body["messages"])
        self.requests.append(body["model"])
        reply = {"always-10": lambda _p: "10", "seeing": _seeing, "digits": _digits}
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
    with serving(type("Handler", (_FaultHandler,), {"requests": []})) as url:
        yield url


def test_faults_table_per_judge_and_exit_1_on_a_missed_kind(
    tmp_path: Path, base_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, base_url)
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    http = {"backend": "openai_http", "base_url": base_url, "max_retries": 0}
    config["judges"] = {
        "seeing": {**http, "model": "seeing"},
        "digits": {**http, "model": "digits"},
        "always10": {**http, "model": "always-10"},
    }
    config["qualification"] = {"kinds": KINDS, "seed": 1}
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    out = tmp_path / "check.json"
    code = main(["judges", "check", str(path), "--sample", "12", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == EXIT_JUDGE_FAILED
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["sample"]["fault_kinds"] == KINDS
    # Every fault judged has its control.
    assert data["sample"]["controls"] == data["sample"]["faulted_answers"] >= 12

    # Any edit marked down: the faults' drops equal the controls' (false
    # alarms), so nothing is detected net of the controls.
    seeing = data["judges"]["seeing"]
    assert seeing["ok"] is False
    block = seeing["qualification"]
    assert set(block) == set(KINDS)
    tested = [k for k in KINDS if block[k]["weighted"]["n"] >= 6]
    assert {"number", "unsupported"} <= set(tested)
    for kind in KINDS:
        assert set(block[kind]) == {"relevance", "completeness", "weighted"}
        for test in block[kind].values():
            assert test["detected"] is False, (kind, test)
            assert test["n"] + test["skipped"] == 12
    for kind in tested:
        test = block[kind]["weighted"]
        assert test["drop"] == test["control_drop"] == pytest.approx(3.0)
        assert test["net_drop"] == 0.0
        assert test["false_alarm"] is True
        assert any(
            w.startswith(f"punishes harmless edits: {kind} control on relevance")
            for w in seeing["warnings"]
        ), seeing["warnings"]
    assert any(
        f.startswith("misses faults: number on relevance") for f in seeing["failures"]
    )

    # The digit checker: a changed number is detected net of its control
    # (３０ for 30 keeps the value); a claim with no digit is missed.
    digits = data["judges"]["digits"]
    number = digits["qualification"]["number"]["relevance"]
    assert number["detected"] is True, number
    assert number["false_alarm"] is False
    assert number["control_drop"] == 0.0
    assert number["net_drop_interval"]["low"] > 0
    assert digits["ok"] is False
    assert any(
        f.startswith("misses faults: unsupported on relevance")
        for f in digits["failures"]
    ), digits["failures"]
    assert not any("misses faults: number" in f for f in digits["failures"])

    constant = data["judges"]["always10"]
    assert constant["ok"] is False
    for kind in ("number", "unsupported"):
        assert any(
            f.startswith(f"misses faults: {kind} on relevance")
            for f in constant["failures"]
        ), constant["failures"]
    for test in constant["qualification"]["number"].values():
        assert test["drop"] == test["control_drop"] == test["net_drop"] == 0.0
        assert test["net_p"] == 1.0

    # The printed certificate: one per judge, a row per kind.
    assert printed.count("faults (net/p)") == 3
    assert printed.count("certificate (weighted, net of controls") == 3
    for kind in KINDS:
        assert printed.count(f"  {kind} ") >= 3
    assert "+0.00/1 !" in printed  # the seeing judge's cells: false alarms
    assert re.search(r"  number +n +\d+  net drop \+\d\.\d\d \[", printed)
    assert "FAIL seeing" in printed
    assert "FAIL always10" in printed
