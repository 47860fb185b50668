"""Dense and hybrid retrieval against a fake embedding endpoint on 127.0.0.1."""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pydantic
import pytest

from cube_ray.engines import FakeEngineConfig
from cube_ray.errors import EngineError
from cube_ray.retrieval import DenseIndex, HttpEmbedder, ensure_dense_index, rrf
from cube_ray.systems import BuiltinRagSystemConfig, QuestionIn, build_system
from cube_ray.systems.builtin_rag import BuiltinRagSystem
from tests.hostile_server import hostile_server
from tests.unit.test_retrieval import ZH_DOCS, ZH_QUERIES, write_documents

DIM = 256


def bigram_embedding(text: str) -> list[float]:
    """A deterministic stand-in for a model: hashed character bigrams."""
    vec = [0.0] * DIM
    chars = [c for c in text if not c.isspace()]
    for a, b in itertools.pairwise(chars):
        h = hashlib.blake2b(f"{a}{b}".encode(), digest_size=4).digest()
        vec[int.from_bytes(h, "little") % DIM] += 1.0
    return vec


class EmbeddingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.fail_next = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: EmbeddingServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        if self.server.fail_next > 0:
            self.server.fail_next -= 1
            payload, code = b'{"error": "busy"}', 503
        else:
            data = [
                {"index": i, "embedding": bigram_embedding(t)}
                for i, t in enumerate(body["input"])
            ]
            data.reverse()  # clients must order by "index"
            payload, code = json.dumps({"data": data}).encode(), 200
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddingServer]:
    srv = EmbeddingServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(5)


def test_http_embedder_batches_orders_normalises_retries(
    server: EmbeddingServer,
) -> None:
    embed = HttpEmbedder(base_url=server.url, model="m", batch_size=2)
    texts = ["居民身份证", "护照换发", "婚姻登记"]
    server.requests.clear()
    server.fail_next = 1
    rows = embed(texts)
    embed.close()
    assert rows.shape == (3, DIM)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, rtol=1e-5)
    expected = np.asarray(bigram_embedding("护照换发"), dtype=np.float32)
    np.testing.assert_allclose(rows[1], expected / np.linalg.norm(expected), 1e-5)
    # one 503 retried, then two batches of at most 2 texts
    assert [len(r["input"]) for r in server.requests] == [2, 2, 1]
    assert {r["model"] for r in server.requests} == {"m"}


def test_http_embedder_failure_is_an_engine_error(server: EmbeddingServer) -> None:
    server.fail_next = 10
    embed = HttpEmbedder(base_url=server.url, model="m", max_retries=1)
    with pytest.raises(EngineError, match="HTTP 503"):
        embed(["x"])
    server.fail_next = 0


def test_dense_index_search(server: EmbeddingServer, tmp_path: Path) -> None:
    docs = write_documents(tmp_path / "documents", ZH_DOCS)
    embed = HttpEmbedder(base_url=server.url, model="m")
    path = ensure_dense_index(
        docs, index_root=tmp_path / "index", embed=embed, model="m"
    )
    assert (
        ensure_dense_index(docs, index_root=tmp_path / "index", embed=embed, model="m")
        == path
    )
    index = DenseIndex(path)
    assert len(index) == len(ZH_DOCS)
    hits = index.search(embed(["婚姻登记去哪里办"])[0], k=3)
    assert hits[0].doc_id == "d-marriage"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    embed.close()


@pytest.mark.parametrize("retriever", ["dense", "hybrid"])
def test_builtin_rag_dense_and_hybrid(
    server: EmbeddingServer, tmp_path: Path, retriever: str
) -> None:
    docs = write_documents(tmp_path / "run" / "documents", ZH_DOCS)
    cfg = BuiltinRagSystemConfig(
        retriever=retriever,  # type: ignore[arg-type]
        embedding_url=server.url,
        embedding_model="m",
        k=3,
        hybrid_candidates=6,
        rrf_k=60,
    )
    system = build_system(cfg, documents_path=str(docs), generator=FakeEngineConfig())
    assert isinstance(system, BuiltinRagSystem)
    questions = [
        QuestionIn(f"q{i}", q, g) for i, (q, g) in enumerate(ZH_QUERIES.items())
    ]
    answers = system.answer(questions)
    assert all(a.status == "ok" for a in answers)
    assert all(len(a.retrieved_doc_ids) == 3 for a in answers)
    if retriever == "hybrid":
        assert [a.retrieved_doc_ids[0] for a in answers] == [
            q.doc_id for q in questions
        ]
        # The fused list is RRF over BM25 and dense top-6 lists.
        q = questions[0].question
        assert system.dense is not None
        lexical = [h.doc_id for h in system.index.search(q, k=6)]
        vec = HttpEmbedder(base_url=server.url, model="m")([q])[0]
        semantic = [h.doc_id for h in system.dense.search(vec, k=6)]
        assert answers[0].retrieved_doc_ids == rrf([lexical, semantic], top_n=3)
    index_root = docs.parent / "index"
    assert len(list(index_root.glob("dense-*/dense_meta.json"))) == 1
    system.close()


def test_dense_needs_an_endpoint() -> None:
    with pytest.raises(pydantic.ValidationError, match="embedding_url"):
        BuiltinRagSystemConfig(retriever="hybrid", embedding_model="m")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        ("drip", "no complete reply within timeout_s=2"),
        ("huge", "reply too large"),
        ("notjson", "malformed response"),
        ("nested", "malformed response"),
        ("gzip", "undecodable reply body"),
    ],
)
def test_http_embedder_hostile_server_is_one_clear_error(
    behaviour: str, expected: str
) -> None:
    # A real server on 127.0.0.1 whose every reply is hostile: each one ends
    # in one EngineError naming the endpoint and the cause, well within the
    # deadline (the drip server would take a minute to finish its body).
    with hostile_server([behaviour]) as hostile:
        embed = HttpEmbedder(
            base_url=hostile.url + "/v1", model="m", timeout_s=2.0, max_retries=1
        )
        t0 = time.monotonic()
        with pytest.raises(EngineError, match=expected) as info:
            embed(["居民身份证"])
        elapsed = time.monotonic() - t0
        embed.close()
    assert "/v1/embeddings" in str(info.value)
    # Two attempts of at most 2 s each plus one 0.5 s backoff.
    assert elapsed < 8.0, elapsed
    # A timeout is retried (the server may be busy); a reply that is too large
    # or malformed would be the same again, so it is not.
    assert hostile.hits[behaviour] == (2 if behaviour == "drip" else 1)
