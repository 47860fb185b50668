"""A system that echoes the key cube_ray sends it (issue 34, item 8).

``cube-ray run`` against an HTTP system on 127.0.0.1 whose answers hold the
``Authorization`` token it received, plain and in base64, and an HTTP judge
that records what it is sent. The key reaches no file of the run dir (raw
bytes and decoded Parquet values), nor the judge; the answers hold ``***``;
the manifest counts the masked answers; the report says which system echoed
a secret; the audit sheet drawn from the run holds no key either.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from cube_ray.pipeline import part_files
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

N_DOCS = 4
TOKEN_VAR = "CUBE_RAY_ECHO_TOKEN"
SECRET = "echo-" + "Kp3z" * 8
JUDGE_VAR = "CUBE_RAY_ECHO_JUDGE_KEY"
JUDGE_KEY = "sk-judge-" + "Wm8r" * 6


class Stub(ThreadingHTTPServer):
    """The RAG service (``/v1/answer``) and an OpenAI-compatible judge in one."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.judge_bodies: list[bytes] = []
        self.rag_auth: list[str | None] = []

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: Stub

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send({"object": "list", "data": [{"id": "rec"}]})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        auth = self.headers.get("Authorization")
        if self.path.endswith("/chat/completions"):
            with self.server.lock:
                self.server.judge_bodies.append(raw)
            self._send(
                {
                    "choices": [{"message": {"role": "assistant", "content": "7"}}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 1},
                }
            )
            return
        with self.server.lock:
            self.server.rag_auth.append(auth)
        body = json.loads(raw)
        token = (auth or "").removeprefix("Bearer ")
        echo = base64.b64encode(f"Authorization: Bearer {token}".encode()).decode()
        self._send(
            {
                "answer": f"答复：按规定办理。调试：收到的密钥 {token}；{echo}",
                "retrieved_doc_ids": [body["question_id"]],
            }
        )


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = Stub()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def _leaks(data: bytes) -> bool:
    """Whether ``data`` holds the key, plain or base64 of a text holding it."""
    b64 = base64.b64encode(f"Authorization: Bearer {SECRET}".encode())
    return SECRET.encode() in data or b64 in data


def test_a_system_echoing_its_key_leaves_it_in_no_file(
    tmp_path: Path, stub: Stub
) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    cfg_path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids), judges=1)
    cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
    cfg["systems"] = [
        {
            "name": "rag",
            "kind": "http",
            "url": f"{stub.url}/v1/answer",
            "headers": {"Authorization": "Bearer ${" + TOKEN_VAR + "}"},
        }
    ]
    cfg["judges"]["rec"] = {
        "backend": "openai_http",
        "base_url": stub.url + "/v1",
        "model": "rec",
        "api_key_env": JUDGE_VAR,
        "max_retries": 0,
        "pool": {"batch_size": 4, "num_cpus": 0.5},
    }
    cfg["env_vars"] = [TOKEN_VAR, JUDGE_VAR]
    cfg_path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "run"
    env = {**os.environ, TOKEN_VAR: SECRET, JUDGE_VAR: JUDGE_KEY}
    proc = subprocess.run(
        [sys.executable, "-m", "cube_ray.cli", "run", str(cfg_path), "--out",
         str(run_dir), "--no-progress"],
        capture_output=True, text=True, env=env, timeout=850, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    # The system got the key, and sent it back in every answer.
    assert stub.rag_auth == [f"Bearer {SECRET}"] * N_DOCS
    assert not _leaks(proc.stdout.encode() + proc.stderr.encode())
    # The judge was never sent the echoed key (it judged masked answers).
    assert stub.judge_bodies
    for body in stub.judge_bodies:
        assert not _leaks(body), body[:300]
        assert not _leaks(json.loads(body).__repr__().encode())

    # No file of the run dir: raw bytes, and Parquet values decoded.
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {"manifest.json", "summary.json", "report.md", "report.html"} <= {
        p.name for p in files
    }
    for path in files:
        assert not _leaks(path.read_bytes()), path
        assert JUDGE_KEY.encode() not in path.read_bytes(), path
        if path.suffix == ".parquet":
            text = json.dumps(pq.read_table(path).to_pylist(), ensure_ascii=False)
            assert not _leaks(text.encode()), path
    answers = [
        r for f in part_files(run_dir / "answers") for r in pq.read_table(f).to_pylist()
    ]
    rag = [a for a in answers if a["system"] == "rag"]
    assert len(rag) == N_DOCS
    for a in rag:
        assert a["status"] == "ok"
        assert "收到的密钥 ***；" in a["answer"], a["answer"]
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["secrets_redacted"] == {"answers": {"rag": N_DOCS}}
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    assert (
        "The system rag echoed a secret that cube_ray holds (a key it read from "
        f"the environment) {N_DOCS} times in its answers"
    ) in report

    # The audit sheet drawn from the run holds no key either.
    audit = subprocess.run(
        [sys.executable, "-m", "cube_ray.cli", "audit", str(run_dir), "--size", "2"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert audit.returncode == 0, audit.stderr[-3000:]
    sheets = list((run_dir / "audit").glob("audit-2*"))
    assert any(p.suffix == ".csv" for p in sheets)
    for path in sheets:
        assert not _leaks(path.read_bytes()), path
        if path.suffix == ".xlsx":
            with zipfile.ZipFile(path) as book:
                for name in book.namelist():
                    assert not _leaks(book.read(name)), (path, name)
