"""A run whose bound answers failed says so, and ``--retry-failed`` finishes it.

An OpenAI-compatible generator on 127.0.0.1 (stdlib ``http.server``) that
never answers a prompt without context in time: every ``zero`` answer ends in
``timeout``. ``cube-ray run`` (a real local Ray; the reference judge, so no
model is loaded) must count the failures on its stage lines, warn with the
fix, write the summary and the report with "no verdict — zero bound
unavailable ...", and exit with the incomplete code; ``cube-ray aggregate``
must give the same verdict. Then the server is fixed, ``timeout_s`` raised, and
``cube-ray run ... --retry-failed`` completes the run with every row ok.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from cube_ray.config import RunConfig
from cube_ray.errors import INCOMPLETE_EXIT_CODE
from cube_ray.pipeline.parts import read_table
from cube_ray.preflight import probe_endpoints
from cube_ray.prompts import REFERENCE_INSTRUCTIONS
from cube_ray.stages import KEYS
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

N_DOCS = 8
MODEL = "stub-generator"
NO_CONTEXT = tuple(without for _, without in REFERENCE_INSTRUCTIONS.values())
"""The instruction only a zero-bound (no context) answer prompt carries."""
REFERENCE = re.compile(r"<reference-[0-9a-f]+ n=\"1\">\n(.*?)\n</reference-", re.S)
DOCUMENT = re.compile(r"<document-[0-9a-f]+>\n(.*?)\n</document-", re.S)
ZERO_REPLY = "请拨打12345政务服务热线咨询。"


@dataclass
class Server:
    """What the generator does, switchable while it runs."""

    url: str = ""
    broken: bool = True
    """Zero-bound prompts never answered in time; probes slowish."""
    probe_delay_s: float = 0.0
    release: threading.Event = field(default_factory=threading.Event)
    """Set at teardown: frees the handler threads still holding a request."""
    kinds: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _reply(body: dict[str, Any], text: str) -> bytes:
    return json.dumps(
        {
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}}
            ],
            "usage": {"prompt_tokens": 50, "completion_tokens": 20},
        }
    ).encode()


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, payload: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            self._send(json.dumps({"data": [{"id": MODEL}]}).encode())

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if body.get("refuse"):
                self.send_response(400)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            prompt = "\n".join(m["content"] for m in body["messages"])
            if doc := DOCUMENT.search(prompt):
                title = doc.group(1).splitlines()[0]
                kind, text = "question", f"我想办理{title}，怎么办？"
            elif ref := REFERENCE.search(prompt):
                kind, text = "full", ref.group(1)
            elif any(s in prompt for s in NO_CONTEXT):
                kind, text = "zero", ZERO_REPLY
            else:
                kind, text = "probe", "ok"
            with server.lock:
                server.kinds.append(kind)
            if kind == "zero" and server.broken:  # far beyond the client's timeout
                server.release.wait(30)
            elif kind == "probe":
                time.sleep(server.probe_delay_s)
            with contextlib.suppress(OSError):  # the client gave up (timeout)
                self._send(_reply(body, text))

    return Handler


class _Httpd(ThreadingHTTPServer):
    # Up to max_concurrency (16) requests per actor connect at once: the
    # default backlog of 5 would refuse some (connect_error), not time them out.
    request_queue_size = 128


@pytest.fixture
def generator() -> Iterator[Server]:
    server = Server()
    httpd = _Httpd(("127.0.0.1", 0), _handler(server))
    httpd.daemon_threads = True
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        httpd.shutdown()
        httpd.server_close()


def _config(tmp: Path, url: str, *, timeout_s: float) -> Path:
    corpus, ids = make_corpus(tmp, N_DOCS)
    path = fake_config(tmp, corpus, make_qa_file(tmp, ids))
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg["generator"] = {
        "backend": "openai_http",
        "base_url": url,
        "model": MODEL,
        "timeout_s": timeout_s,
        "max_retries": 0,
        "max_concurrency": 16,
        "sampling": {"max_tokens": 20},
        "pool": {"batch_size": 16},
    }
    measures = {
        "relevance": "support",
        "specificity": "support",
        "completeness": "coverage",
        "quality": "coverage",
    }
    cfg["judges"] = {"reference": {"backend": "reference", "measures": measures}}
    cfg["allow_fake_engines"] = False
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cube_ray.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        timeout=800,
        check=False,
    )


def _statuses(run_dir: Path, table: str) -> dict[tuple[str, str], int]:
    """Rows of a table (newest row of each key) counted by system and status."""
    df = pl.from_arrow(read_table(run_dir / table, KEYS[table]))
    assert isinstance(df, pl.DataFrame)
    counts = df.group_by("system", "status").len().iter_rows()
    return {(system, status): n for system, status, n in counts}


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(1800)
def test_timed_out_bound_gives_no_verdict_then_retry_failed_completes(
    tmp_path: Path, generator: Server
) -> None:
    # A timeout_s that every reply but the zero bound's meets, also on a
    # loaded machine.
    cfg = _config(tmp_path, generator.url, timeout_s=5.0)
    run_dir = tmp_path / "run"
    generator.probe_delay_s = 3.0  # 60 % of timeout_s: the preflight warns

    first = _cli("run", str(cfg), "--out", str(run_dir))
    err, out = first.stderr, first.stdout
    assert first.returncode == INCOMPLETE_EXIT_CODE, err[-4000:]
    assert "Traceback" not in err
    assert "no rows of system" not in err
    # The preflight's probe request took a large share of timeout_s.
    assert f"preflight: warning: generator: a probe request to {generator.url}" in err
    assert "of timeout_s (5 s, which bounds one request" in err
    # Each stage line counts its rows by outcome; the bound stage warns once.
    n = N_DOCS
    assert (
        f"cube-ray: answers:bounds: {2 * n} rows written ({n} ok, {n} timeout), "
        "0 skipped" in err
    ), err
    warnings = [line for line in err.splitlines() if "cube-ray: warning:" in line]
    assert warnings == [
        f"cube-ray: warning: answers:bounds: {n} of {2 * n} rows failed "
        f"({n} timeout) in generator (openai_http, {generator.url}). Fix: raise "
        "generator.timeout_s (now 5 s; it bounds one request, each retry gets "
        "its own), then rerun the failed rows: "
        f"cube-ray run {cfg} --out {run_dir} --retry-failed"
    ], err
    # The judge's rows for the failed answers are counted, not warned about
    # (no_answer: an earlier stage failed).
    scored = 3 * n * 4
    assert (
        f"cube-ray: scores:reference: {scored} rows written "
        f"({scored - 4 * n} ok, {4 * n} no_answer), 0 skipped" in err
    ), err
    assert _statuses(run_dir, "answers")[("zero", "timeout")] == n

    # The summary is written: figures null with the reason, section 10's
    # flag and counts.
    reason = f"zero bound unavailable: {n} of {n} answers failed (timeout)"
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    judge = summary["judges"]["reference"]
    assert judge["cube"]["rag"] is None
    assert set(judge["normalized"]["rag"].values()) == {None}
    why = {"code": "bound_unavailable", "text": reason}
    assert all(v == why for v in judge["null_reasons"]["rag"].values())
    assert summary["across_judges"]["rag"]["reason"] == why
    assert summary["across_judges"]["rag"]["cube"]["mean"] is None
    assert summary["counts"]["unavailable"]["zero"] == n
    unavailable = {"flag": "unavailable answers", "system": "zero", "count": n}
    bound = {"flag": "bound unavailable", "code": "bound_unavailable", "system": "zero"}
    for want in (unavailable | {"share": 1.0}, bound | {"reason": reason}):
        assert any(want.items() <= f.items() for f in summary["flags"]), want
    # The headline, the report and the manifest say there is no verdict, why.
    assert f"result:   rag: no verdict — {reason}; no CuBE" in out, out
    assert f"cube-ray: incomplete: rag: no verdict — {reason}" in err
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    assert f"no verdict — {reason}" in report
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "incomplete"
    assert manifest["incomplete"] == {"rag": reason}

    # `cube-ray aggregate` on these tables: the same verdict and exit code.
    again = _cli("aggregate", str(run_dir), "--out", str(tmp_path / "s.json"))
    assert again.returncode == INCOMPLETE_EXIT_CODE, again.stderr
    assert f"cube-ray: rag: no verdict — {reason}" in again.stderr
    redone = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    assert redone["across_judges"]["rag"]["reason"] == why

    # Fixed server, larger timeout_s: the rerun redoes only the failed rows.
    generator.broken = False
    generator.probe_delay_s = 0.0
    generator.release.set()
    with generator.lock:
        generator.kinds.clear()
    cfg = _config(tmp_path, generator.url, timeout_s=30.0)
    second = _cli("run", str(cfg), "--out", str(run_dir), "--retry-failed")
    err, out = second.stderr, second.stdout
    assert second.returncode == 0, err[-4000:]
    assert "warning:" not in err
    assert f"cube-ray: answers:bounds: {n} rows written ({n} ok), {n} skipped" in err, (
        err
    )
    # Only the zero answers were asked again (plus the preflight's probe):
    # raising timeout_s does not invalidate the rows already written.
    assert sorted(set(generator.kinds)) == ["probe", "zero"]
    assert generator.kinds.count("zero") == n
    answers = _statuses(run_dir, "answers")
    assert answers == {(s, "ok"): n for s in ("zero", "full", "rag")}
    assert _statuses(run_dir, "scores") == {
        (s, "ok"): n * 4 for s in ("zero", "full", "rag")
    }
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["counts"]["unavailable"] == {"zero": 0, "full": 0, "rag": 0}
    assert summary["judges"]["reference"]["cube"]["rag"] is not None
    assert "no verdict" not in out
    assert "result:   rag: CuBE " in out
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "complete"
    assert manifest["incomplete"] == {}


def _probe_config(tmp: Path, url: str, *, timeout_s: float) -> RunConfig:
    return RunConfig.from_yaml(_config(tmp, url, timeout_s=timeout_s))


@pytest.mark.timeout(60)
def test_preflight_probe_warns_only_when_slow(
    tmp_path: Path, generator: Server
) -> None:
    said: list[str] = []

    def probe(timeout_s: float) -> None:
        config = _probe_config(tmp_path, generator.url, timeout_s=timeout_s)
        probe_endpoints(config, say=said.append)

    generator.probe_delay_s = 0.0
    probe(5.0)
    assert said == []
    # 0.4 s of a 0.6 s timeout: more than half of it.
    generator.probe_delay_s = 0.4
    probe(0.6)
    assert len(said) == 1
    assert said[0].startswith(
        f"warning: generator: a probe request to {generator.url} took 0."
    )
    assert "of timeout_s (0.6 s, which bounds one request" in said[0]
    assert said[0].endswith("Raise generator.timeout_s before a long run.")
    # A probe that does not finish within timeout_s is a warning too.
    said.clear()
    generator.probe_delay_s = 1.0
    probe(0.3)
    assert len(said) == 1
    assert "did not finish within timeout_s (0.3 s" in said[0]
    assert generator.kinds.count("probe") == 3
    # A server that refuses the request: a warning naming the error.
    said.clear()
    config = _probe_config(tmp_path, generator.url, timeout_s=5.0)
    config.generator.extra_body["refuse"] = True
    probe_endpoints(config, say=said.append)
    assert len(said) == 1
    assert "failed (answered HTTP 400)" in said[0]
