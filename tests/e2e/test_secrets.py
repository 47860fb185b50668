"""A planted secret, end to end: ``cube-ray run`` sends it to a real HTTP system
on 127.0.0.1 through ``${ENV}`` in a header, and no file of the run dir, no Ray
log and nothing on the console holds it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from cube_ray.pipeline import part_files
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

N_DOCS = 4
SECRET = "plant-" + "Qx9v" * 8
TOKEN_VAR = "CUBE_RAY_E2E_TOKEN"


class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.auth: list[str | None] = []
        self.failed_once = False
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.auth.append(self.headers.get("Authorization"))
            fail = not self.server.failed_once
            self.server.failed_once = True
        if fail:  # one retry, so the retry log line is exercised too
            payload, code = b'{"error": "busy"}', 503
        else:
            payload = json.dumps(
                {
                    "answer": f"答复：{body['question'][:10]}",
                    "retrieved_doc_ids": [body["question_id"]],
                },
                ensure_ascii=False,
            ).encode()
            code = 200
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def _files(root: Path) -> Iterator[Path]:
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            yield path


def test_planted_secret_reaches_the_server_and_nowhere_else(
    tmp_path: Path, recorder: Recorder
) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    cfg_path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
    host, port = recorder.server_address[:2]
    cfg["systems"] = [
        {
            "name": "rag",
            "kind": "http",
            "url": f"http://{host!s}:{port}/v1/answer",
            "headers": {"Authorization": "Bearer ${" + TOKEN_VAR + "}"},
            "backoff_base_s": 0.05,
        }
    ]
    cfg["env_vars"] = [TOKEN_VAR]
    cfg_path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "run"
    # A Ray temp dir of our own (short: Ray's socket paths have a length limit),
    # so its session logs are this run's only.
    ray_tmp = Path(tempfile.mkdtemp(prefix="crs", dir="/tmp"))
    try:
        env = {
            **os.environ,
            TOKEN_VAR: SECRET,
            "RAY_TMPDIR": str(ray_tmp),
        }
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "cube_ray.cli",
                "run",
                str(cfg_path),
                "--out",
                str(run_dir),
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=850,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        # The secret reached the service, on every request (the retry too).
        assert recorder.auth == [f"Bearer {SECRET}"] * (N_DOCS + 1)
        # Console.
        assert SECRET not in proc.stdout
        assert SECRET not in proc.stderr
        # Ray's session logs (workers, actors, raylet, GCS).
        ray_files = list(_files(ray_tmp))
        assert any(p.suffix in (".out", ".err", ".log") for p in ray_files)
        for path in ray_files:
            assert SECRET.encode() not in path.read_bytes(), path
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)

    # Every file of the run dir, raw bytes and (for Parquet) decoded values.
    files = list(_files(run_dir))
    assert {"manifest.json", "summary.json"} <= {p.name for p in files}
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), path
        if path.suffix == ".parquet":
            rows = pq.read_table(path).to_pylist()
            assert SECRET not in json.dumps(rows, ensure_ascii=False, default=str)
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    # The config is stored as written: the placeholder, not its value.
    assert manifest["config"]["systems"][0]["headers"] == {
        "Authorization": "Bearer ${" + TOKEN_VAR + "}"
    }
    assert manifest["config"]["env_vars"] == [TOKEN_VAR]
    assert len(manifest["prompt_nonce"]) == 16
    reports = [p for p in files if p.name in ("report.html", "report.md")]
    for report in reports:
        text = report.read_text(encoding="utf-8")
        assert manifest["prompt_nonce"] not in text  # masked where printed
    answers = [
        row
        for f in part_files(run_dir / "answers")
        for row in pq.read_table(f).to_pylist()
    ]
    assert sum(a["system"] == "rag" and a["status"] == "ok" for a in answers) == N_DOCS
