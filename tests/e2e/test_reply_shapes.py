"""RAG replies in the shapes Haystack (served by Hayhooks) and LlamaIndex give.

Stub servers on 127.0.0.1 replay a recorded reply of each shape
(``tests/data/replies/``, the examples of docs/systems.md) with the question
and the corpus ids put in. ``cube-ray check`` shows the answer and the ids its
paths read, names the right path when one is wrong (the corpus ids under
``meta``, the longest text under an object), and warns when the answer path
reads the same short text for two questions. A ``cube-ray run`` evaluates both
systems: the LlamaIndex service retrieves nothing for most questions, which is
a retrieval miss (recall below 1), not a misconfiguration that stops the run;
with ``--limit 3`` and ``sample.size: 12`` the work is said once, right.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from cube_ray.commands.check import probe_systems
from cube_ray.config import RunConfig
from cube_ray.errors import InputError
from cube_ray.pipeline import part_files
from tests.pipeline_helpers import ROOT, fake_config, make_corpus, make_qa_file

REPLIES = ROOT / "tests" / "data" / "replies"
RECORDED = (
    "To renew a passport, bring your identity card and the old passport to any "
    "entry-exit service window; it takes about 7 working days."
)
"""The answer text of both recorded replies."""
HAYHOOKS = {
    "answer_path": "result.llm.replies[0]._content[0].text",
    "retrieved_path": "result.retriever.documents[].meta.doc_id",
}
LLAMAINDEX = {
    "answer_path": "response",
    "retrieved_path": "source_nodes[].node.metadata.doc_id",
}


@dataclass
class Stub:
    """A RAG service replaying one recorded reply."""

    shape: str
    ids: list[str]
    hits_every: int = 1
    """Retrieve ids for one request in this many (the rest: nothing)."""
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply(self, question: str) -> bytes:
        with self.lock:
            n = self.requests
            self.requests += 1
        text = (REPLIES / f"{self.shape}.json").read_text(encoding="utf-8")
        first, second = self.ids[n % len(self.ids)], self.ids[(n + 1) % len(self.ids)]
        text = text.replace("DOC-1", first).replace("DOC-2", second)
        data = json.loads(text.replace(RECORDED, f"About {question}: {RECORDED}"))
        if n % self.hits_every:
            if self.shape == "hayhooks":
                data["result"]["retriever"]["documents"] = []
            else:
                data["source_nodes"], data["metadata"] = [], {}
        return json.dumps(data, ensure_ascii=False).encode()


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(stub: Stub) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                payload = stub.reply(str(body.get("query", "")))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        path = "/rag/run" if stub.shape == "hayhooks" else "/query"
        return f"http://127.0.0.1:{server.server_address[1]}{path}"

    yield start
    for server in servers:
        server.shutdown()


def _system(name: str, url: str, **paths: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "http",
        "url": url,
        "body": {"query": "{question}"},
        "max_retries": 0,
        **paths,
    }


def _config(tmp: Path, systems: list[dict[str, Any]], **extra: Any) -> Path:
    corpus, ids = make_corpus(tmp, 8)
    path = fake_config(tmp, corpus, make_qa_file(tmp, ids), extra=extra)
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg["systems"] = systems
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return path


def _ids(tmp: Path) -> list[str]:
    return make_corpus(tmp, 8)[1]


def _probe(path: Path) -> list[str]:
    said: list[str] = []
    probe_systems(RunConfig.from_yaml(path), say=said.append)
    return said


@pytest.mark.parametrize("shape", ["hayhooks", "llamaindex"])
def test_check_shows_what_the_documented_paths_read(
    tmp_path: Path, serve: Any, shape: str
) -> None:
    url = serve(Stub(shape, _ids(tmp_path)))
    paths = HAYHOOKS if shape == "hayhooks" else LLAMAINDEX
    said = _probe(_config(tmp_path, [_system("rag@svc", url, **paths)]))
    assert len(said) == 2, said  # two questions, no warning
    for line in said:
        assert line.startswith("rag@svc: asked '")
        assert "; answer 'About " in line
        assert "2 of 2 retrieved ids are corpus ids" in line
    assert said[0] != said[1]


@pytest.mark.parametrize(
    ("shape", "wrong", "named"),
    [
        (
            "hayhooks",
            {"retrieved_path": "result.retriever.documents[].id"},
            "the corpus ids are at 'result.retriever.documents[].meta.doc_id': "
            "set retrieved_path: result.retriever.documents[].meta.doc_id "
            "(the reply's top-level keys: ['result'])",
        ),
        (
            "hayhooks",
            {"answer_path": "result.llm.replies[0]"},
            "answer_path 'result.llm.replies[0]' lands on an object, not a text; "
            "the longest text under it is at "
            "'result.llm.replies[0]._content[0].text': set answer_path: "
            "result.llm.replies[0]._content[0].text "
            "(the reply's top-level keys: ['result'])",
        ),
        (
            "llamaindex",
            {"retrieved_path": "source_nodes[].node.id_"},
            "the corpus ids are at 'source_nodes[].node.metadata.doc_id'",
        ),
        (
            "llamaindex",
            {"answer_path": "source_nodes"},
            "answer_path 'source_nodes' lands on a list, not a text; the longest "
            "text under it is at 'source_nodes[1].node.text'",
        ),
        (
            "llamaindex",
            {"answer_path": "answer"},
            "answer_path 'answer' reads nothing; the longest text in the reply is at "
            "'response': set answer_path: response (the reply's top-level keys: "
            "['response', 'source_nodes', 'metadata'])",
        ),
    ],
)
def test_check_names_the_path_that_would_be_right(
    tmp_path: Path, serve: Any, shape: str, wrong: dict[str, str], named: str
) -> None:
    url = serve(Stub(shape, _ids(tmp_path)))
    paths = {**(HAYHOOKS if shape == "hayhooks" else LLAMAINDEX), **wrong}
    with pytest.raises(InputError) as info:
        _probe(_config(tmp_path, [_system("rag@svc", url, **paths)]))
    assert named in str(info.value), str(info.value)


def test_check_warns_of_the_same_short_answer_for_two_questions(
    tmp_path: Path, serve: Any
) -> None:
    url = serve(Stub("hayhooks", _ids(tmp_path)))
    paths = {**HAYHOOKS, "answer_path": "result.llm.replies[0]._role"}
    said = _probe(_config(tmp_path, [_system("rag@svc", url, **paths)]))
    assert len(said) == 3, said
    assert said[0].startswith("rag@svc: asked '")
    assert "answer 'assistant'" in said[0]
    assert said[2] == (
        "warning: rag@svc: answer_path 'result.llm.replies[0]._role' read the "
        "same short text 'assistant' for 2 different questions: it may be a role "
        "or a status, not the answer; the reply's longest text is at "
        "'result.llm.replies[0]._content[0].text'"
    )


def _cube_ray(*args: Any, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "cube_ray.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=500,
    )


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_check_cli_on_a_hayhooks_reply_prints_no_ray_start_up_lines(
    tmp_path: Path, serve: Any
) -> None:
    url = serve(Stub("hayhooks", _ids(tmp_path)))
    path = _config(tmp_path, [_system("rag@hayhooks", url, **HAYHOOKS)])
    done = _cube_ray("check", path, "--out", tmp_path / "run", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "systems: rag@hayhooks: asked '" in done.stdout
    assert "; answer 'About " in done.stdout
    assert done.stdout.rstrip().endswith("check: ok")
    console = done.stdout + done.stderr
    assert "Started a local Ray instance" not in console
    assert "Token authentication" not in console
    assert "WARNING" not in console, console


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_run_evaluates_both_shapes_and_an_empty_retrieval_is_a_miss(
    tmp_path: Path, serve: Any
) -> None:
    ids = _ids(tmp_path)
    haystack = serve(Stub("hayhooks", ids))
    llama = Stub("llamaindex", ids, hits_every=3)  # nothing for 2 of 3 questions
    systems = [
        _system("rag@hayhooks", haystack, **HAYHOOKS),
        _system("rag@llamaindex", serve(llama), **LLAMAINDEX),
    ]
    path = _config(tmp_path, systems, sample={"size": 12, "seed": 1})
    run_dir = tmp_path / "run"
    done = _cube_ray(
        "run", path, "--out", run_dir, "--limit", 3, "--no-progress", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [
        r
        for f in part_files(run_dir / "answers")
        for r in pq.read_table(f).to_pylist()
        if r["system"].startswith("rag@")
    ]
    assert len(rows) == 6
    assert {r["status"] for r in rows} == {"ok"}
    for r in rows:
        assert r["answer"].startswith("About ")
        assert r["answer"].endswith(RECORDED)
    llama_ids = [
        r["retrieved_doc_ids"] for r in rows if r["system"] == "rag@llamaindex"
    ]
    assert sorted(map(len, llama_ids)) == [0, 0, 2]  # 2 of 3 retrieved nothing
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["counts"]["questions"] == 3
    # The work is said once, right: 3 documents, not "a sample of 12".
    work = [x for x in done.stderr.splitlines() if x.startswith("cube-ray: work:")]
    assert len(work) == 1
    assert "a sample of 12" not in work[0]
    assert work[0].startswith(
        "cube-ray: work: 3 questions (every one of the 3 documents: sample.size 12 "
        "is more than the corpus under --limit 3)"
    ), work[0]
    assert "sample: every one of the 3 documents" in done.stdout, done.stdout
    assert "3 of 3 documents" not in done.stdout
    assert "compared: " in done.stdout  # two systems, one paired comparison
    # The run shows what each HTTP system's paths read from its first answer.
    for name in ("rag@hayhooks", "rag@llamaindex"):
        first = [
            x
            for x in done.stderr.splitlines()
            if x.startswith(f"cube-ray: {name}: first answer: asked '")
        ]
        assert len(first) == 1, done.stderr[-3000:]
        assert "; answer 'About " in first[0]
        assert "; retrieved ids [" in first[0]
