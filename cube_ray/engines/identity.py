"""Engine identity: which engine settings change what, defined once.

An engine config's fields fall in four groups:

- per request (:data:`PER_REQUEST_FIELDS`: ``sampling``, ``score_mode``, the
  judging ``protocol`` and its ``checklist_baseline``): sent
  with each request; they change outputs, not the engine that is loaded;
- ``pool`` (sizes, batch size): how many copies run and how rows are batched;
  neither outputs nor the engine;
- transport (``TRANSPORT_FIELDS``: an HTTP engine's timeout, retries,
  concurrency): how the client reaches its server; not outputs;
- accounting (``ACCOUNTING_FIELDS``: the price): nothing at all;

and everything else (backend, model, load settings) builds the engine and
changes its outputs. Hence two functions:

- :func:`engine_identity`: the engine that is built. Judges whose identity is
  the generator's share its engine (``cube-ray judges check``), and the run's
  engine pools are keyed by it (``pipeline.engine_pool.engine_id``, which adds
  the pool's sizes);
- :func:`engine_fingerprint`: the outputs. Rows written by an engine of
  another fingerprint are redone on resume.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from cube_ray.engines.config import ACCOUNTING_FIELDS, TRANSPORT_FIELDS

__all__ = [
    "PER_REQUEST_FIELDS",
    "engine_fingerprint",
    "engine_identity",
    "identity_fields",
]

PER_REQUEST_FIELDS = frozenset(
    {"sampling", "score_mode", "protocol", "checklist_baseline"}
)
"""Engine config fields that go with each request, not with the engine."""


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def identity_fields(config: Any) -> dict[str, Any]:
    """The fields of an engine config that build the engine (JSON values).

    All but the per-request, pool and accounting fields.
    """
    skip = {"pool", *PER_REQUEST_FIELDS, *ACCOUNTING_FIELDS}
    fields: dict[str, Any] = config.model_dump(mode="json", exclude=skip)
    return fields


def engine_identity(config: Any) -> str:
    """Hash of the engine a config builds (:func:`identity_fields`).

    >>> from cube_ray.engines import EmbeddedEngineConfig as E
    >>> engine_identity(E(score_mode="expected")) == engine_identity(E())
    True
    >>> engine_identity(E(max_model_len=2048)) == engine_identity(E())
    False
    """
    return _digest(identity_fields(config))[:16]


def engine_fingerprint(config: Any) -> str:
    """Hash of an engine config without its pool and transport settings.

    Pool sizes, batch sizes and an HTTP engine's timeout, retries and
    concurrency change throughput, not outputs, so they do not invalidate
    rows on resume: raising ``timeout_s`` and rerunning with
    ``--retry-failed`` redoes only the failed rows.
    """
    present = TRANSPORT_FIELDS & set(type(config).model_fields)
    data = config.model_dump(
        mode="json", exclude={"pool", *present, *ACCOUNTING_FIELDS}
    )
    return _digest(data)[:16]
