"""A BM25 index over one-document-one-chunk corpora: build, save, load, search.

The index is built in one streaming pass (tokens are turned into ids batch by
batch, so the corpus is never held as Python token lists) and saved in the
on-disk layout of `bm25s <https://github.com/xhluca/bm25s>`_ (``data/indices/
indptr.csc.index.npy``, ``vocab.index.json``, ``params.index.json``), so
``bm25s.BM25.load(path)`` reads it too. Scores are precomputed per (term, doc)
with the Lucene BM25 variant, as bm25s does:

``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))``,
``score(t, d) = idf(t) · tf / (tf + k1 · (1 - b + b · |d| / avgdl))``.

Beside them, ``docs.arrow`` (doc_id, text; an uncompressed Arrow IPC file) is
memory-mapped, so many actors on one node share one copy of the texts in the
page cache, and ``meta.json`` records language, parameters and sizes. A
directory is complete only when ``meta.json`` exists: it is written last, and
the directory is renamed into place atomically (:func:`ensure_bm25_index`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import multiprocessing
import os
import shutil
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from cube_ray import schema
from cube_ray.errors import InputError
from cube_ray.retrieval.tokenizer import (
    TOKENIZER_VERSION,
    Language,
    detect_language,
    tokenize,
    tokenize_many,
)

__all__ = [
    "Bm25Index",
    "Hit",
    "build_bm25_index",
    "ensure_bm25_index",
    "iter_documents",
]

_META = "meta.json"
_DOCS = "docs.arrow"
_BATCH = 2048


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved document: its position in the index, id and BM25 score."""

    index: int
    doc_id: str
    score: float


def _parquet_files(documents_path: str | Path) -> list[Path]:
    p = Path(documents_path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        msg = "documents not found; expected a Parquet file or directory"
        raise InputError(msg, path=str(p))
    files = sorted(f for f in p.rglob("*.parquet") if not f.name.startswith((".", "_")))
    if not files:
        msg = "documents directory holds no .parquet files"
        raise InputError(msg, path=str(p))
    return files


def iter_documents(
    documents_path: str | Path, *, columns: Sequence[str], batch_size: int = _BATCH
) -> Iterator[pa.RecordBatch]:
    """Stream record batches of the documents table in a stable order.

    Files are read in sorted path order, so every actor sees the same order.
    """
    for f in _parquet_files(documents_path):
        pf = pq.ParquetFile(f)
        names = pf.schema_arrow.names
        missing = [c for c in columns if c not in names]
        if missing:
            msg = (
                f"documents file lacks column(s) {missing}; present: {names}. It "
                "must follow cube_ray.schema.DOCUMENTS_SCHEMA"
            )
            raise InputError(msg, path=str(f), field=missing[0])
        yield from pf.iter_batches(batch_size=batch_size, columns=list(columns))


def documents_fingerprint(documents_path: str | Path) -> str:
    """A hash of (doc_id, content_hash) of every document, in reading order."""
    h = hashlib.blake2b(digest_size=16)
    for batch in iter_documents(
        documents_path, columns=[schema.DOC_ID, schema.CONTENT_HASH], batch_size=65536
    ):
        for col in (schema.DOC_ID, schema.CONTENT_HASH):
            arr = batch.column(col)
            for buf in arr.buffers():
                if buf is not None:
                    h.update(memoryview(buf))
            h.update(b"\x00")
    return h.hexdigest()


def _tokenized(
    batches: Iterable[tuple[Sequence[str], Sequence[str]]],
    *,
    language: Language,
    workers: int,
) -> Iterator[tuple[Sequence[str], Sequence[str], list[list[str]]]]:
    """Batches with their tokens, in order; tokenised in worker processes if > 1.

    Tokenisation is CPU-bound and holds the GIL, so processes, not threads.
    At most ``2 * workers`` batches are in flight, which bounds memory.
    """
    if workers <= 1:
        for ids, texts in batches:
            yield ids, texts, tokenize_many(texts, language=language)
        return
    # spawn, not fork: the caller may be a threaded Ray actor.
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        pending: deque[tuple[Sequence[str], Sequence[str], Future[list[list[str]]]]] = (
            deque()
        )
        for ids, texts in batches:
            fut = pool.submit(tokenize_many, list(texts), language=language)
            pending.append((ids, texts, fut))
            if len(pending) >= 2 * workers:
                ids0, texts0, fut0 = pending.popleft()
                yield ids0, texts0, fut0.result()
        while pending:
            ids0, texts0, fut0 = pending.popleft()
            yield ids0, texts0, fut0.result()


def build_bm25_index(
    batches: Iterable[tuple[Sequence[str], Sequence[str]]],
    out_dir: str | Path,
    *,
    language: Language,
    k1: float = 1.5,
    b: float = 0.75,
    workers: int = 1,
) -> dict[str, Any]:
    """Build a BM25 index from ``(doc_ids, texts)`` batches into ``out_dir``.

    Args:
        batches: Documents in index order, a batch at a time.
        out_dir: Directory to create (must not hold an index already).
        language: Tokeniser language (see :mod:`cube_ray.retrieval.tokenizer`).
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
        workers: Tokeniser processes (1: tokenise in this process).

    Returns:
        The metadata written to ``meta.json``.

    Raises:
        InputError: On an empty corpus or a duplicate doc id.
    """
    started = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab: dict[str, int] = {}
    tok_parts: list[npt.NDArray[np.int32]] = []
    doc_parts: list[npt.NDArray[np.int32]] = []
    tf_parts: list[npt.NDArray[np.float32]] = []
    lengths: list[int] = []
    seen_ids: set[str] = set()
    n_docs = 0
    docs_schema = pa.schema(
        [pa.field(schema.DOC_ID, pa.string()), pa.field(schema.TEXT, pa.string())]
    )
    with ipc.new_file(str(out / _DOCS), docs_schema) as writer:
        for doc_ids, texts, tokens in _tokenized(
            batches, language=language, workers=workers
        ):
            batch_tok: list[npt.NDArray[np.int32]] = []
            batch_doc: list[npt.NDArray[np.int32]] = []
            batch_tf: list[npt.NDArray[np.float32]] = []
            for doc_id, doc_tokens in zip(doc_ids, tokens, strict=True):
                if doc_id in seen_ids:
                    msg = f"duplicate doc_id {doc_id!r} in the documents"
                    raise InputError(msg, field=schema.DOC_ID)
                seen_ids.add(doc_id)
                ids = [vocab.setdefault(t, len(vocab)) for t in doc_tokens]
                lengths.append(len(ids))
                if ids:
                    uniq, counts = np.unique(
                        np.asarray(ids, dtype=np.int32), return_counts=True
                    )
                    batch_tok.append(uniq.astype(np.int32))
                    batch_tf.append(counts.astype(np.float32))
                    batch_doc.append(np.full(len(uniq), n_docs, dtype=np.int32))
                n_docs += 1
            if batch_tok:
                tok_parts.append(np.concatenate(batch_tok))
                doc_parts.append(np.concatenate(batch_doc))
                tf_parts.append(np.concatenate(batch_tf))
            writer.write_batch(
                pa.record_batch(
                    [
                        pa.array(list(doc_ids), pa.string()),
                        pa.array(list(texts), pa.string()),
                    ],
                    schema=docs_schema,
                )
            )
    del seen_ids
    if n_docs == 0:
        msg = "the corpus has no documents; nothing to index"
        raise InputError(msg)
    tok = np.concatenate(tok_parts) if tok_parts else np.zeros(0, np.int32)
    del tok_parts
    doc = np.concatenate(doc_parts) if doc_parts else np.zeros(0, np.int32)
    del doc_parts
    tf = np.concatenate(tf_parts) if tf_parts else np.zeros(0, np.float32)
    del tf_parts
    n_vocab = len(vocab)
    dl = np.asarray(lengths, dtype=np.float32)
    avgdl = float(dl.mean()) if dl.size else 0.0
    df = np.bincount(tok, minlength=n_vocab).astype(np.int64)
    idf = np.log1p((n_docs - df + 0.5) / (df + 0.5)).astype(np.float32)
    norm = (k1 * (1.0 - b + b * dl / max(avgdl, 1e-9))).astype(np.float32)
    # Chunked, to keep float temporaries small: peak memory is set by the
    # (term, doc) arrays, about 24 bytes per non-zero at the sort below.
    scores = np.empty(tok.size, dtype=np.float32)
    step = 1 << 22
    for lo in range(0, tok.size, step):
        hi = lo + step
        t = tf[lo:hi]
        scores[lo:hi] = idf[tok[lo:hi]] * t / (t + norm[doc[lo:hi]])
    del tf
    order = np.argsort(tok, kind="stable")
    del tok
    data = scores[order]
    del scores
    indices = doc[order]
    del doc, order
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    np.save(out / "data.csc.index.npy", data)
    np.save(out / "indices.csc.index.npy", indices)
    np.save(out / "indptr.csc.index.npy", indptr)
    with (out / "vocab.index.json").open("w", encoding="utf-8") as fh:
        json.dump(vocab, fh, ensure_ascii=False)
    params = {
        "k1": k1,
        "b": b,
        "delta": 0.5,
        "method": "lucene",
        "idf_method": "lucene",
        "dtype": "float32",
        "int_dtype": "int32",
        "num_docs": n_docs,
        "version": "cube_ray",
        "backend": "numpy",
    }
    (out / "params.index.json").write_text(json.dumps(params, indent=2))
    meta = {
        "language": language,
        "tokenizer_version": TOKENIZER_VERSION,
        "k1": k1,
        "b": b,
        "num_docs": n_docs,
        "num_terms": n_vocab,
        "nnz": int(data.size),
        "avgdl": avgdl,
        "build_seconds": round(time.perf_counter() - started, 3),
    }
    (out / _META).write_text(json.dumps(meta, indent=2))
    return meta


class Bm25Index:
    """A saved BM25 index, memory-mapped; thread-safe for concurrent searches.

    Args:
        path: A directory written by :func:`build_bm25_index`.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        meta_path = self.path / _META
        if not meta_path.is_file():
            msg = "not a complete BM25 index (meta.json missing); rebuild it"
            raise InputError(msg, path=str(self.path))
        self.meta: dict[str, Any] = json.loads(meta_path.read_text())
        self.language: Language = self.meta["language"]
        self._data = np.load(self.path / "data.csc.index.npy", mmap_mode="r")
        self._indices = np.load(self.path / "indices.csc.index.npy", mmap_mode="r")
        self._indptr = np.load(self.path / "indptr.csc.index.npy", mmap_mode="r")
        with (self.path / "vocab.index.json").open(encoding="utf-8") as fh:
            self._vocab: dict[str, int] = json.load(fh)
        self._docs = ipc.open_file(pa.memory_map(str(self.path / _DOCS))).read_all()
        self.num_docs = int(self.meta["num_docs"])
        # First index position of each record batch of docs.arrow: a lookup
        # takes from the batches that hold the rows. ``ChunkedArray.take``
        # concatenates every batch first, copying the whole memory-mapped
        # column per call (95 ms per call at 200,000 documents).
        sizes = [len(c) for c in self._docs.column(schema.DOC_ID).chunks]
        self._starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])

    def __len__(self) -> int:
        return self.num_docs

    def scores(self, query: str) -> npt.NDArray[np.float32]:
        """BM25 score of every document for one query (0 where no term matches)."""
        out = np.zeros(self.num_docs, dtype=np.float32)
        first = True
        for term in tokenize(query, language=self.language):
            t = self._vocab.get(term)
            if t is None:
                continue
            lo, hi = int(self._indptr[t]), int(self._indptr[t + 1])
            # Within one term's slice doc indices are unique: plain fancy add
            # works; the first term's is a store (0 + x is x, without the read).
            if first:
                out[self._indices[lo:hi]] = self._data[lo:hi]
                first = False
            else:
                out[self._indices[lo:hi]] += self._data[lo:hi]
        return out

    def search(self, query: str, *, k: int) -> list[Hit]:
        """The top ``k`` documents with a positive score, best first.

        Equal scores are ordered by doc id, so results do not depend on the
        order the documents were indexed in. Documents that share no term with
        the query are never returned.
        """
        scores = self.scores(query)
        cand = np.flatnonzero(scores > 0)
        if cand.size > k:
            values = scores[cand]
            kth = np.partition(values, values.size - k)[values.size - k]
            # Keep every tie of the k-th score, then break ties by doc id.
            cand = cand[values >= kth]
        ids = self._take(schema.DOC_ID, cand)
        ranked = sorted(
            zip(cand.tolist(), ids, strict=True),
            key=lambda pair: (-float(scores[pair[0]]), pair[1]),
        )[:k]
        return [Hit(i, str(d), float(scores[i])) for i, d in ranked]

    def texts(self, indices: Sequence[int]) -> list[str]:
        """Texts of documents by index position."""
        if not indices:
            return []
        return [t or "" for t in self._take(schema.TEXT, list(indices))]

    def _take(self, column: str, positions: npt.ArrayLike) -> list[Any]:
        """Values of ``column`` at index ``positions``, in their order.

        Reads each value from the record batch that holds it (about 1 µs a
        value), so only those rows are touched in the memory map.
        """
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (pos.min() < 0 or pos.max() >= self.num_docs):
            msg = f"document positions must lie in [0, {self.num_docs})"
            raise IndexError(msg)
        chunks = self._docs.column(column).chunks
        chunk_of = np.searchsorted(self._starts, pos, side="right") - 1
        local = pos - self._starts[chunk_of]
        return [
            chunks[c][i].as_py()
            for c, i in zip(chunk_of.tolist(), local.tolist(), strict=True)
        ]

    def doc_ids(self) -> list[str]:
        """Every doc id in index order."""
        return [str(d) for d in self._docs.column(schema.DOC_ID).to_pylist()]


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def remove_stale_builds(root: Path, *, kind: str, key: str) -> list[Path]:
    """Remove the temporary dirs that killed index builds left in ``root``.

    A build writes ``.tmp-<kind>-<key>-<pid>`` and renames it when done; a
    build killed first (SIGKILL, a lost node) leaves it behind. The caller
    holds the lock of ``key``, so that key's temporary dirs are all stale; one
    of another key is stale when its lock is free (no build of that key runs).

    Returns:
        The removed directories.
    """
    removed: list[Path] = []
    prefix = f".tmp-{kind}-"
    for tmp in sorted(root.glob(f"{prefix}*")):
        other = tmp.name[len(prefix) :].rsplit("-", 1)[0]
        if other != key:
            with (root / f".{kind}-{other}.lock").open("a") as fh:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # a build of that key is running
                    continue
                try:
                    shutil.rmtree(tmp, ignore_errors=True)
                finally:
                    fcntl.flock(fh, fcntl.LOCK_UN)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        removed.append(tmp)
    return removed


def ensure_bm25_index(
    documents_path: str | Path,
    *,
    index_root: str | Path,
    language: Language | None = None,
    k1: float = 1.5,
    b: float = 0.75,
    workers: int = 1,
) -> Path:
    """The directory of the BM25 index of a documents table, built if needed.

    The index lives in ``index_root/bm25-<key>`` where the key hashes the
    documents (ids and content hashes, in order), the language, k1, b and the
    tokeniser version: an unchanged corpus reuses its index across runs and
    actors; a changed one gets a new index. Concurrent callers (actors starting
    together) serialise on a lock file: one builds, the others wait and load.

    Args:
        documents_path: Parquet file or directory following DOCUMENTS_SCHEMA.
        index_root: Directory holding indexes.
        language: Tokeniser language; None detects it from the first documents.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
        workers: Tokeniser processes for a build.
    """
    root = Path(index_root)
    fingerprint = documents_fingerprint(documents_path)
    key_src = json.dumps([fingerprint, language, k1, b, TOKENIZER_VERSION])
    key = hashlib.blake2b(key_src.encode(), digest_size=8).hexdigest()
    final = root / f"bm25-{key}"
    if (final / _META).is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / f".bm25-{key}.lock"):
        if (final / _META).is_file():
            return final
        if language is None:
            sample: list[str] = []
            for batch in iter_documents(documents_path, columns=[schema.TEXT]):
                sample.extend(str(t) for t in batch.column(0).to_pylist()[:200])
                break
            language = detect_language(sample)
        remove_stale_builds(root, kind="bm25", key=key)
        tmp = root / f".tmp-bm25-{key}-{os.getpid()}"

        def batches() -> Iterator[tuple[list[str], list[str]]]:
            for batch in iter_documents(
                documents_path, columns=[schema.DOC_ID, schema.TEXT]
            ):
                yield (
                    [str(x) for x in batch.column(0).to_pylist()],
                    [x or "" for x in batch.column(1).to_pylist()],
                )

        try:
            build_bm25_index(
                batches(), tmp, language=language, k1=k1, b=b, workers=workers
            )
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final
