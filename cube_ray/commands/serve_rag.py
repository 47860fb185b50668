"""``cube-ray serve-rag CONFIG``: serve the built-in RAG over HTTP.

It gives tests and demos a real HTTP system under test: the same questions put
in-process and through the HTTP adapter get the same answers, retrieved ids and
ranks. The corpus section of the run config is turned into documents (or
``--documents`` names an existing ``documents/`` directory, e.g. a run's), a
``builtin_rag`` system of the config is built with the config's generator, and
the server answers until interrupted. See :mod:`cube_ray.systems.serve` for the
endpoints.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path
from typing import Any

from cube_ray.env import prompt_key
from cube_ray.errors import ConfigError
from cube_ray.prompts import derive_nonce

__all__ = ["register", "serve_rag"]

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    """Add the ``serve-rag`` subcommand."""
    parser = subparsers.add_parser(
        "serve-rag",
        help="serve the built-in reference RAG over HTTP (tests, demos)",
        description=(
            "Serve a builtin_rag system of a run config over HTTP: POST /v1/answer, "
            "/api/v1/chats/<id>/completions (RAGFlow-shaped) and "
            "/v1/chat/completions (OpenAI-shaped), GET /health. The corpus "
            "section is indexed (or --documents), the config's generator answers."
        ),
    )
    parser.add_argument("config", help="run config YAML (corpus, generator, systems)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address")
    parser.add_argument("--port", type=int, default=8765, help="port (0: any free)")
    parser.add_argument(
        "--system",
        default=None,
        help="name of the builtin_rag system to serve (default: the first one)",
    )
    parser.add_argument(
        "--documents",
        default=None,
        help="documents/ Parquet directory to index instead of the config's corpus",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="index only the first N records"
    )
    parser.set_defaults(func=serve_rag)


def _documents_dir(config: Any, *, limit: int | None) -> Path:
    """Write the corpus as documents under the output dir (once per content)."""
    # lazy: loads pyarrow; --help imports every command module
    import pyarrow.parquet as pq

    # lazy: loads pyarrow, pydantic, yaml; --help imports every command module
    from cube_ray.corpus import iter_document_batches

    out = Path(config.output_dir) / "serve_rag" / "documents"
    tmp = out.with_name("documents.tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # leftovers of an interrupted start
    tmp.mkdir(parents=True)
    for i, table in enumerate(iter_document_batches(config.corpus, limit=limit)):
        pq.write_table(table, tmp / f"part-{i:05d}.parquet")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def serve_rag(args: argparse.Namespace) -> int:
    """Build the system and serve it until interrupted."""
    # lazy: loads pyarrow, pydantic, yaml; --help imports every command module
    from cube_ray.config import RunConfig
    from cube_ray.corpus import with_prompt_language
    from cube_ray.systems import BuiltinRagSystemConfig, build_system
    from cube_ray.systems.serve import make_server

    config = RunConfig.from_yaml(args.config)
    candidates = [s for s in config.systems if isinstance(s, BuiltinRagSystemConfig)]
    if args.system is not None:
        candidates = [s for s in candidates if s.name == args.system]
    if not candidates:
        which = f" named {args.system!r}" if args.system else ""
        msg = (
            f"config {args.config!r} has no builtin_rag system{which} to serve; add "
            "one under systems: (e.g. - {kind: builtin_rag, name: rag, k: 8})"
        )
        raise ConfigError(msg)
    system_config = candidates[0]
    documents = (
        Path(args.documents)
        if args.documents
        else _documents_dir(config, limit=args.limit)
    )
    config.prompts.check()
    system = build_system(
        system_config,
        documents_path=str(documents),
        generator=config.generator,
        answer_template=with_prompt_language(config, limit=args.limit).prompts.answer,
        # Derived from the config (and $CUBE_RAY_PROMPT_KEY): the same answer
        # prompts on every start, as a run's on resume.
        nonce=derive_nonce(config.fingerprint(), key=prompt_key()),
    )
    server = make_server(system, host=args.host, port=args.port)
    host, port = server.server_address[:2]
    print(
        f"cube-ray serve-rag: {system.name} (k={system.k}) on http://{host!s}:{port} "
        "— POST /v1/answer, /api/v1/chats/<id>/completions, /v1/chat/completions",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        system.close()
    return 0
