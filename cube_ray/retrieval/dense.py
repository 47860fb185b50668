"""Dense retrieval: document embeddings from an embedding endpoint, cosine top-k.

Embeddings come from an OpenAI-compatible ``/embeddings`` endpoint (``vllm
serve MODEL --task embed``, Ollama, text-embeddings-inference, an API), so no
deep-learning framework is imported here; the model runs wherever it is served.
Vectors are L2-normalised float32, saved as ``vectors.npy`` (memory-mapped at
search time, shared by the actors of a node) in the same document order as the
BM25 index of the same documents, so hit positions index the same texts.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from cube_ray import schema
from cube_ray.errors import EngineError, InputError, MissingDependencyError
from cube_ray.http_reply import (
    MAX_REPLY_BYTES,
    async_client,
    run_sync,
    send_bounded,
)
from cube_ray.retrieval.bm25 import (
    Hit,
    _file_lock,
    documents_fingerprint,
    iter_documents,
    remove_stale_builds,
)

__all__ = [
    "DenseIndex",
    "Embedder",
    "HttpEmbedder",
    "build_dense_index",
    "ensure_dense_index",
]

Embedder = Callable[[Sequence[str]], npt.NDArray[np.float32]]
"""Texts -> one L2-normalised float32 row per text."""

_META = "dense_meta.json"


def _embeddings(body: bytes, n: int) -> tuple[npt.NDArray[np.float32] | None, str]:
    """The ``n`` embedding rows of an OpenAI embeddings reply, or why not.

    >>> _embeddings(b'{"data": [{"index": 0, "embedding": [1, 2]}]}', 1)[0]
    array([[1., 2.]], dtype=float32)
    >>> _embeddings(b'{"data": [{"index": 0, "embedding": [NaN, 2]}]}', 1)[1]
    'non-finite embedding values'
    >>> _embeddings(b'{"data": ', 1)[1][:18]
    'malformed response'
    """
    try:
        data = sorted(json.loads(body)["data"], key=lambda d: d["index"])
        rows = np.asarray([d["embedding"] for d in data], dtype=np.float32)
    except (ValueError, KeyError, TypeError, RecursionError, OverflowError) as exc:
        return None, f"malformed response ({type(exc).__name__}: {str(exc)[:120]})"
    if rows.ndim != 2 or rows.shape[0] != n:
        return None, f"{rows.shape[0] if rows.ndim else 0} embeddings for {n} texts"
    if not np.isfinite(rows).all():
        return None, "non-finite embedding values"
    return rows, ""


def _normalise(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: npt.NDArray[np.float32] = (rows / norms).astype(np.float32)
    return out


class HttpEmbedder:
    """Embed texts through an OpenAI-compatible ``POST {base_url}/embeddings``.

    Args:
        base_url: Endpoint root, e.g. ``http://127.0.0.1:8000/v1``.
        model: Model name sent in requests.
        api_key: Bearer token, if the endpoint needs one.
        batch_size: Texts per request.
        timeout_s: Deadline of one request, reply body included.
        max_retries: Retries on 429/5xx, timeouts and connection errors.
        max_bytes: Largest reply body read; a larger one fails at once.
        transport: An httpx transport instead of the network (tests).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        max_bytes: int = MAX_REPLY_BYTES,
        transport: Any = None,
    ) -> None:
        try:
            # optional: httpx (the http extra), only once a client is built
            import httpx
        except ImportError as exc:
            raise MissingDependencyError(
                "httpx", extra="http", purpose="dense retrieval (embedding endpoint)"
            ) from exc
        self._httpx = httpx
        self.model = model
        self._url = base_url.rstrip("/") + "/embeddings"
        self._batch = batch_size
        self._retries = max_retries
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._transport = transport

    def _post(self, texts: list[str]) -> npt.NDArray[np.float32]:
        return run_sync(lambda: self._post_async(texts))

    async def _post_async(self, texts: list[str]) -> npt.NDArray[np.float32]:
        # Through the shared bounded reader: a server that drips one byte a
        # second meets the whole-request deadline (httpx alone times each
        # read), a huge body is dropped at the byte limit instead of held.
        httpx = self._httpx
        problem = ""
        async with async_client(
            httpx,
            timeout_s=self._timeout_s,
            headers=self._headers,
            transport=self._transport,
        ) as client:
            for attempt in range(self._retries + 1):
                if attempt:
                    await asyncio.sleep(min(0.5 * 2 ** (attempt - 1), 10.0))
                try:
                    resp = await send_bounded(
                        client,
                        "POST",
                        self._url,
                        timeout_s=self._timeout_s,
                        max_bytes=self._max_bytes,
                        json={"model": self.model, "input": texts},
                    )
                except (TimeoutError, asyncio.TimeoutError):
                    problem = f"no complete reply within timeout_s={self._timeout_s}"
                    continue
                except httpx.DecodingError as exc:
                    problem = f"undecodable reply body ({exc})"
                    break
                except httpx.TransportError as exc:
                    problem = type(exc).__name__
                    continue
                if resp.too_large:
                    problem = (
                        f"reply too large (over {self._max_bytes} bytes, "
                        f"{resp.size} read)"
                    )
                    break
                if resp.status_code == 429 or resp.status_code >= 500:
                    problem = f"HTTP {resp.status_code}"
                    continue
                if resp.status_code >= 400:
                    problem = f"HTTP {resp.status_code}: {resp.text[:200]}"
                    break
                rows, problem = _embeddings(resp.body, len(texts))
                if rows is not None:
                    return _normalise(rows)
                break
        msg = (
            f"embedding endpoint {self._url} (model {self.model!r}) failed: "
            f"{problem}; check that it serves embeddings and is reachable"
        )
        raise EngineError(msg)

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One normalised embedding row per text."""
        parts = [
            self._post([t or " " for t in texts[i : i + self._batch]])
            for i in range(0, len(texts), self._batch)
        ]
        if not parts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.concatenate(parts)

    def close(self) -> None:
        """Nothing to close: each batch opens and closes its own client."""


def build_dense_index(
    batches: Iterable[tuple[Sequence[str], Sequence[str]]],
    out_dir: str | Path,
    *,
    embed: Embedder,
    model: str,
) -> dict[str, Any]:
    """Embed ``(doc_ids, texts)`` batches into ``out_dir/vectors.npy``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rows: list[npt.NDArray[np.float32]] = []
    ids: list[str] = []
    for doc_ids, texts in batches:
        rows.append(embed(list(texts)))
        ids.extend(doc_ids)
    if not ids:
        msg = "the corpus has no documents; nothing to embed"
        raise InputError(msg)
    vectors = np.concatenate(rows)
    np.save(out / "vectors.npy", vectors)
    (out / "doc_ids.json").write_text(json.dumps(ids, ensure_ascii=False))
    meta = {
        "model": model,
        "num_docs": len(ids),
        "dim": int(vectors.shape[1]),
        "build_seconds": round(time.perf_counter() - started, 3),
    }
    (out / _META).write_text(json.dumps(meta, indent=2))
    return meta


class DenseIndex:
    """A saved dense index, memory-mapped; cosine similarity top-k.

    Args:
        path: A directory written by :func:`build_dense_index`.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not (self.path / _META).is_file():
            msg = "not a complete dense index (dense_meta.json missing); rebuild it"
            raise InputError(msg, path=str(self.path))
        self.meta: dict[str, Any] = json.loads((self.path / _META).read_text())
        self._vectors = np.load(self.path / "vectors.npy", mmap_mode="r")
        self._ids: list[str] = json.loads((self.path / "doc_ids.json").read_text())

    def __len__(self) -> int:
        return len(self._ids)

    def search(self, query: npt.NDArray[np.float32], *, k: int) -> list[Hit]:
        """The ``k`` most similar documents to one normalised query vector.

        Equal similarities are ordered by doc id.
        """
        sims = np.asarray(self._vectors @ query, dtype=np.float32)
        if sims.size > k:
            part = np.argpartition(-sims, k - 1)[:k]
            cand = np.flatnonzero(sims >= sims[part].min())
        else:
            cand = np.arange(sims.size)
        ranked = sorted(cand.tolist(), key=lambda i: (-float(sims[i]), self._ids[i]))
        return [Hit(i, self._ids[i], float(sims[i])) for i in ranked[:k]]


def ensure_dense_index(
    documents_path: str | Path,
    *,
    index_root: str | Path,
    embed: Embedder,
    model: str,
) -> Path:
    """The directory of the dense index of a documents table, built if needed.

    Keyed by the documents (ids and content hashes, in order) and the model name;
    concurrent callers serialise on a lock file, as for the BM25 index.
    """
    root = Path(index_root)
    fingerprint = documents_fingerprint(documents_path)
    key = hashlib.blake2b(
        json.dumps([fingerprint, model]).encode(), digest_size=8
    ).hexdigest()
    final = root / f"dense-{key}"
    if (final / _META).is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / f".dense-{key}.lock"):
        if (final / _META).is_file():
            return final
        remove_stale_builds(root, kind="dense", key=key)
        tmp = root / f".tmp-dense-{key}-{os.getpid()}"
        batches = (
            (
                [str(x) for x in b.column(0).to_pylist()],
                [x or "" for x in b.column(1).to_pylist()],
            )
            for b in iter_documents(
                documents_path, columns=[schema.DOC_ID, schema.TEXT], batch_size=256
            )
        )
        try:
            build_dense_index(batches, tmp, embed=embed, model=model)
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final
