"""The environment variables a config names are set (values never shown)."""

from __future__ import annotations

import os

from cube_ray.config import RunConfig
from cube_ray.engines.config import OpenAIHttpEngineConfig
from cube_ray.errors import ClusterError
from cube_ray.systems.kinds import system_kind

__all__ = ["check_env"]


def _env_names(config: RunConfig) -> list[tuple[str, str]]:
    """(config path, variable) of every environment variable the config names."""
    out = []
    engines = [
        ("generator", config.generator),
        *((f"judges.{n}", e) for n, e in config.judges.items()),
    ]
    for where, engine in engines:
        if isinstance(engine, OpenAIHttpEngineConfig) and engine.api_key_env:
            out.append((f"{where}.api_key_env", engine.api_key_env))
    for s in config.systems:
        out += [(u.field, u.name) for u in system_kind(s).env_uses(s)]
    return out


def check_env(config: RunConfig) -> None:
    """Every environment variable the config names is set (values never shown).

    Raises:
        ClusterError: Listing each unset variable and the field naming it.
    """
    unset = [(w, n) for w, n in _env_names(config) if not os.environ.get(n)]
    if unset:
        items = "\n  - ".join(f"{w} names {n}, which is not set" for w, n in unset)
        raise ClusterError(
            "environment variables are missing:\n  - " + items + "\n"
            "Fix: export them where the driver runs; under ray job submit pass "
            "--runtime-env-json '{\"env_vars\": {...}}' so every worker gets them"
        )
