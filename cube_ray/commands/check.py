"""``cube-ray check CONFIG``: the run's preflight, without running anything.

Loads and validates CONFIG (every cross-field rule), connects to the cluster
the run would use (``--address``, else ``ray.address``, else a local Ray),
and runs ``cube_ray.preflight``: every pool fits a node or an autoscaler node
type, the named environment variables are set, HTTP endpoints list their
models, local model paths exist on the nodes of their pools, and the run dir
is shared by every node. Before that, each HTTP system under test is asked
two questions (the question file's first, else the first documents' titles)
and the answer and ids its paths read are shown; it fails when the reply has
no answer text, no retrieved ids or none of them is a corpus id, naming the
path in the reply that would be right and the reply's top-level keys, and
warns when the answer path read the same short text for both questions. Ray's
own start-up lines stay off the console. Exit code 0 when all pass, 2
otherwise.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from cube_ray.console import quiet_console
from cube_ray.errors import InputError

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
    """Connect as the run would, run the preflight without waiting, disconnect.

    Ray's own start-up and shut-down lines (its token-authentication warning,
    "Started a local Ray instance") go to a log file, not the console, as in
    a run; the file is removed unless connecting failed (then it is named).
    """
    # heavy: ray, imported only where this code uses it
    import ray

    # lazy: loads pandas, pyarrow, pydantic; --help imports every command module
    from cube_ray.pipeline import connect_ray
    from cube_ray.preflight import preflight

    log = Path(tempfile.mkdtemp(prefix="cube-ray-check-")) / "ray.log"
    try:
        with quiet_console(log):
            owned = connect_ray(config, address)
    except BaseException:
        print(f"check: Ray's output is in {log}", file=sys.stderr, flush=True)
        raise
    try:
        preflight(config, run_dir=run_dir, say=_say, wait=False)
    finally:
        if owned:
            with quiet_console(log):
                ray.shutdown()
        shutil.rmtree(log.parent, ignore_errors=True)


def _say(text: str) -> None:
    print(f"preflight: {text}", flush=True)


def check_command(args: argparse.Namespace) -> int:
    """Validate the config, then run the preflight against the cluster."""
    # lazy: loads pyarrow, pydantic, yaml; --help imports every command module
    from cube_ray.config import RunConfig

    config = RunConfig.from_yaml(args.config)
    print(f"config: {args.config} is valid")
    run_dir = Path(args.out) if args.out else Path(config.output_dir)
    probe_systems(config, say=lambda text: print(f"systems: {text}", flush=True))
    run_preflight(config, run_dir=run_dir, address=args.address)
    print("check: ok")
    sys.stdout.flush()
    return 0


def _probe_questions(config: Any, n: int = 2) -> list[tuple[str, str, str]]:
    """Up to ``n`` (question id, question, gold doc id) to probe systems with.

    The question file's first rows, else the first documents' titles.
    """
    # lazy: loads pyarrow, pydantic, yaml; --help imports every command module
    from cube_ray import schema
    from cube_ray.corpus import iter_document_batches

    q = config.questions
    if q.source == "file" and q.path:
        # lazy: loads pyarrow, pydantic; --help imports every command module
        from cube_ray.systems import load_question_file

        frame = load_question_file(
            q.path,
            question_field=q.question_field,
            doc_id_field=q.doc_id_field,
            id_field=q.question_id_field,
            reference_answer_field=q.reference_answer_field,
        )
        return [
            (r[schema.QUESTION_ID], r[schema.QUESTION], r[schema.DOC_ID])
            for r in frame.head(n).iter_rows(named=True)
        ]
    out: list[tuple[str, str, str]] = []
    for batch in iter_document_batches(config.corpus, batch_rows=n, limit=n):
        for row in batch.to_pylist():
            text = row[schema.TEXT] or ""
            title = row[schema.TITLE] or (text.splitlines() or [""])[0]
            out.append((row[schema.DOC_ID], title, row[schema.DOC_ID]))
    return out[:n]


def _answer_fix(reply: Any, path: str) -> str:
    """Why ``answer_path`` read no text from ``reply``, and the path that would."""
    # lazy: loads pyarrow, pydantic; --help imports every command module
    from cube_ray.systems.http import resolve_path
    from cube_ray.systems.reply_paths import longest_text_path, top_keys

    found = resolve_path(reply, path)
    if isinstance(found, dict | list):
        kind = "an object" if isinstance(found, dict) else "a list"
        what = f"answer_path {path!r} lands on {kind}, not a text"
        better = longest_text_path(found, path)
    else:
        what = (
            f"answer_path {path!r} reads {'nothing' if found is None else repr(found)}"
        )
        better = longest_text_path(reply)
    where = "under it" if isinstance(found, dict | list) else "in the reply"
    fix = (
        f"; the longest text {where} is at {better!r}: set answer_path: {better}"
        if better
        else f"; there is no text {where}"
    )
    return f"{what}{fix} (the reply's top-level keys: {top_keys(reply)})"


def _ids_fix(reply: Any, path: str, corpus_ids: set[str]) -> str:
    """Where the reply keeps the corpus ids, if anywhere, as a fix."""
    # lazy: loads pyarrow, pydantic; --help imports every command module
    from cube_ray.systems.reply_paths import id_path, top_keys

    found = id_path(reply, corpus_ids)
    where = (
        f"the corpus ids are at {found!r}: set retrieved_path: {found}"
        if found is not None and found != path
        else (
            "no value of the reply is a corpus id: fix id_pattern, or index this "
            "corpus with corpus.id_field as ids"
        )
    )
    return f"{where} (the reply's top-level keys: {top_keys(reply)})"


def probe_systems(config: Any, *, say: Any) -> None:
    """Ask each HTTP system two questions; show what its paths read.

    Says, per system and question, the question, the answer extracted (its
    first 200 characters) and the retrieved ids; warns when the answer path
    read the same short text for two different questions (a role or a status
    field, not an answer).

    Raises:
        InputError: A system's reply is not ``ok``, has no retrieved ids, or
            none of them is a document id of the corpus; the message shows the
            answer and the ids, and the path in the reply that would be right
            (:mod:`cube_ray.systems.reply_paths`) with its top-level keys.
    """
    # lazy: loads pyarrow, pydantic, yaml; --help imports every command module
    from cube_ray import schema
    from cube_ray.corpus import iter_document_batches
    from cube_ray.systems.base import QuestionIn
    from cube_ray.systems.config import HttpSystemConfig
    from cube_ray.systems.http import HttpSystem
    from cube_ray.systems.reply_paths import SHORT_ANSWER

    systems = [s for s in config.systems if isinstance(s, HttpSystemConfig)]
    if not systems:
        return
    probes = _probe_questions(config)
    corpus_ids: set[str] = set()
    for batch in iter_document_batches(config.corpus, limit=config.corpus.limit):
        corpus_ids.update(batch.column(schema.DOC_ID).to_pylist())
    for system in systems:
        http = HttpSystem(system)
        answers: list[tuple[str, str]] = []
        for qid, question, gold in probes:
            reply = http.answer([QuestionIn(qid, question, gold)])[0]
            raw = http.last_reply
            ids = list(reply.retrieved_doc_ids or [])
            known = [i for i in ids if i in corpus_ids]
            answer = (reply.answer or "")[:200]
            shown = f"answer {answer!r}, retrieved ids {ids[:8]}"
            problem = None
            if reply.status == "no_answer_in_response" and raw is not None:
                problem = (
                    f"the reply has no answer text ({shown}): "
                    f"{_answer_fix(raw, http.answer_path)}"
                )
            elif reply.status != schema.STATUS_OK:
                problem = f"the reply has status {reply.status!r} ({shown})"
            elif not ids:
                problem = (
                    f"the reply has no retrieved ids at retrieved_path "
                    f"{http.retrieved_path!r} ({shown}); "
                    f"{_ids_fix(raw, http.retrieved_path, corpus_ids)}"
                )
            elif not known:
                problem = (
                    f"none of the retrieved ids is a document id of the corpus "
                    f"({shown}; corpus ids look like {sorted(corpus_ids)[:3]}); "
                    f"{_ids_fix(raw, http.retrieved_path, corpus_ids)}"
                )
            if problem is not None:
                msg = f"system {system.name!r} asked {question!r}: {problem}"
                raise InputError(msg, field=f"systems[{system.name}]")
            answers.append((question, reply.answer or ""))
            say(
                f"{system.name}: asked {question!r}; answer {answer!r}; retrieved "
                f"ids {ids[:8]}; {len(known)} of {len(ids)} retrieved ids are "
                "corpus ids"
            )
        texts = {a.strip() for _, a in answers}
        if (
            len(answers) > 1
            and len({q for q, _ in answers}) > 1
            and len(texts) == 1
            and len(next(iter(texts))) <= SHORT_ANSWER
        ):
            # lazy: loads pyarrow, pydantic; --help imports every command module
            from cube_ray.systems.reply_paths import longest_text_path

            better = longest_text_path(http.last_reply)
            hint = (
                f"; the reply's longest text is at {better!r}"
                if better and better != http.answer_path
                else ""
            )
            say(
                f"warning: {system.name}: answer_path {http.answer_path!r} read "
                f"the same short text {answers[0][1]!r} for {len(answers)} "
                "different questions: it may be a role or a status, not the "
                f"answer{hint}"
            )
