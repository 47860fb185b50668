"""The README's "Evaluate your RAG system" config passes ``cube-ray check``.

The config is taken verbatim from README.md (between ``<!-- readme-config -->``
markers); only what its comments tell a newcomer to change is changed: the RAG's
``url`` and the API's ``base_url`` point at two real HTTP servers on 127.0.0.1,
a RAG service that retrieves by word overlap and an OpenAI-compatible API. The
corpus is written where the config's ``corpus.path`` says, with the fields its
comment shows. The key comes from the environment variable the config names.
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

from cube_ray.cli import main

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(
    r"<!-- readme-config -->\n```yaml\n(.*?)```\n<!-- /readme-config -->", re.S
)

DOCS = [
    {"id": "passport", "title": "Passport application", "text": "Bring your ID card."},
    {"id": "driving", "title": "Driving licence renewal", "text": "Bring a photo."},
    {"id": "tax", "title": "Tax number request", "text": "Apply online."},
]


def readme_config() -> str:
    match = BLOCK.search((ROOT / "README.md").read_text(encoding="utf-8"))
    assert match, "README.md has no ```yaml block between readme-config markers"
    return match.group(1)


class _Servers:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None]] = []  # (server, path, auth)
        self.lock = threading.Lock()


def _handler(servers: _Servers, role: str, model: str | None) -> type:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _reply(self, code: int, payload: object) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _note(self) -> None:
            with servers.lock:
                servers.seen.append(
                    (role, self.path, self.headers.get("Authorization"))
                )

        def do_GET(self) -> None:
            self._note()
            if role == "api" and self.path == "/v1/models":
                self._reply(200, {"object": "list", "data": [{"id": model}]})
            else:
                self._reply(404, {"error": "not found"})

        def do_POST(self) -> None:
            self._note()
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if role == "rag" and self.path == "/ask":
                words = set(str(body["question"]).lower().split())
                hits = [
                    d["id"] for d in DOCS if words & set(d["title"].lower().split())
                ]
                self._reply(
                    200, {"answer": "Bring your ID card.", "retrieved_doc_ids": hits}
                )
            elif role == "api" and self.path == "/v1/chat/completions":
                assert body["model"] == model
                self._reply(
                    200,
                    {
                        "choices": [{"message": {"role": "assistant", "content": "7"}}],
                        "usage": {"prompt_tokens": 40, "completion_tokens": 1},
                    },
                )
            else:
                self._reply(404, {"error": "not found"})

    return Handler


def _serve(handler: type) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def servers() -> Iterator[tuple[_Servers, str, str]]:
    """(record, RAG url root, API url root) of the two servers."""
    model = yaml.safe_load(readme_config())["judges"]
    model = next(iter(model.values()))["model"]
    record = _Servers()
    rag = _serve(_handler(record, "rag", None))
    api = _serve(_handler(record, "api", model))
    try:
        yield (
            record,
            f"http://127.0.0.1:{rag.server_address[1]}",
            f"http://127.0.0.1:{api.server_address[1]}",
        )
    finally:
        for server in (rag, api):
            server.shutdown()
            server.server_close()


def _point_at(text: str, rag: str, api: str) -> str:
    """Replace only the URLs' scheme and host, keeping paths and everything else."""
    text, n_api = re.subn(r"(base_url: )https?://[^/\s]+", rf"\g<1>{api}", text)
    text, n_rag = re.subn(r"(\burl: )https?://[^/\s]+", rf"\g<1>{rag}", text)
    assert n_api >= 2, "the generator and the judge each have a base_url"
    assert n_rag == 1, "one RAG system"
    return text


def test_readme_config_passes_check(
    tmp_path: Path,
    servers: tuple[_Servers, str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    record, rag, api = servers
    original = readme_config()
    text = _point_at(original, rag, api)
    # Nothing but the hosts changed.
    host = re.compile(r"https?://[^/\s]+")
    assert host.sub("H", text) == host.sub("H", original)

    raw = yaml.safe_load(text)
    config = tmp_path / "my_rag.yaml"
    config.write_text(text, encoding="utf-8")
    corpus = tmp_path / raw["corpus"]["path"]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    key_env = raw["judges"][next(iter(raw["judges"]))]["api_key_env"]
    monkeypatch.setenv(key_env, "sk-readme-test")
    monkeypatch.chdir(tmp_path)  # output_dir is relative: runs/my_rag

    code = main(["check", str(config)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert f"config: {config} is valid" in out
    # The RAG was asked one question and its ids are corpus ids.
    assert re.search(
        r"systems: rag: asked .*; 1 of 1 retrieved ids are corpus ids", out
    )
    assert out.rstrip().endswith("check: ok")
    # The API was asked for its models with the key from the environment.
    assert ("api", "/v1/models", "Bearer sk-readme-test") in record.seen
    assert ("rag", "/ask", None) in record.seen
    assert not (tmp_path / "runs").exists()  # check writes no run dir
