"""Loading a run config file: YAML, path resolution, the read-only folders, errors.

Relative paths in a config file are resolved against the directory of that file,
so a config works the same from any working directory (and under
``ray job submit --working-dir .``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cube_ray.credentials import is_credential_key, mask
from cube_ray.errors import ConfigError
from cube_ray.systems.kinds import kind_named

__all__ = ["read_config_file", "read_paths"]

_CROSS_PREFIX = "cross-field: "
"""Marks the message of ``RunConfig._checks_before_any_work`` (its items name
their own fields)."""
_ITEM = "  - "


def read_config_file(p: Path) -> dict[str, Any]:
    """The mapping of a YAML config file, its relative paths resolved.

    Raises:
        ConfigError: The file is missing, is not UTF-8 or valid YAML, is not a
            mapping, or reads files outside its folders; the message names the
            file, the key and the fix.
    """
    try:
        raw = p.read_bytes()
    except OSError as exc:
        msg = f"cannot read config file {str(p)!r}: {exc.strerror or exc}"
        raise ConfigError(msg) from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        msg = (
            f"config file {str(p)!r} is not UTF-8: byte 0x{raw[exc.start]:02x} "
            f"at line {line} is not valid UTF-8 (the file looks like Latin-1 "
            "or another legacy encoding); save it as UTF-8, e.g. iconv -f "
            f"latin1 -t utf-8 {p.name} > {p.stem}.utf8{p.suffix}"
        )
        raise ConfigError(msg) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc)
        msg = (
            f"config file {str(p)!r} is not valid YAML{where}: {problem}; fix "
            "the syntax (indentation, quotes, colons)"
        )
        raise ConfigError(msg) from exc
    if not isinstance(data, dict):
        msg = (
            f"config file {str(p)!r} must hold a mapping of keys (corpus, "
            f"generator, judges, ...), got {type(data).__name__}"
        )
        raise ConfigError(msg)
    data = _resolve_paths(data, p.parent)
    outside = _outside_paths(data, p.parent)
    if outside:
        head = f"config file {str(p)!r} is invalid ({len(outside)} problem(s)):"
        raise ConfigError("\n".join([head, *(f"{_ITEM}{o}" for o in outside)]))
    return data


def _format_validation(exc: ValidationError, source: str) -> str:
    lines: list[str] = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        kind = err["type"]
        message = err["msg"]
        if kind == "value_error" and _CROSS_PREFIX in message:
            # Cross-field items name their own fields; the input is the whole file.
            items = message.split(_CROSS_PREFIX, 1)[1].split(f"\n{_ITEM}")
            lines.extend(f"{_ITEM}{item}" for item in items)
            continue
        if kind == "value_error" and not err["loc"]:
            lines.append(f"{_ITEM}{message.removeprefix('Value error, ')}")
            continue
        if kind == "extra_forbidden":
            fix = "remove it or check its spelling"
        elif kind == "missing":
            fix = "add this key"
        elif kind == "union_tag_invalid":
            ctx = err.get("ctx") or {}
            fix = f"use one of {ctx.get('expected_tags', 'the documented values')}"
        elif kind == "union_tag_not_found":
            fix = "add the discriminating key (backend for engines, kind for systems)"
        elif kind in ("value_error", "assertion_error"):
            fix = ""  # cube_ray's own messages name the value and the fix
        elif any(is_credential_key(str(p)) for p in err["loc"]):
            fix = "got a value that is not shown: it may be a credential"
        else:
            fix = f"got {mask(err.get('input'))!r}"
        lines.append(f"{_ITEM}{loc}: {message}" + (f" ({fix})" if fix else ""))
    head = f"config file {source!r} is invalid ({len(lines)} problem(s)):"
    return "\n".join([head, *lines])


_PATH_KEYS = {
    ("corpus", "path"),
    ("questions", "path"),
    ("output_dir",),
}


def _resolve(base: Path, value: Any) -> Any:
    if isinstance(value, str) and value and "://" not in value:
        candidate = Path(value).expanduser()
        if not candidate.is_absolute():
            return str((base / candidate).resolve())
        return str(candidate)
    return value


def _resolve_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """Copy of ``data`` with known path keys resolved against ``base``."""
    out = dict(data)
    for keys in _PATH_KEYS:
        node: Any = out
        for key in keys[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and keys[-1] in node:
            if len(keys) > 1:
                parent = dict(node)
                parent[keys[-1]] = _resolve(base, parent[keys[-1]])
                out[keys[0]] = parent
            else:
                out[keys[0]] = _resolve(base, out[keys[0]])
    dims = out.get("dimensions")
    if isinstance(dims, list):
        out["dimensions"] = [
            {**d, "rubric_file": _resolve(base, d["rubric_file"])}
            if isinstance(d, dict) and d.get("rubric_file")
            else d
            for d in dims
        ]
    systems = out.get("systems")
    if isinstance(systems, list):
        out["systems"] = [
            {**s, **{k: _resolve(base, s[k]) for k in _system_paths(s)}}
            if isinstance(s, dict)
            else s
            for s in systems
        ]
    prompts = out.get("prompts")
    if isinstance(prompts, dict):
        out["prompts"] = {
            k: _resolve(base, v) if k != "language" and _is_template_path(v) else v
            for k, v in prompts.items()
        }
    data_dirs = out.get("data_dirs")
    if isinstance(data_dirs, list):
        out["data_dirs"] = [_resolve(base, d) for d in data_dirs]
    return out


def _system_paths(system: dict[str, Any]) -> list[str]:
    """The fields of a ``systems:`` entry that name a file its kind reads."""
    kind = kind_named(system.get("kind"))
    fields = kind.path_fields if kind is not None else ()
    return [k for k in fields if isinstance(system.get(k), str)]


def _is_template_path(value: Any) -> bool:
    """Whether a ``prompts`` value names a file rather than a packaged template.

    >>> _is_template_path("judge"), _is_template_path("zh/judge")
    (False, False)
    >>> _is_template_path("my.txt"), _is_template_path("~/x"), _is_template_path("a/b")
    (True, True, True)
    """
    if not isinstance(value, str) or not value:
        return False
    if value.endswith(".txt") or value.startswith(("~", ".", "/")):
        return True

    packaged = resources.files("cube_ray.prompts").joinpath(f"templates/{value}.txt")
    return ("/" in value or "\\" in value) and not packaged.is_file()


def read_paths(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, path) of every file a resolved config mapping reads.

    The corpus, the question file, QA files of systems, rubric files and prompt
    template files: the files whose content goes to engines and systems.
    """
    found: list[tuple[str, str]] = []
    for section in ("corpus", "questions"):
        node = data.get(section)
        if isinstance(node, dict) and isinstance(node.get("path"), str):
            found.append((f"{section}.path", node["path"]))
    for i, dim in enumerate(data.get("dimensions") or []):
        if isinstance(dim, dict) and isinstance(dim.get("rubric_file"), str):
            found.append((f"dimensions[{i}].rubric_file", dim["rubric_file"]))
    for i, system in enumerate(data.get("systems") or []):
        if isinstance(system, dict):
            found += [(f"systems[{i}].{k}", system[k]) for k in _system_paths(system)]
    prompts = data.get("prompts")
    if isinstance(prompts, dict):
        for kind, value in prompts.items():
            if kind != "language" and _is_template_path(value):
                found.append((f"prompts.{kind}", value))
    return found


def _outside_paths(data: dict[str, Any], base: Path) -> list[str]:
    """Files a config reads outside its folder and its ``data_dirs``.

    Symbolic links are followed, so a link beside the config that points at
    ``~/.ssh`` is outside too.
    """
    if data.get("allow_outside_paths") is True:
        return []
    dirs = data.get("data_dirs")
    roots = [base.resolve()]
    roots += [Path(d).resolve() for d in dirs or [] if isinstance(d, str)]
    problems = []
    for where, value in read_paths(data):
        target = Path(value).expanduser().resolve()
        if any(target == r or target.is_relative_to(r) for r in roots):
            continue
        allowed = ", ".join(str(r) for r in roots)
        problems.append(
            f"{where} is {value!r}, outside the folders this config may read "
            f"({allowed}): a file's content goes to the engines and systems, so "
            "a config reads only files beside it; move the file there, add its "
            "folder to data_dirs, or set allow_outside_paths: true if you wrote "
            "or trust this config"
        )
    return problems
