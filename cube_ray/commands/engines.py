"""``cube-ray engines check CONFIG``: try every engine of a config before a long run.

CONFIG is either a run config (its ``generator`` and ``judges`` keys are
read) or a file with an ``engines:`` mapping of name -> engine config; both
kinds of keys may appear together. Each engine is built (model load, API key
lookup), asked for one constrained judge score on a small built-in judge
prompt, timed, and closed before the next one starts. The exit code is 0 when
every engine returned a valid score, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from cube_ray.errors import ConfigError, CubeRayError
from cube_ray.prompts import default_rubric, fresh_nonce, render_judge

__all__ = ["check_engines", "load_engine_configs", "register"]

SAMPLE_DOCUMENT = (
    "事项名称: 护照签发\n实施机构: 广东省公安厅出入境管理局\n"
    "承诺办结时限: 7 个工作日\n收费标准: 120 元/本"
)
SAMPLE_QUESTION = "办理护照要多久?"
SAMPLE_ANSWER = "护照签发的承诺办结时限是 7 个工作日。"

_PATH_KEYS = ("model", "tokenizer", "cache_dir")


def register(subparsers: Any) -> None:
    """Add ``engines`` (with its ``check`` subcommand) to the CLI."""
    parser = subparsers.add_parser(
        "engines",
        help="check engine configs (load, one constrained score, latency)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    sub = parser.add_subparsers(dest="engines_command", required=True, metavar="ACTION")
    check = sub.add_parser(
        "check",
        help="load each engine of CONFIG and ask it for one score",
        description=(
            "Load each engine named in CONFIG (a run config's generator and "
            "judges, or an `engines:` mapping), ask one constrained judge score, "
            "and print load time, latency and the answer."
        ),
    )
    check.add_argument("config", metavar="CONFIG", help="YAML file")
    check.add_argument(
        "--engine",
        action="append",
        default=None,
        metavar="NAME",
        help="check only this engine (repeatable); names as printed",
    )
    check.add_argument(
        "--mode",
        choices=("argmax", "expected"),
        default=None,
        help="score mode (default: each engine's score_mode)",
    )
    check.add_argument(
        "--json", action="store_true", help="print one JSON object per engine"
    )
    check.set_defaults(func=_run_check)


def load_engine_configs(path: str | Path) -> dict[str, Any]:
    """Engine name -> validated engine config, from a run or engines YAML file.

    Names: ``generator``, ``judge:<name>`` for each judge, and the keys of an
    ``engines:`` mapping. Relative model paths resolve against the file's folder.

    Raises:
        ConfigError: Unreadable file, no engines, or an invalid engine entry.
    """
    # lazy: loads yaml, pydantic; --help imports every command module
    import yaml
    from pydantic import TypeAdapter, ValidationError

    # lazy: loads pydantic; --help imports every command module
    from cube_ray.engines.config import JudgeConfig

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        msg = f"cannot read engine config {str(p)!r}: {exc}"
        raise ConfigError(msg) from exc
    if not isinstance(data, dict):
        msg = f"{str(p)!r} must hold a mapping with generator/judges/engines keys"
        raise ConfigError(msg)
    raw: dict[str, Any] = {}
    if data.get("generator") is not None:
        raw["generator"] = data["generator"]
    judges = data.get("judges") or {}
    if not isinstance(judges, dict):
        msg = f"{str(p)!r}: `judges` must map judge names to engine configs"
        raise ConfigError(msg)
    raw.update({f"judge:{k}": v for k, v in judges.items()})
    engines = data.get("engines") or {}
    if not isinstance(engines, dict):
        msg = f"{str(p)!r}: `engines` must map names to engine configs"
        raise ConfigError(msg)
    raw.update(engines)
    if not raw:
        msg = (
            f"{str(p)!r} names no engine; expected a `generator`, `judges` or "
            "`engines` key"
        )
        raise ConfigError(msg)
    adapter: TypeAdapter[Any] = TypeAdapter(JudgeConfig)
    out: dict[str, Any] = {}
    for name, entry in raw.items():
        if isinstance(entry, dict):
            entry = _resolve(entry, p.parent)
        try:
            out[name] = adapter.validate_python(entry)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}"
                for e in exc.errors()
            )
            msg = f"{str(p)!r}: engine {name!r} is invalid: {problems}"
            raise ConfigError(msg) from None
    return out


def _resolve(entry: dict[str, Any], base: Path) -> dict[str, Any]:
    entry = dict(entry)
    for key in _PATH_KEYS:
        value = entry.get(key)
        if isinstance(value, str) and value.startswith(("./", "../")):
            entry[key] = str((base / value).resolve())
    return entry


def check_engines(
    configs: dict[str, Any], *, mode: str | None = None
) -> list[dict[str, Any]]:
    """Build each engine, ask one score, close it; one result dict per engine."""
    # lazy: loads pydantic; --help imports every command module
    from cube_ray.engines.base import ItemJudge, JudgeItem
    from cube_ray.engines.registry import build_engine

    prompt = render_judge(
        SAMPLE_DOCUMENT,
        SAMPLE_QUESTION,
        SAMPLE_ANSWER,
        default_rubric("relevance"),
        nonce=fresh_nonce(),
    )
    results = []
    for name, config in configs.items():
        row: dict[str, Any] = {"engine": name, "backend": config.backend}
        score_mode = mode or getattr(config, "score_mode", "argmax")
        row["mode"] = score_mode
        start = time.perf_counter()
        try:
            engine = build_engine(config)
        except CubeRayError as exc:
            row.update(ok=False, error=str(exc))
            results.append(row)
            continue
        row["model"] = engine.name
        row["load_s"] = round(time.perf_counter() - start, 3)
        try:
            t0 = time.perf_counter()
            if isinstance(engine, ItemJudge):  # the reference judge: no prompt
                item = JudgeItem(
                    SAMPLE_DOCUMENT,
                    SAMPLE_QUESTION,
                    SAMPLE_ANSWER,
                    next(iter(config.measures), "relevance"),
                    "",
                )
                [result] = engine.judge_items([item])
            else:
                [result] = engine.score([prompt], mode=score_mode)  # type: ignore[arg-type]
            row["latency_s"] = round(time.perf_counter() - t0, 3)
            row.update(
                score=result.score,
                status=result.status,
                raw=result.raw,
                ok=result.status == "ok" and result.score is not None,
            )
        except CubeRayError as exc:
            row.update(ok=False, error=str(exc))
        finally:
            engine.close()
        results.append(row)
    return results


def _run_check(args: argparse.Namespace) -> int:
    # Keep stdout for the results (``--json`` lines); vLLM logs to stdout by
    # default. Set before vLLM is imported.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    configs = load_engine_configs(args.config)
    if args.engine:
        unknown = sorted(set(args.engine) - set(configs))
        if unknown:
            msg = f"no engine named {unknown} in {args.config}; have {sorted(configs)}"
            raise ConfigError(msg)
        configs = {k: v for k, v in configs.items() if k in args.engine}
    results = check_engines(configs, mode=args.mode)
    for row in results:
        if args.json:
            print(json.dumps(row, ensure_ascii=False))
        elif "error" in row:
            print(f"FAIL {row['engine']} ({row['backend']}): {row['error']}")
        else:
            flag = "ok  " if row["ok"] else "FAIL"
            print(
                f"{flag} {row['engine']} ({row['backend']}, {row['model']}): "
                f"load {row['load_s']:.2f} s, score {row['latency_s']:.3f} s, "
                f"{row['mode']} score={row['score']} status={row['status']} "
                f"raw={row['raw']!r}"
            )
    sys.stdout.flush()
    return 0 if all(r.get("ok") for r in results) else 1
