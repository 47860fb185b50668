"""``cube-ray check CONFIG``: the run's preflight, without running anything.

Loads and validates CONFIG (every cross-field rule), connects to the cluster
the run would use (``--address``, else ``ray.address``, else a local Ray),
and runs ``cube_ray.preflight``: every pool fits a node or an autoscaler node
type, the named environment variables are set, HTTP endpoints list their
models, local model paths exist on the nodes of their pools, and the run dir
is shared by every node. Before that, each HTTP system under test is asked
one question (the question file's first, else the first document's title);
it fails when the reply has no retrieved ids or none of them is a corpus id,
showing the answer and the ids it got. Exit code 0 when all pass, 2 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["check_command", "probe_systems", "register", "run_preflight"]


def register(subparsers: Any) -> None:
    """Add the ``check`` subcommand."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="validate CONFIG and check the cluster can run it (nothing runs)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("config", help="run config (YAML)")
    p.add_argument(
        "--out", metavar="RUN_DIR", help="run directory (default: output_dir)"
    )
    p.add_argument(
        "--address", metavar="ADDR", help="Ray address (auto, ray://host:10001)"
    )
    p.set_defaults(func=check_command)


def run_preflight(config: Any, *, run_dir: Path, address: str | None) -> None:
    """Connect as the run would, run the preflight without waiting, disconnect."""
    import ray

    from cube_ray.pipeline import connect_ray
    from cube_ray.preflight import preflight

    owned = connect_ray(config, address)
    try:
        preflight(config, run_dir=run_dir, say=_say, wait=False)
    finally:
        if owned:
            ray.shutdown()


def _say(text: str) -> None:
    print(f"preflight: {text}", flush=True)


def check_command(args: argparse.Namespace) -> int:
    """Validate the config, then run the preflight against the cluster."""
    from cube_ray.config import RunConfig

    config = RunConfig.from_yaml(args.config)
    print(f"config: {args.config} is valid")
    run_dir = Path(args.out) if args.out else Path(config.output_dir)
    probe_systems(config, say=lambda text: print(f"systems: {text}", flush=True))
    run_preflight(config, run_dir=run_dir, address=args.address)
    print("check: ok")
    sys.stdout.flush()
    return 0


def _probe_question(config: Any) -> tuple[str, str, str]:
    """(question id, question, gold doc id) to probe systems with."""
    from cube_ray import schema
    from cube_ray.corpus import iter_document_batches

    q = config.questions
    if q.source == "file" and q.path:
        from cube_ray.systems import load_question_file

        frame = load_question_file(
            q.path,
            question_field=q.question_field,
            doc_id_field=q.doc_id_field,
            id_field=q.question_id_field,
            reference_answer_field=q.reference_answer_field,
        )
        row = frame.row(0, named=True)
        return row[schema.QUESTION_ID], row[schema.QUESTION], row[schema.DOC_ID]
    batch = next(iter_document_batches(config.corpus, batch_rows=1, limit=1))
    doc_id = batch.column(schema.DOC_ID)[0].as_py()
    title = batch.column(schema.TITLE)[0].as_py()
    text = batch.column(schema.TEXT)[0].as_py()
    return doc_id, title or text.splitlines()[0], doc_id


def probe_systems(config: Any, *, say: Any) -> None:
    """Ask each HTTP system one question; its ids must be corpus ids.

    Raises:
        InputError: A system's reply is not ``ok``, has no retrieved ids, or
            none of them is a document id of the corpus; the message shows the
            answer and the ids.
    """
    from cube_ray import schema
    from cube_ray.corpus import iter_document_batches
    from cube_ray.errors import InputError
    from cube_ray.systems.base import QuestionIn
    from cube_ray.systems.config import HttpSystemConfig
    from cube_ray.systems.http import HttpSystem

    systems = [s for s in config.systems if isinstance(s, HttpSystemConfig)]
    if not systems:
        return
    qid, question, gold = _probe_question(config)
    corpus_ids: set[str] = set()
    for batch in iter_document_batches(config.corpus, limit=config.corpus.limit):
        corpus_ids.update(batch.column(schema.DOC_ID).to_pylist())
    for system in systems:
        reply = HttpSystem(system).answer([QuestionIn(qid, question, gold)])[0]
        ids = list(reply.retrieved_doc_ids or [])
        known = [i for i in ids if i in corpus_ids]
        answer = (reply.answer or "")[:200]
        shown = f"answer {answer!r}, retrieved ids {ids[:8]}"
        problem = None
        if reply.status != schema.STATUS_OK:
            problem = f"the reply has status {reply.status!r} ({shown})"
        elif not ids:
            problem = (
                f"the reply has no retrieved ids at retrieved_path ({shown}); "
                "fix retrieved_path (and id_pattern) to point at the ranked doc ids"
            )
        elif not known:
            problem = (
                f"none of the retrieved ids is a document id of the corpus "
                f"({shown}; corpus ids look like {sorted(corpus_ids)[:3]}); fix "
                "id_pattern, or index this corpus with corpus.id_field as ids"
            )
        if problem is not None:
            msg = f"system {system.name!r} asked {question!r}: {problem}"
            raise InputError(msg, field=f"systems[{system.name}]")
        say(
            f"{system.name}: asked {question!r}; {len(known)} of {len(ids)} "
            "retrieved ids are corpus ids"
        )
