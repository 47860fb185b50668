"""The seeded hashes of CUBE_METHOD.md section 11, with no dependency.

:mod:`cube_ray.sample` builds the planned sample from them; the judge
qualification (:mod:`cube_ray.qualification`) orders its questions by
:func:`doc_hash` inside Ray workers, where Polars is not loaded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["MISSING", "doc_hash", "stratum_key", "unit_offset"]

MISSING = "(missing)"
"""The stratum value of a record whose field is missing or empty."""
_SEP = " / "
"""Joins the values of several strata fields into one stratum key."""


def stratum_key(values: Sequence[str | None]) -> str:
    """The stratum of a record: its strata fields' values, ``" / "``-joined.

    A missing or empty value is ``(missing)``; no strata fields is one stratum.

    >>> stratum_key(["广州市"]), stratum_key(["A", None]), stratum_key([])
    ('广州市', 'A / (missing)', 'all')
    """
    if not values:
        return "all"
    return _SEP.join(v if v else MISSING for v in values)


def doc_hash(seed: int, doc_id: str) -> str:
    """The hex ``sha256(f"{seed}:{doc_id}")`` that orders a stratum.

    >>> doc_hash(7, "d1")[:12]
    '5c9a13801bde'
    """
    return hashlib.sha256(f"{seed}:{doc_id}".encode()).hexdigest()


def unit_offset(seed: int, stratum: str) -> float:
    """``u_h`` in [0, 1): the first 8 bytes of ``sha256(f"{seed}:{h}")`` / 2^64.

    >>> u = unit_offset(7, "广州市")
    >>> 0.0 <= u < 1.0, u == unit_offset(7, "广州市") != unit_offset(8, "广州市")
    (True, True)
    """
    digest = hashlib.sha256(f"{seed}:{stratum}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64
