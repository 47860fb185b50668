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
changes its outputs. Hence three functions:

- :func:`engine_identity`: the engine that is built. Judges whose identity is
  the generator's share its engine (``cube-ray judges check``);
- :func:`engine_id`: the name of the run's engine pool (the engine and the
  pool's sizes), the key of ``pipeline.engine_pool``, the preflight's CPU count,
  the sizing's speeds and the run statement's start-ups;
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
    "PER_REQUEST_POOL",
    "engine_fingerprint",
    "engine_id",
    "engine_identity",
    "identity_fields",
]

PER_REQUEST_FIELDS = frozenset(
    {"sampling", "score_mode", "protocol", "checklist_baseline"}
)
"""Engine config fields that go with each request, not with the engine."""
PER_REQUEST_POOL = frozenset({"batch_size"})
"""Pool fields that size requests, not the pool."""


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


def engine_id(config: Any) -> str:
    """Name of an engine pool: its model and a hash of its load settings.

    The engine's identity (:func:`cube_ray.engines.identity.identity_fields`)
    and the pool's sizes: configs that differ only in ``sampling``,
    ``score_mode``, ``price_per_mtok`` or ``pool.batch_size`` name one pool.

    >>> from cube_ray.engines.config import FakeEngineConfig
    >>> a = FakeEngineConfig(name="m", score_mode="argmax")
    >>> b = FakeEngineConfig(name="m", score_mode="expected")
    >>> engine_id(a) == engine_id(b), engine_id(a) == engine_id(FakeEngineConfig(name="n"))
    (True, False)
    >>> engine_id(a).split("-")[0]
    'fake:m'
    """  # noqa: E501
    data = identity_fields(config)
    pool = config.model_dump(mode="json", include={"pool"}).get("pool") or {}
    data["pool"] = {k: v for k, v in pool.items() if k not in PER_REQUEST_POOL}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    model = (
        getattr(config, "served_name", None)
        or getattr(config, "model", None)
        or getattr(config, "name", None)
        or config.backend
    )
    short = str(model).rstrip("/").rsplit("/", 1)[-1]
    return f"{config.backend}:{short}-{digest[:8]}"
