"""The planned sample of a large knowledge base (CUBE_METHOD.md section 11).

Every document of the population gets a key; the sample of size n is the n
documents with the smallest keys. Within stratum h (N_h documents) the
documents are ordered by ``sha256(f"{seed}:{doc_id}")`` and the one at 0-based
position i gets the key ``(i + u_h) / N_h``, with ``u_h`` in [0, 1) taken from
``sha256(f"{seed}:{h}")``. So each stratum gets its proportional share (a
systematic sample of every stratum with a random start), the sample is
self-weighting, and samples are nested: the sample of size n' > n contains the
sample of size n.

The math is pure (:func:`sample_order`, :func:`sample_block`); the run dir's
``sample/`` folder (:func:`write_sample`, :func:`read_sample`,
:func:`load_strata`) holds the order of the whole population
(``doc_id, stratum, key, order``; ``order < size`` is the sample) and
``sample.json`` (seed, fields, size and the summary's ``sample`` block).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from cube_ray.seeded import MISSING, doc_hash, stratum_key, unit_offset

__all__ = [
    "MISSING",
    "ORDER",
    "SAMPLE_DIR",
    "STRATUM",
    "SampleState",
    "describe_sample",
    "doc_hash",
    "in_run_sample",
    "load_strata",
    "read_sample",
    "sample_block",
    "sample_order",
    "sampled_ids",
    "stratum_key",
    "unit_offset",
    "write_sample",
]

SAMPLE_DIR = "sample"
"""The run dir's folder of the sample (``sample.parquet``, ``sample.json``)."""
STRATUM = "stratum"
KEY = "key"
ORDER = "order"
"""0-based position of a document in the sample order: ``order < n`` is the
sample of size n."""
_HASH = "_hash"
_TABLE = "sample.parquet"
_META = "sample.json"


def sample_order(
    doc_ids: Sequence[str] | pl.Series,
    strata: Sequence[str] | pl.Series,
    *,
    seed: int,
) -> pl.DataFrame:
    """The key and sample order of every document of a population.

    Args:
        doc_ids: The population's document ids (unique).
        strata: Each document's stratum (:func:`stratum_key`).
        seed: The sample's seed.

    Returns:
        ``doc_id, stratum, key, order``, sorted by ``order``: the sample of
        size n is the first n rows (ties of the key broken by the hash).

    >>> out = sample_order(["a", "b", "c", "d"], ["x", "x", "y", "y"], seed=1)
    >>> out.columns, out.height, out["order"].to_list()
    (['doc_id', 'stratum', 'key', 'order'], 4, [0, 1, 2, 3])
    >>> sorted(out.head(2)["stratum"].to_list())  # one per stratum
    ['x', 'y']
    """
    ids = pl.Series("doc_id", list(doc_ids), dtype=pl.String)
    frame = pl.DataFrame(
        {
            "doc_id": ids,
            STRATUM: pl.Series(STRATUM, list(strata), dtype=pl.String),
            _HASH: [doc_hash(seed, d) for d in ids.to_list()],
        }
    )
    offsets = pl.DataFrame(
        {STRATUM: frame[STRATUM].unique().to_list()}, schema={STRATUM: pl.String}
    ).with_columns(
        pl.col(STRATUM)
        .map_elements(lambda h: unit_offset(seed, h), return_dtype=pl.Float64)
        .alias("_u")
    )
    position = pl.col(_HASH).rank("ordinal").over(STRATUM).cast(pl.Float64) - 1.0
    size = pl.len().over(STRATUM).cast(pl.Float64)
    return (
        frame.join(offsets, on=STRATUM, how="left")
        .with_columns(((position + pl.col("_u")) / size).alias(KEY))
        .sort([KEY, _HASH])
        .with_row_index(ORDER)
        .select("doc_id", STRATUM, KEY, pl.col(ORDER).cast(pl.Int64))
    )


def sample_block(
    order: pl.DataFrame, *, size: int, seed: int, fields: Sequence[str]
) -> dict[str, Any]:
    """The summary's ``sample`` block: size, population and each stratum's share.

    ``size`` larger than the population takes the whole population.

    >>> o = sample_order(["a", "b", "c", "d"], ["x", "x", "x", "y"], seed=1)
    >>> b = sample_block(o, size=2, seed=1, fields=["area"])
    >>> b["size"], b["population"], b["fields"], sorted(b["strata"])
    (2, 4, ['area'], ['x', 'y'])
    >>> sum(s["size"] for s in b["strata"].values())
    2
    """
    n = min(size, order.height)
    counts = (
        order.group_by(STRATUM)
        .agg(
            pl.len().alias("population"),
            (pl.col(ORDER) < n).sum().alias("size"),
        )
        .sort(STRATUM)
    )
    return {
        "size": n,
        "population": order.height,
        "seed": seed,
        "fields": list(fields),
        "strata": {
            row[STRATUM]: {"population": row["population"], "size": row["size"]}
            for row in counts.iter_rows(named=True)
        },
    }


@dataclass(frozen=True)
class SampleState:
    """What ``RUN_DIR/sample/sample.json`` records beside the order table."""

    size: int
    """Documents in the sample the run dir was last run with."""
    seed: int
    fields: tuple[str, ...]
    population_fp: str
    """Fingerprint of the population (corpus, and a question file's gold
    documents) the order was computed from."""
    block: dict[str, Any]
    """The summary's ``sample`` block (:func:`sample_block`)."""


def write_sample(folder: Path, order: pl.DataFrame, state: SampleState) -> None:
    """Write the order table and ``sample.json`` into a (new) folder."""
    folder.mkdir(parents=True, exist_ok=True)
    order.write_parquet(folder / _TABLE)
    meta = {
        "size": state.size,
        "seed": state.seed,
        "fields": list(state.fields),
        "population_fingerprint": state.population_fp,
        "sample": state.block,
    }
    text = json.dumps(meta, ensure_ascii=False, indent=2)
    (folder / _META).write_text(text + "\n", encoding="utf-8")


def read_sample(run_dir: Path) -> SampleState | None:
    """``RUN_DIR/sample/sample.json``, or None for a run without a sample."""
    path = Path(run_dir) / SAMPLE_DIR / _META
    if not path.is_file():
        return None
    meta: Mapping[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return SampleState(
        size=int(meta["size"]),
        seed=int(meta["seed"]),
        fields=tuple(meta["fields"]),
        population_fp=str(meta["population_fingerprint"]),
        block=dict(meta["sample"]),
    )


def sampled_ids(run_dir: Path) -> pl.DataFrame | None:
    """``doc_id, stratum`` of the documents in the run dir's current sample."""
    state = read_sample(run_dir)
    if state is None:
        return None
    return (
        pl.scan_parquet(Path(run_dir) / SAMPLE_DIR / _TABLE)
        .filter(pl.col(ORDER) < state.size)
        .select("doc_id", STRATUM)
        .collect()
    )


def load_strata(run_dir: str | Path) -> pl.DataFrame | None:
    """``question_id, stratum`` of the questions in the run's current sample.

    None for a run without ``sample:``. The stratified bootstrap
    (CUBE_METHOD.md section 11) resamples within these strata, and the summary
    leaves out questions not in the sample (a run shrunk with ``--shrink``).
    """
    root = Path(run_dir)
    docs = sampled_ids(root)
    if docs is None:
        return None
    files = sorted((root / "questions").glob("part-*.parquet"))  # not .tmp-*
    if not files:
        return pl.DataFrame(schema={"question_id": pl.String, STRATUM: pl.String})
    questions = (
        pl.scan_parquet(files)
        .select("question_id", "doc_id")
        .unique("question_id", keep="first")
        .collect()
    )
    return questions.join(docs, on="doc_id", how="inner").select("question_id", STRATUM)


def in_run_sample(
    run_dir: str | Path, answers: pl.DataFrame, scores: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any] | None]:
    """A run's answers and scores of the current sample, and its ``sample`` block.

    Rows of questions outside the sample (left by a larger sample before a
    ``--shrink``) are left out, not deleted. Without ``sample:`` the tables
    come back as they are, with None.
    """
    state = read_sample(Path(run_dir))
    strata = load_strata(run_dir)
    if state is None or strata is None:
        return answers, scores, None
    ids = strata.select(pl.col("question_id").cast(pl.String))

    def keep(frame: pl.DataFrame) -> pl.DataFrame:
        qid = frame.get_column("question_id")
        if qid.dtype == pl.String:
            return frame.join(ids, on="question_id", how="semi")
        return frame.filter(qid.cast(pl.String).is_in(ids["question_id"].implode()))

    return keep(answers), keep(scores), state.block


def describe_sample(block: Mapping[str, Any] | None) -> str | None:
    """The sample in words for the console and the report (None: no sample).

    >>> describe_sample({"size": 60, "population": 2262, "fields": ["AREA"],
    ...                  "strata": {"a": {}, "b": {}}})
    '60 of 2,262 documents, stratified by AREA (2 strata)'
    >>> describe_sample({"size": 5, "population": 9, "fields": [], "strata": {}})
    '5 of 9 documents, simple random sample'
    """
    if not isinstance(block, Mapping):
        return None
    size, population = int(block["size"]), int(block["population"])
    fields = list(block.get("fields") or [])
    head = f"{size:,} of {population:,} documents"
    if not fields:
        return f"{head}, simple random sample"
    n_strata = len(block.get("strata") or {})
    return f"{head}, stratified by {', '.join(fields)} ({n_strata} strata)"
