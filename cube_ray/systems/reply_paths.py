"""Where a RAG service's JSON reply keeps its answer and its retrieved ids.

``cube-ray check`` asks each HTTP system a question; when ``answer_path`` or
``retrieved_path`` reads nothing useful, these functions search the reply for
the paths that would, written in the path language of
:func:`cube_ray.systems.http.resolve_path`:

* :func:`id_path`: the path whose values (mapped over lists with ``[]``) hold
  the most corpus ids, e.g. ``result.retriever.documents[].meta.doc_id``;
* :func:`longest_text_path`: the path of the longest text under an object or
  a list, e.g. ``result.llm.replies[0]._content[0].text``.

Pure functions of parsed JSON, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator
from typing import Any

__all__ = ["SHORT_ANSWER", "id_path", "longest_text_path", "top_keys"]

SHORT_ANSWER = 40
"""Characters up to which an answer is short: the same short text for two
different questions is more likely a role or a status than an answer."""

_NAME = re.compile(r"[^.\[\]]+")
_MAX_DEPTH = 32
"""Deepest level searched (a reply nested deeper is no RAG reply)."""


def _step(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _leaves(
    obj: Any, prefix: str, index: Callable[[int], str], depth: int = 0
) -> Iterator[tuple[str, Any]]:
    """``(path, value)`` of every scalar; list items named by ``index(i)``."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            if isinstance(key, str) and _NAME.fullmatch(key):
                yield from _leaves(value, _step(prefix, key), index, depth + 1)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _leaves(value, f"{prefix}{index(i)}", index, depth + 1)
    else:
        yield prefix, obj


def id_path(reply: Any, corpus_ids: Collection[str]) -> str | None:
    """The path whose values hold the most corpus ids; None when none does.

    Every list is mapped over (``[]``), so the path reads the ids of every
    retrieved item; on a tie the shorter path wins.

    >>> reply = {"result": {"retriever": {"documents": [
    ...     {"id": "9f2c", "meta": {"doc_id": "D1"}},
    ...     {"id": "77ab", "meta": {"doc_id": "D3"}}]}}}
    >>> id_path(reply, {"D1", "D2", "D3"})
    'result.retriever.documents[].meta.doc_id'
    >>> id_path(reply, {"X"}) is None
    True
    """
    counts: dict[str, int] = {}
    for path, value in _leaves(reply, "", lambda _: "[]"):
        known = value is not None and not isinstance(value, bool)
        if path and known and str(value).strip() in corpus_ids:
            counts[path] = counts.get(path, 0) + 1
    if not counts:
        return None
    return min(counts, key=lambda p: (-counts[p], len(p), p))


def _prose(text: str) -> bool:
    """Whether a string may be an answer: a space or a non-ASCII character.

    A hash, an id or a model name holds neither.

    >>> _prose("Bring your ID."), _prose("请携带身份证"), _prose("5e0a4b0f7d2c41a1")
    (True, True, False)
    """
    return any(c.isspace() or not c.isascii() for c in text)


def longest_text_path(value: Any, base: str = "") -> str | None:
    """The path (under ``base``) of the longest text in ``value``; None: no text.

    Texts are strings with a space or a non-ASCII character (:func:`_prose`):
    a long hash or id is no answer.

    >>> reply = {"_role": "assistant", "_content": [{"text": "Bring your ID."}],
    ...          "_meta": {"model": "gpt-4o-mini"}}
    >>> longest_text_path(reply, "result.llm.replies[0]")
    'result.llm.replies[0]._content[0].text'
    >>> longest_text_path(["a b", "c d e"], "answers"), longest_text_path({}, "x")
    ('answers[1]', None)
    """
    best: tuple[int, str] | None = None
    for path, leaf in _leaves(value, base, lambda i: f"[{i}]"):
        text = isinstance(leaf, str) and _prose(leaf.strip()) and bool(path)
        if text and (best is None or len(leaf) > best[0]):
            best = (len(leaf), path)
    return None if best is None else best[1]


def top_keys(reply: Any) -> str:
    """The reply's top-level keys in words (what a path starts from).

    >>> top_keys({"result": {}, "usage": 1}), top_keys([1, 2])
    ("['result', 'usage']", 'none (the reply is a list of 2)')
    """
    if isinstance(reply, dict):
        return str(list(reply)[:20])
    if isinstance(reply, list):
        return f"none (the reply is a list of {len(reply)})"
    return f"none (the reply is a {type(reply).__name__})"
