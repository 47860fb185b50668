"""``cube-ray run`` stopped by the environment: one sentence, exit 2, rows kept.

* A judge's API that starts refusing the key (HTTP 401) mid-run, served on
  127.0.0.1: the run stops with "judge keyed: the API rejected the key (HTTP
  401)", keeps every row written, and the rerun sends only the rest.
* A disk that fills while the scores are written (ENOSPC, raised inside Ray's
  writer tasks by a ``sitecustomize`` every Python process of the run loads):
  the run names the folder, says nothing is lost and how to resume; the rerun
  on a disk with room completes, and no file cut short is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

N_DOCS = 8
KEY_ENV = "CUBE_RAY_STOP_TEST_KEY"
KEY = "sk-stop-" + "Zq7w" * 6
OK_REQUESTS = 40
"""Score requests the judge's API answers before it refuses the key."""


class KeyedJudge(ThreadingHTTPServer):
    """An OpenAI-compatible judge that answers ``ok_requests`` POSTs, then 401."""

    daemon_threads = True

    def __init__(self, ok_requests: int) -> None:
        super().__init__(("127.0.0.1", 0), _JudgeHandler)
        self.ok_requests = ok_requests
        self.lock = threading.Lock()
        self.posts = 0
        self.refused = 0

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _JudgeHandler(BaseHTTPRequestHandler):
    server: KeyedJudge

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(200, {"object": "list", "data": [{"id": "keyed"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.posts += 1
            ok = self.server.posts <= self.server.ok_requests
            if not ok:
                self.server.refused += 1
        if not ok:
            self._send(401, {"error": {"message": "Incorrect API key provided"}})
            return
        self._send(
            200,
            {
                "choices": [{"message": {"role": "assistant", "content": "7"}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1},
            },
        )


@pytest.fixture
def judge() -> Iterator[KeyedJudge]:
    server = KeyedJudge(OK_REQUESTS)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def _run(
    cfg: Path, run_dir: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cube_ray.cli", "run", str(cfg), "--out",
         str(run_dir), "--no-progress"],
        capture_output=True, text=True, timeout=850, check=False,
        env={**os.environ, KEY_ENV: KEY, **(env or {})},
    )  # fmt: skip


def _rows(table_dir: Path) -> list[dict[str, Any]]:
    return [r for f in part_files(table_dir) for r in pq.read_table(f).to_pylist()]


def test_a_judge_refusing_the_key_mid_run_stops_it_with_a_sentence(
    tmp_path: Path, judge: KeyedJudge
) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    cfg_path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids), judges=1)
    cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
    cfg["judges"]["keyed"] = {
        "backend": "openai_http",
        "base_url": judge.url + "/v1",
        "model": "keyed",
        "api_key_env": KEY_ENV,
        "timeout_s": 5,
        "max_retries": 0,
        "max_concurrency": 2,
        "pool": {"batch_size": 2, "num_cpus": 0.5},
    }
    cfg["env_vars"] = [KEY_ENV]
    cfg_path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "run"

    proc = _run(cfg_path, run_dir)
    assert proc.returncode == 2, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    assert judge.refused >= 1
    error = [ln for ln in proc.stderr.splitlines() if ln.startswith("cube-ray: error:")]
    assert len(error) == 1, proc.stderr[-4000:]
    assert error[0].startswith(
        "cube-ray: error: judge keyed: the API rejected the key (HTTP 401) at "
        f"{judge.url}/v1"
    ), error[0]
    assert KEY_ENV in error[0]  # where the key comes from
    assert f"--out {run_dir}" in error[0]  # how to go on
    assert KEY not in proc.stderr
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "failed"

    # Every row written before the refusal is kept ...
    answers = _rows(run_dir / "answers")
    assert len(answers) == 3 * N_DOCS
    kept = [s for s in _rows(run_dir / "scores") if s["judge"] == "keyed"]
    assert 0 < len(kept) < 3 * N_DOCS * 4, len(kept)
    assert all(s["status"] == "ok" and s["score"] == 7.0 for s in kept)

    # ... and the rerun, the key accepted again, asks only for the others.
    with judge.lock:
        judge.ok_requests = 10**9
        before = judge.posts
    again = _run(cfg_path, run_dir)
    assert again.returncode == 0, again.stderr[-4000:]
    scored = [s for s in _rows(run_dir / "scores") if s["judge"] == "keyed"]
    assert len(scored) == 3 * N_DOCS * 4
    # The preflight's one probe, then one request per row not kept.
    assert judge.posts - before == 1 + (len(scored) - len(kept))


SITECUSTOMIZE = '''
"""Test only: the disk is full for part files written under a ``scores`` folder."""
import errno
import os

if os.environ.get("CUBE_RAY_TEST_FULL_DISK") == "scores":
    import pyarrow.parquet as _pq

    _write_table = _pq.write_table

    def _path(where):
        if isinstance(where, (str, os.PathLike)):
            return os.fspath(where)
        try:  # an open file (a temporary file the writer renames)
            return os.readlink(f"/proc/self/fd/{where.fileno()}")
        except (AttributeError, OSError, ValueError):
            return ""

    def write_table(table, where, *args, **kwargs):
        path = _path(where)
        if os.path.basename(os.path.dirname(path)) == "scores":
            if hasattr(where, "write"):  # a file cut short, as a full disk leaves
                where.write(b"PAR1" + b"\\0" * 100)
            else:
                with open(path, "wb") as fh:
                    fh.write(b"PAR1" + b"\\0" * 100)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return _write_table(table, where, *args, **kwargs)

    _pq.write_table = write_table
'''


def test_a_full_disk_mid_run_is_a_sentence_and_the_rerun_resumes(
    tmp_path: Path,
) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    cfg_path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids), judges=1)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    run_dir = tmp_path / "run"
    path = os.pathsep.join(
        p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p
    )
    proc = _run(
        cfg_path, run_dir, {"CUBE_RAY_TEST_FULL_DISK": "scores", "PYTHONPATH": path}
    )
    assert proc.returncode == 2, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    error = [ln for ln in proc.stderr.splitlines() if ln.startswith("cube-ray: error:")]
    assert len(error) == 1, proc.stderr[-4000:]
    line = error[0]
    assert "the disk is full (No space left on device)" in line, line
    assert f"writing to {run_dir / 'scores'}" in line, line  # which folder
    assert "Nothing is lost" in line, line
    assert f"rerun `cube-ray run {cfg_path} --out {run_dir}`" in line, line
    # The answers were written before the disk filled: kept.
    assert len(_rows(run_dir / "answers")) == 3 * N_DOCS
    # No file cut short is left behind.
    assert not [p for p in (run_dir / "scores").glob(".tmp-*")]

    # Room again: the rerun resumes and completes.
    again = _run(cfg_path, run_dir)
    assert again.returncode == 0, again.stderr[-4000:]
    assert "answers" in again.stdout + again.stderr
    assert len(_rows(run_dir / "scores")) == 3 * N_DOCS * 4
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "complete"


def test_a_full_disk_outside_a_stage_is_a_sentence(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """ENOSPC met by the command itself (not a stage): one sentence, exit 2."""
    import errno

    import cube_ray.sizing
    from cube_ray.cli import main

    target = tmp_path / "runs" / "a" / "plan.json"

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))

    monkeypatch.setattr(cube_ray.sizing, "plan_sample", full)
    assert main(["plan", str(tmp_path), "--half-width", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "cube-ray: error: the disk is full (No space left on device) writing to "
        f"{target.parent}. The rows a run wrote before are kept"
    ), err
    assert "rerun the same command" in err
    # Other OS errors keep their traceback (a bug, not the environment).
    monkeypatch.setattr(
        cube_ray.sizing,
        "plan_sample",
        lambda *a, **k: (_ for _ in ()).throw(
            PermissionError(errno.EACCES, "Permission denied")
        ),
    )
    with pytest.raises(PermissionError):
        main(["plan", str(tmp_path), "--half-width", "2"])
