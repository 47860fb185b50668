"""Every environment variable cube_ray reads, in one place.

Secrets (API keys) are read by name through :func:`secret` and expanded into
``${NAME}`` placeholders by :func:`expand_env`, never logged. Which variables a
run config may read at all is its ``env_vars`` list (see
:meth:`cube_ray.config.RunConfig.env_uses`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from cube_ray.errors import ConfigError

__all__ = [
    "PLACEHOLDER",
    "EnvUse",
    "cache_dir",
    "expand_env",
    "placeholders",
    "prompt_key",
    "secret",
    "url_host",
]

PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""A ``${NAME}`` placeholder; group 1 is the variable name."""


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


def prompt_key() -> bytes | None:
    """``$CUBE_RAY_PROMPT_KEY``: a secret that keys the run's prompt-tag nonce.

    Without it the nonce is a hash of the config and the corpus, which whoever
    knows both could compute; with it, nobody without the key can.
    """
    value = secret("CUBE_RAY_PROMPT_KEY")
    return value.encode() if value else None


def placeholders(text: str) -> list[str]:
    """The variable names of the ``${NAME}`` placeholders in ``text``, in order.

    >>> placeholders("Bearer ${API_KEY} ${X}$Y")
    ['API_KEY', 'X']
    """
    return PLACEHOLDER.findall(text)


def expand_env(text: str, *, where: str) -> str:
    """Replace ``${NAME}`` by the environment variable NAME.

    Raises:
        ConfigError: Naming the variable (never a value) when it is unset.

    >>> import os; os.environ["CUBE_DOC_TEST"] = "s3cret"
    >>> expand_env("Bearer ${CUBE_DOC_TEST}", where="headers")
    'Bearer s3cret'
    """

    def repl(m: re.Match[str]) -> str:
        value = secret(m.group(1))
        if value is None:
            msg = (
                f"{where} refers to the environment variable {m.group(1)}, which is "
                f"not set; export {m.group(1)}=... before running"
            )
            raise ConfigError(msg)
        return value

    return PLACEHOLDER.sub(repl, text)


@dataclass(frozen=True)
class EnvUse:
    """One environment variable a run reads, and where its value goes."""

    name: str
    """The variable."""
    field: str
    """The config field that reads it, e.g. ``systems[rag].headers.Authorization``."""
    destination: str
    """Where the value is sent: ``host:port`` of a URL, or a local process."""


def url_host(url: str | None) -> str:
    """The ``host:port`` a URL sends to, as the run's env audit names it.

    >>> url_host("https://user:pw@api.example.com:8443/v1"), url_host(None)
    ('api.example.com:8443', '(no url)')
    >>> url_host("${RAG_URL}/ask")
    '(host from ${RAG_URL}/ask)'
    """
    if not url:
        return "(no url)"
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        netloc = ""
    netloc = netloc.rpartition("@")[2]
    if not netloc:
        return f"(host from {url})" if "${" in url else "(no host)"
    return netloc
