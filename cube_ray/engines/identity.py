"""Engine identity: which engine settings change outputs, defined once."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from cube_ray.engines.config import ACCOUNTING_FIELDS, TRANSPORT_FIELDS

__all__ = ["engine_fingerprint"]


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
    text = json.dumps(data, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
