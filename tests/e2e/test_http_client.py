"""cube_ray's one HTTP client, against real servers on 127.0.0.1.

The start-up checks (``GET /models``, the probe request) and the run's own
requests meet the same rules: a redirect to another port is not followed (the
key never reaches it), a ``file://`` base URL is refused when the config loads,
a server that drips its reply one byte a second is cut at the timeout, and a
60 MB reply is dropped at the byte limit instead of read whole.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from cube_ray.config import RunConfig
from cube_ray.engines.config import OpenAIHttpEngineConfig
from cube_ray.engines.openai_http import OpenAIHttpEngine
from cube_ray.errors import ClusterError, ConfigError
from cube_ray.http_reply import fetch
from cube_ray.preflight import check_endpoints
from cube_ray.preflight._endpoints import MODELS_MAX_BYTES, _probe_request
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

KEY_ENV = "CUBE_TEST_REDIRECT_KEY"
KEY = "sk-" + "Rd9" * 8
MODELS = b'{"data": [{"id": "judge-7b"}]}'
BIG_BYTES = 60 * 2**20


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, behave: Callable[[BaseHTTPRequestHandler], None]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behave = behave
        self.seen: list[tuple[str, str | None]] = []
        """(path, Authorization header) of every request received."""
        self.sent = 0
        """Body bytes written (a client that stops reading stops it)."""

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        self.server.behave(self)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.do_GET()


@contextmanager
def serving(behave: Callable[[BaseHTTPRequestHandler], None]) -> Iterator[_Server]:
    server = _Server(behave)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _models(h: BaseHTTPRequestHandler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(MODELS)))
    h.end_headers()
    h.wfile.write(MODELS)


def _redirect_to(target: str) -> Callable[[BaseHTTPRequestHandler], None]:
    def behave(h: BaseHTTPRequestHandler) -> None:
        h.send_response(302)
        h.send_header("Location", target + h.path.removeprefix("/v1"))
        h.send_header("Content-Length", "0")
        h.end_headers()

    return behave


def _drip(h: BaseHTTPRequestHandler) -> None:
    """Headers at once, then one byte a second for a minute."""
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.end_headers()
    try:
        for byte in (b" " * 60)[:60]:
            h.wfile.write(bytes([byte]))
            h.wfile.flush()
            time.sleep(1)
    except OSError:
        return


def _huge(h: BaseHTTPRequestHandler) -> None:
    """A 60 MB JSON reply without Content-Length, in 64 KiB writes."""
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.end_headers()
    chunk = b" " * 2**16
    server: _Server = h.server  # type: ignore[assignment]
    try:
        while server.sent < BIG_BYTES:
            h.wfile.write(chunk)
            server.sent += len(chunk)
    except OSError:
        return


def _config(tmp: Path, base_url: str, **judge: Any) -> RunConfig:
    corpus, ids = make_corpus(tmp, 3)
    path = fake_config(tmp, corpus, make_qa_file(tmp, ids))
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg["judges"]["h"] = {
        "backend": "openai_http",
        "base_url": base_url,
        "model": "judge-7b",
        "api_key_env": KEY_ENV,
        **judge,
    }
    return RunConfig.from_dict(cfg)


def test_redirect_to_another_port_never_gets_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    with serving(_models) as elsewhere, serving(_redirect_to(elsewhere.base)) as first:
        config = _config(tmp_path, first.base)
        with pytest.raises(ClusterError) as info:
            check_endpoints(config)
        text = str(info.value)
        assert f"judges.h: GET {first.base}/models answered HTTP 302" in text
        assert "not followed" in text
        assert KEY not in text
        # The probe request and the run's own requests: not followed either.
        engine_config = config.judges["h"]
        assert isinstance(engine_config, OpenAIHttpEngineConfig)
        _, _, error = _probe_request(engine_config, 4)
        assert error is not None
        assert "HTTP 302" in error
        engine = OpenAIHttpEngine.from_config(
            engine_config.model_copy(update={"max_retries": 0})
        )
        results = engine.generate(["hello"], sampling=engine_config.sampling)
        assert results[0].text is None
        assert first.seen  # the first server was asked, with the key
        assert all(auth == f"Bearer {KEY}" for _, auth in first.seen)
        assert elsewhere.seen == []  # nothing reached the other port


def test_file_url_is_refused_at_config_load_before_any_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, "file:///etc/passwd#x")
    text = str(info.value)
    assert "judges.h.openai_http.base_url: Value error, base_url must be an" in text
    assert "its scheme is 'file'" in text
    assert "root:" not in text
    # The client itself refuses it too, before anything is opened.
    with pytest.raises(ValueError, match="scheme is 'file'"):
        fetch("GET", "file:///etc/passwd", timeout_s=1)


@pytest.mark.parametrize(
    ("field", "entry"),
    [
        ("systems", {"name": "rag@svc", "kind": "http", "url": "file:///etc/x"}),
        (
            "systems",
            {
                "name": "rag@dense",
                "kind": "builtin_rag",
                "retriever": "dense",
                "embedding_model": "e",
                "embedding_url": "ftp://127.0.0.1/v1",
            },
        ),
    ],
)
def test_system_urls_are_http_only(
    tmp_path: Path, field: str, entry: dict[str, Any]
) -> None:
    corpus, ids = make_corpus(tmp_path, 3)
    path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg[field].append(entry)
    with pytest.raises(ConfigError, match="must be an http:// or https:// URL"):
        RunConfig.from_dict(cfg)


def test_slow_drip_models_reply_is_bounded_by_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    with serving(_drip) as server:
        config = _config(tmp_path, server.base, timeout_s=2)  # the engine's own
        start = time.monotonic()
        with pytest.raises(ClusterError) as info:
            check_endpoints(config)
        took = time.monotonic() - start
    assert "failed (no complete reply within 2 s)" in str(info.value)
    assert took < 10  # the drip lasts 60 s


def test_oversized_models_reply_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    with serving(_huge) as server:
        config = _config(tmp_path, server.base)
        with pytest.raises(ClusterError) as info:
            check_endpoints(config)
        time.sleep(0.5)  # the server's write fails once the client has gone
        sent = server.sent
    assert f"replied with more than {MODELS_MAX_BYTES} bytes" in str(info.value)
    # The client stopped reading: far less than the 60 MB was ever sent.
    assert sent < BIG_BYTES / 4
