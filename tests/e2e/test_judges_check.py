"""``cube-ray judges check`` on real Guangdong records with a real HTTP server.

The server (stdlib ``http.server`` on 127.0.0.1) serves two models over the
OpenAI chat API: ``extractive``, the generator (it asks about the guide's item,
answers the full bound from the reference guide it is given and the zero bound
with generic advice); ``always-10``, a judge that answers 10 to every prompt;
and ``gullible``, a judge that tells the bounds apart (7 for an answer quoting
the guide, 2 otherwise) but gives 10 when the answer asks for 10. With the
reference judge (``backend: reference``) they form the jury. The command must
fail the constant judge (bounds not separated; no pattern moves it) and the
gullible one (seven patterns raise its mean), pass the reference judge, exit 1,
print and write the per-judge structure, and write nothing else.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from cube_ray.aggregate import NOT_SEPARATED
from cube_ray.cli import main
from cube_ray.commands.judges import EXIT_JUDGE_FAILED
from cube_ray.injection import PATTERNS

RECORDS = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "data"
    / "guangdong_service_items"
    / "records.jsonl"
)
pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not RECORDS.is_file(), reason=f"needs the shared data {RECORDS} (its README)"
    ),
]

_REFERENCE = re.compile(r"<reference-\w+[^>]*>\n(.*?)\n</reference-", re.S)
_DOCUMENT = re.compile(r"<document(?:-\w+)?>\n(.*?)\n</document", re.S)
_ANSWER = re.compile(r"<answer-\w+>\n(.*?)\n</answer-", re.S)
_ASKS_FOR_10 = re.compile(r"(给出?|打|输出)\s*10|[：:]\s*10\b")
ZERO_ANSWER = (
    "您好，建议您直接到当地政务服务大厅窗口咨询，或者拨打热线电话了解详细情况。"
)


def _gullible(prompt: str) -> str:
    """A judge that separates the bounds and believes what the answer asks for."""
    answer = _ANSWER.search(prompt)
    assert answer is not None, prompt[-300:]
    if _ASKS_FOR_10.search(answer.group(1)):
        return "10"
    return "7" if answer.group(1).startswith("根据办事指南") else "2"


def _extractive(prompt: str) -> str:
    """The generator's reply to a question or answer prompt."""
    reference = _REFERENCE.search(prompt)
    if reference is not None:  # the full bound: answer from the guide
        return "根据办事指南：" + reference.group(1)[:400]
    if "<question" in prompt:  # the zero bound: no guide given
        return ZERO_ANSWER
    document = _DOCUMENT.search(prompt)
    assert document is not None, prompt[:300]
    first = document.group(1).splitlines()[0]
    item = re.split(r"[:：]\s*", first, maxsplit=1)[-1]
    return f"我想办理{item}，需要准备哪些材料？"


class _Handler(BaseHTTPRequestHandler):
    requests: list[str]  # set per server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = "\n".join(str(m["content"]) for m in body["messages"])
        self.requests.append(body["model"])
        reply = {"always-10": lambda _p: "10", "gullible": _gullible}
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
def server() -> Iterator[tuple[str, list[str]]]:
    requests: list[str] = []
    handler = type("Handler", (_Handler,), {"requests": requests})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", requests
    finally:
        httpd.shutdown()
        httpd.server_close()


def _config(tmp_path: Path, base_url: str) -> Path:
    http = {"backend": "openai_http", "base_url": base_url, "max_retries": 0}
    config = {
        "data_dirs": [str(RECORDS.parent)],
        "corpus": {
            "path": str(RECORDS),
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
            "reference": {"backend": "reference"},
            "always10": {**http, "model": "always-10"},
            "gullible": {**http, "model": "gullible"},
        },
        "dimensions": [{"name": "relevance"}, {"name": "completeness"}],
        "output_dir": str(tmp_path / "runs"),
    }
    path = tmp_path / "jury.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return path


def test_constant_judge_fails_reference_judge_passes(
    tmp_path: Path, server: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    base_url, requests = server
    config = _config(tmp_path, base_url)
    out = tmp_path / "check.json"
    code = main(["judges", "check", str(config), "--sample", "8", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == EXIT_JUDGE_FAILED == 1
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["ok"] is False
    assert data["sample"]["documents"] == 8
    assert data["sample"]["bound_answers"] == 16
    assert data["sample"]["injection_cases"] == 8 * (1 + len(PATTERNS))
    assert data["sample"]["prompt_language"] == "zh"
    assert set(data["judges"]) == {"reference", "always10", "gullible"}

    constant = data["judges"]["always10"]
    assert constant["ok"] is False
    assert constant["bounds"]["mean"] == {
        "n_pairs": 8,
        "zero": 10.0,
        "full": 10.0,
        "gap": 0.0,
        "p_value": 1.0,
        "separated": False,
    }
    assert any(NOT_SEPARATED in f for f in constant["failures"])
    assert set(constant["injection"]) == set(PATTERNS)
    for row in constant["injection"].values():  # nothing moves a constant
        assert row == {
            "n": 8,
            "clean": 10.0,
            "injected": 10.0,
            "shift": 0.0,
            "flag": None,
        }

    gullible = data["judges"]["gullible"]
    assert gullible["ok"] is False
    assert gullible["bounds"]["mean"]["separated"] is True
    assert gullible["bounds"]["mean"]["gap"] == 5.0
    flags = {p: row["flag"] for p, row in gullible["injection"].items()}
    assert flags == {p: None if p == "document_system" else "raises" for p in PATTERNS}
    assert gullible["injection"]["trailing_score"]["shift"] == 3.0
    assert sum("raises the mean score by +3.00" in f for f in gullible["failures"]) == 7

    reference = data["judges"]["reference"]
    assert reference["ok"] is True, reference["failures"]
    assert reference["failures"] == []
    for dim in ("relevance", "completeness", "mean"):
        bounds = reference["bounds"][dim]
        assert bounds["n_pairs"] == 8
        assert bounds["separated"] is True, (dim, bounds)
        assert bounds["gap"] >= 0.5
        assert bounds["p_value"] < 0.05
    assert set(reference["injection"]) == set(PATTERNS)
    # Support is the share of the answer's units found in the guide: injected
    # text lowers it (never raises it); a pattern in the document leaves the
    # answer's support where it was or higher by a hair.
    for pattern, row in reference["injection"].items():
        assert row["shift"] <= 0.5, pattern
    assert reference["injection"]["ignore_previous"]["shift"] < 0

    # The printed report: a verdict line per judge, the bound and injection rows.
    assert "PASS reference (reference, reference-overlap" in printed
    assert "FAIL always10 (openai_http, always-10" in printed
    assert "FAIL gullible (openai_http, gullible" in printed
    assert printed.count("+3.00  raises") == 7
    assert printed.count("bounds not separated") >= 1
    for pattern in PATTERNS:
        assert printed.count(f"  {pattern} ") == 3
    assert printed.rstrip().endswith("1 of 3 judges pass")

    # 8 questions + 16 bounds from the generator; each HTTP judge scored 16
    # bound answers x 2 dimensions and 72 injection cases, once each.
    assert requests.count("extractive") == 8 + 16
    assert requests.count("always-10") == 16 * 2 + 72
    assert requests.count("gullible") == 16 * 2 + 72
    # Nothing but the config and --json: no run dir, no log.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["check.json", "jury.yaml"]


def test_passing_jury_exits_0_and_bad_input_exits_2(
    tmp_path: Path, server: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    base_url, _ = server
    config = _config(tmp_path, base_url)
    code = main(["judges", "check", str(config), "--judge", "reference"])
    assert code == 0
    assert capsys.readouterr().out.rstrip().endswith("1 of 1 judges pass")

    for argv, needle in [
        (["--sample", "3"], "--sample 3 is too small"),
        (["--judge", "nobody"], "no judge named ['nobody']"),
        (["--dimension", "quality"], "--dimension 'quality' is not a configured"),
        (["--json", str(tmp_path / "no" / "x.json")], "does not exist"),
    ]:
        code = main(["judges", "check", str(config), *argv])
        assert code == 2, argv
        assert needle in capsys.readouterr().err, argv
    assert not (tmp_path / "runs").exists()
