"""The planned sample of a large knowledge base (CUBE_METHOD.md section 11).

The population's documents are put in one order; the sample of size n is
its first n documents. The order is made in two steps:

- which stratum each position goes to: :func:`allocation_sequence`, a quota
  sequence (each next position goes to the stratum whose quota
  ``n * N_h / N`` falls due first), so that at *every* n each stratum holds
  within ``1 - 1 / (2H - 2)`` of ``n * N_h / N`` documents (floor or ceil);
- which document of the stratum: its documents in the order of
  ``sha256(f"{seed}:{doc_id}")`` (:func:`doc_hash`).

So the sample is self-weighting at every size, and samples are nested: the
sample of size n' > n contains the sample of size n. This replaces section
11's key rule ``(i + u_h) / N_h`` (rule ``"key"``), which is within +-1 of
proportional only up to two strata (docs/pipeline.md, "The order").

The math is pure (:func:`allocation_sequence`, :func:`sample_order`,
:func:`sample_block`); the run dir's ``sample/`` folder
(:func:`write_sample`, :func:`read_sample`, :func:`load_strata`) holds the
order of the whole population (``doc_id, stratum, order``; ``order < size``
is the sample) and ``sample.json`` (rule, seed, fields, size and the
summary's ``sample`` block).
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from cube_ray.files import write_atomic
from cube_ray.seeded import MISSING, doc_hash, stratum_key, unit_offset

__all__ = [
    "MISSING",
    "ORDER",
    "RULE",
    "SAMPLE_DIR",
    "STRATUM",
    "SampleState",
    "allocation_sequence",
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
RULE = "quota"
"""The order's rule in ``sample.json``. A run dir sampled before it has no
``rule`` there: section 11's key rule, read as ``"key"``."""
OLD_RULE = "key"
ORDER = "order"
"""0-based position of a document in the sample order: ``order < n`` is the
sample of size n."""
_HASH = "_hash"
_TABLE = "sample.parquet"
_META = "sample.json"


def allocation_sequence(populations: Mapping[str, int], *, seed: int) -> list[str]:
    """The stratum of each position of the sample order (a quota sequence).

    With H strata and ``delta = 1 - 1 / (2H - 2)`` (0 for one stratum), a
    stratum's k-th document is *released* at the first position n where
    taking it keeps ``k <= n * N_h / N + delta``, and is *due* at the first
    n where ``n * N_h / N - delta`` would exceed ``k - 1``. Position n goes to
    the released stratum due first (earliest deadline first); ties go to the
    smaller ``unit_offset(seed, h)``, then the name. Tijdeman (1980, "The
    chairman assignment problem") proves a sequence within ``delta`` exists,
    and earliest-deadline-first on unit jobs with release times and deadlines
    finds one whenever one exists. So at every n each stratum's count is
    within ``delta < 1`` of ``n * N_h / N`` (``floor`` or ``ceil`` of it;
    nearest rounding, within 0.5, with two strata), whatever the number of
    strata. Integer arithmetic only; O(N log H).

    Args:
        populations: Stratum -> its number of documents N_h (> 0).
        seed: The sample's seed (breaks ties between strata).

    Returns:
        N stratum names; the first n are the strata of the sample of size n.

    >>> sizes = {"a": 6, "b": 3, "c": 1}
    >>> seq = allocation_sequence(sizes, seed=0)
    >>> len(seq), seq.count("a"), seq.count("b"), seq.count("c")
    (10, 6, 3, 1)
    >>> max(  # delta = 1 - 1/4 with three strata
    ...     abs(seq[:n].count(h) - n * size / 10)
    ...     for n in range(1, 11)
    ...     for h, size in sizes.items()
    ... ) <= 0.75
    True
    >>> allocation_sequence({"x": 2, "y": 2}, seed=3) in (
    ...     ["x", "y", "x", "y"], ["y", "x", "y", "x"])
    True
    """
    sizes = {h: int(n_h) for h, n_h in populations.items() if n_h > 0}
    total = sum(sizes.values())
    n_strata = len(sizes)
    # delta = slack / scale, kept as integers: 1 - 1 / (2H - 2).
    scale, slack = (2 * n_strata - 2, 2 * n_strata - 3) if n_strata > 1 else (1, 0)
    taken = dict.fromkeys(sizes, 0)
    tie = {h: (unit_offset(seed, h), h) for h in sizes}

    def release(h: str) -> int:
        k = taken[h] + 1
        return max(1, -(-((scale * k - slack) * total) // (scale * sizes[h])))

    def due(h: str) -> int:
        k = taken[h] + 1
        return (scale * (k - 1) + slack) * total // (scale * sizes[h]) + 1

    # (release, tie, h): the stratum's next document may take that position or
    # a later one; (due, tie, h): it must take that one or an earlier one.
    pending = sorted((release(h), tie[h], h) for h in sizes)
    ready: list[tuple[int, tuple[float, str], str]] = []
    out: list[str] = []
    for n in range(1, total + 1):
        while pending and pending[0][0] <= n:
            _, t, h = heapq.heappop(pending)
            heapq.heappush(ready, (due(h), t, h))
        _, t, h = heapq.heappop(ready)
        out.append(h)
        taken[h] += 1
        if taken[h] < sizes[h]:
            heapq.heappush(pending, (release(h), t, h))
    return out


def sample_order(
    doc_ids: Sequence[str] | pl.Series,
    strata: Sequence[str] | pl.Series,
    *,
    seed: int,
) -> pl.DataFrame:
    """The sample order of every document of a population.

    Position n goes to the stratum :func:`allocation_sequence` gives it, and
    to that stratum's next document in the order of :func:`doc_hash`.

    Args:
        doc_ids: The population's document ids (unique).
        strata: Each document's stratum (:func:`stratum_key`).
        seed: The sample's seed.

    Returns:
        ``doc_id, stratum, order``, sorted by ``order``: the sample of size n
        is the first n rows. It does not depend on the input's row order.

    >>> out = sample_order(["a", "b", "c", "d"], ["x", "x", "y", "y"], seed=1)
    >>> out.columns, out.height, out["order"].to_list()
    (['doc_id', 'stratum', 'order'], 4, [0, 1, 2, 3])
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
    position = pl.col(_HASH).rank("ordinal").over(STRATUM).cast(pl.Int64) - 1
    sizes = dict(frame.group_by(STRATUM).len().iter_rows())
    slots = pl.DataFrame(
        {STRATUM: allocation_sequence(sizes, seed=seed)}, schema={STRATUM: pl.String}
    ).with_row_index(ORDER)
    slots = slots.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).over(STRATUM).alias("_pos")
    )
    return (
        frame.with_columns(position.alias("_pos"))
        .join(slots, on=[STRATUM, "_pos"], how="inner")
        .sort(ORDER)
        .select("doc_id", STRATUM, pl.col(ORDER).cast(pl.Int64))
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
    rule: str = RULE
    """How the order was made: ``"quota"`` (:func:`sample_order`), or
    ``"key"`` for a dir sampled by section 11's earlier key rule."""


def write_sample(folder: Path, order: pl.DataFrame, state: SampleState) -> None:
    """Write the order table and ``sample.json`` into a (new) folder."""
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / _TABLE, order.write_parquet)
    meta = {
        "rule": state.rule,
        "size": state.size,
        "seed": state.seed,
        "fields": list(state.fields),
        "population_fingerprint": state.population_fp,
        "sample": state.block,
    }
    text = json.dumps(meta, ensure_ascii=False, indent=2)
    write_atomic(folder / _META, text + "\n")


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
        rule=str(meta.get("rule", OLD_RULE)),
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
    >>> describe_sample({"size": 3, "population": 3, "fields": [], "strata": {}})
    'every one of the 3 documents (sample.size is not less than the corpus)'
    """
    if not isinstance(block, Mapping):
        return None
    size, population = int(block["size"]), int(block["population"])
    if size >= population:
        return (
            f"every one of the {population:,} documents (sample.size is not less "
            "than the corpus)"
        )
    fields = list(block.get("fields") or [])
    head = f"{size:,} of {population:,} documents"
    if not fields:
        return f"{head}, simple random sample"
    n_strata = len(block.get("strata") or {})
    return f"{head}, stratified by {', '.join(fields)} ({n_strata} strata)"
