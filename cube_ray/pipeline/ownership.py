"""A run dir belongs to one run: its config and corpus, checked before any work.

``manifest.json`` records the config (as written, masked) and the corpus
fingerprint of the run that made the dir. A later run into the same dir must
be that run again, or one that only adds work:

- config keys in :data:`ALLOWED_CHANGES` (execution, aggregation, permissions,
  the record limit, a sample's size) may change;
- systems and judges may be added (or left out); one kept under the same name
  must be unchanged (pool sizes aside);
- the corpus may grow or shrink (``--limit``, records appended), but every
  document the two runs share must be the same.

Anything else (another corpus, a changed judge, rubric, prompt or generator)
is another run: exit 2 naming both fingerprints and what differs, unless the
user asks to update the dir in place (``cube-ray run --update``: changed rows
are recomputed, stale ones dropped). Rows of documents, systems, judges or
dimensions no longer in the config never reach the summary
(:func:`cube_ray.pipeline.summary.summarize_run`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cube_ray import schema
from cube_ray.engines.config import ACCOUNTING_FIELDS, TRANSPORT_FIELDS
from cube_ray.errors import ConfigError
from cube_ray.manifest import Manifest

__all__ = [
    "ALLOWED_CHANGES",
    "NAMED_SECTIONS",
    "check_config_owner",
    "check_corpus_owner",
    "config_differences",
]

ALLOWED_CHANGES: tuple[str, ...] = (
    "ray",
    "output_dir",
    "aggregate",
    "env_vars",
    "data_dirs",
    "allow_fake_engines",
    "allow_remote_code",
    "allow_env",
    "allow_outside_paths",
    "corpus.limit",
    "sample.size",
)
"""Config keys whose change adds work or changes no stored row: how the job
runs (``ray``), where (``output_dir``), how the summary is computed
(``aggregate``, recomputed from every row each run), what the config may do
(``env_vars``, ``data_dirs``, ``allow_*``), and how many records or sampled
questions it uses (``corpus.limit``, ``sample.size``: a corpus that grows or
shrinks is checked by :func:`check_corpus_owner`)."""

NAMED_SECTIONS: dict[str, str] = {"systems": "name", "judges": ""}
"""Sections compared entry by entry (a list by its ``name`` key, a mapping by
its keys): an added or dropped entry only adds or leaves out work."""

_IGNORED_LEAVES = frozenset({"pool", *TRANSPORT_FIELDS, *ACCOUNTING_FIELDS})
"""Keys ignored at any depth: pool and batch sizes, an HTTP engine's or
system's timeout, retries and concurrency, and prices change throughput or
cost, not outputs (as for ``engine_fingerprint``): raising ``timeout_s`` before
``--retry-failed`` is the same run."""


def _allowed(path: str) -> bool:
    return any(path == a or path.startswith(a + ".") for a in ALLOWED_CHANGES)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= 200 else text[:197] + "..."


def _diff(old: Any, new: Any, path: str, out: list[str]) -> None:
    if _allowed(path):
        return
    if isinstance(old, dict) and isinstance(new, dict):
        # A key only one side has is a field another cube-ray version added
        # or removed (a user's change shows as a changed value: every field
        # is stored with its default).
        for key in [k for k in old if k in new]:
            if key in _IGNORED_LEAVES:
                continue
            sub = f"{path}.{key}" if path else str(key)
            _diff(old.get(key), new.get(key), sub, out)
        return
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _diff(a, b, f"{path}[{i}]", out)
        return
    if old != new:
        out.append(f"{path} ({_short(old)} -> {_short(new)})")


def _by_name(value: Any, key: str) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, list):
        return {str(v.get(key)): v for v in value if isinstance(v, dict)}
    return {}


def config_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The config keys that differ in a way that makes ``new`` another run.

    Args:
        old: The config stored in the run dir's manifest.
        new: This run's config, as the manifest stores it.

    >>> a = {"judges": {"j1": {"model": "m", "pool": {"max_size": 1}}},
    ...      "systems": [{"name": "rag", "k": 8}], "ray": {"num_cpus": 4},
    ...      "dimensions": [{"name": "relevance"}]}
    >>> b = {"judges": {"j1": {"model": "m", "pool": {"max_size": 4}},
    ...                 "j2": {"model": "x"}},
    ...      "systems": [{"name": "rag", "k": 8}, {"name": "rag@b", "k": 4}],
    ...      "ray": {"num_cpus": 8}, "dimensions": [{"name": "relevance"}]}
    >>> config_differences(a, b)
    []
    >>> b["judges"]["j1"]["model"] = "other"
    >>> b["dimensions"][0]["rubric"] = "v2"
    >>> config_differences(a, b)
    ['judges.j1.model ("m" -> "other")']
    >>> b["dimensions"][0] = {"name": "relevance", "rubric": "v2"}
    >>> a["dimensions"][0]["rubric"] = None
    >>> config_differences(a, b)
    ['judges.j1.model ("m" -> "other")', 'dimensions[0].rubric (null -> "v2")']
    """
    out: list[str] = []
    for key in [k for k in old if k in new]:
        if key in NAMED_SECTIONS:
            olds = _by_name(old.get(key), NAMED_SECTIONS[key] or "")
            news = _by_name(new.get(key), NAMED_SECTIONS[key] or "")
            for name in olds.keys() & news.keys():
                _diff(olds[name], news[name], f"{key}.{name}", out)
            continue
        _diff(old.get(key), new.get(key), key, out)
    return out


def _refuse(run_dir: Path, what: str, details: list[str]) -> ConfigError:
    items = "".join(f"\n  - {d}" for d in details)
    return ConfigError(
        f"run dir {str(run_dir)!r} belongs to another run: {what}{items}\n"
        "Fix: choose another --out (or output_dir) for this config; or delete "
        f"{str(run_dir)!r} if its results are no longer needed; or pass --update "
        "to update this run dir in place (changed rows are recomputed, rows the "
        "new config no longer has are dropped or left out of the summary)"
    )


def check_config_owner(
    run_dir: Path, config: Any, manifest: Manifest | None = None
) -> None:
    """Refuse a config that is another run than the one that made ``run_dir``.

    Args:
        run_dir: The run directory (may not exist).
        config: The :class:`cube_ray.config.RunConfig` of this run.
        manifest: The run dir's manifest, if already read.

    Raises:
        ConfigError: Naming both config fingerprints and the keys that differ.
    """
    manifest = Manifest.read(run_dir) if manifest is None else manifest
    old = manifest.config if manifest is not None else None
    if manifest is None or old is None:
        return  # no run has written rows here yet
    differences = config_differences(old, config.manifest_config())
    if differences:
        raise _refuse(
            run_dir,
            f"its manifest has config fingerprint {manifest.config_hash}, "
            f"this config has {config.fingerprint()}; they differ in:",
            differences,
        )


def check_corpus_owner(
    run_dir: Path,
    manifest: Manifest | None,
    *,
    fingerprint: str,
    old_documents: list[Path],
    new_documents: list[Path],
) -> None:
    """Refuse a corpus that is not the run's corpus, grown or shrunk.

    Args:
        run_dir: The run directory.
        manifest: Its manifest.
        fingerprint: This run's corpus fingerprint.
        old_documents: Part files of the run dir's documents table.
        new_documents: Part files of this run's staged documents.

    Raises:
        ConfigError: Naming both corpus fingerprints and a document that differs.
    """
    old_fp = manifest.corpus_fingerprint if manifest is not None else None
    if old_fp is None or old_fp == fingerprint:
        return
    # circle at load: cube_ray/pipeline/__init__ imports run, which imports this module
    from cube_ray.pipeline.parts import verify_part

    # A damaged part is set aside later in the run; compare what reads.
    old_documents = [f for f in old_documents if verify_part(f) is None]
    if not old_documents:
        return

    def read(files: list[Path]) -> Any:

        cols = [schema.DOC_ID, schema.CONTENT_HASH]
        return pa.concat_tables([pq.read_table(f, columns=cols) for f in files])

    old, new = read(old_documents), read(new_documents)
    # A document's content hash covers its id, title and text.
    new_in_old = pc.is_in(new[schema.CONTENT_HASH], value_set=old[schema.CONTENT_HASH])
    old_in_new = pc.is_in(old[schema.CONTENT_HASH], value_set=new[schema.CONTENT_HASH])
    if pc.all(new_in_old).as_py() or pc.all(old_in_new).as_py():
        return  # the same corpus, grown or shrunk (--limit, records appended)
    changed = new.filter(pc.invert(new_in_old))
    gone = old.filter(pc.invert(old_in_new))
    example = changed[schema.DOC_ID][0].as_py()
    raise _refuse(
        run_dir,
        f"its manifest has corpus fingerprint {old_fp}, this corpus has "
        f"{fingerprint}; the documents differ:",
        [
            f"{changed.num_rows} of this corpus' {new.num_rows} documents are not "
            f"in the run dir (e.g. doc_id {example!r}, new or changed)",
            f"{gone.num_rows} of the run dir's {old.num_rows} documents are not in "
            "this corpus",
        ],
    )
