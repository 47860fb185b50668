"""Every environment variable cube_ray reads, in one place.

Secrets (API keys) are read by name through :func:`secret`, never logged.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir", "secret"]


def cache_dir() -> Path:
    """Root of cube_ray's caches (converted models, tokenizers).

    ``$CUBE_RAY_CACHE``, else ``$XDG_CACHE_HOME/cube_ray``, else
    ``~/.cache/cube_ray``.
    """
    explicit = os.environ.get("CUBE_RAY_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "cube_ray"


def secret(name: str) -> str | None:
    """The value of the environment variable ``name`` (an API key), or None."""
    value = os.environ.get(name)
    return value or None
