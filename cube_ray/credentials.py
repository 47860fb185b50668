"""Credentials in configs: which keys hold them, masking them, refusing literal ones.

Secrets come only from the environment: a ``${NAME}`` placeholder (HTTP
system ``url`` and ``headers``, vLLM engine ``env`` values) or an
``*api_key_env`` field naming the variable. So a config, its manifest copy and
the report never hold a secret; this module enforces that at config load
(:func:`literal_credential`) and masks whatever still looks like one wherever
a config is printed (:func:`mask`).
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit

from cube_ray.env import PLACEHOLDER, secret

__all__ = [
    "MASK",
    "MIN_SECRET_CHARS",
    "is_credential_env",
    "is_credential_key",
    "literal_credential",
    "literal_in_url",
    "mask",
    "recorded_secrets",
    "redact",
    "redact_all",
    "secret_forms",
    "secret_names",
    "secret_values",
]

MASK = "***"
"""What a masked value is printed as."""

_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "api-key", "x-api-key", "cookie"}
)
# Words that make a key (header, JSON field, query parameter) a credential.
# "tokens" (counts) and "tokenizer" are not; "*_env" keys name a variable.
_KEY_WORDS = re.compile(
    r"token(?!s|izer)|secret|passw(?:or)?d|api[-_]?key|apikey|cookie|credential"
    r"|private[-_]?key|access[-_]?key|signature|(?:^|[-_])(?:key|sig|nonce)$",
    re.IGNORECASE,
)
# TOKENIZERS_PARALLELISM and the like name settings, not credentials.
_ENV_WORDS = re.compile(
    r"TOKEN(?!IZER)|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE
)
_SCHEME = re.compile(r"^\s*(?:bearer|basic|token|apikey)?\s*$", re.IGNORECASE)
_BEARER = re.compile(
    r"\b(bearer|basic)(\s+)(?!\$\{)[A-Za-z0-9._~+/=-]{6,}", re.IGNORECASE
)
_USERINFO = re.compile(r"(://[^/@\s:]*:)(?!\$\{)[^/@\s]+@")


def is_credential_key(key: str) -> bool:
    """Whether a header, field or parameter named ``key`` holds a credential.

    >>> [is_credential_key(k) for k in ("Authorization", "X-API-Key", "HF_TOKEN")]
    [True, True, True]
    >>> [is_credential_key(k) for k in ("api_key_env", "max_tokens", "tokenizer")]
    [False, False, False]
    """
    if key.lower().endswith("_env"):
        return False
    return key.lower() in _HEADERS or _KEY_WORDS.search(key) is not None


def is_credential_env(name: str) -> bool:
    """Whether an environment variable called ``name`` holds a credential.

    >>> is_credential_env("HF_TOKEN"), is_credential_env("VLLM_CPU_KVCACHE_SPACE")
    (True, False)
    >>> is_credential_env("TOKENIZERS_PARALLELISM")
    False
    """
    return _ENV_WORDS.search(name) is not None or is_credential_key(name)


def _literal(value: str) -> bool:
    """True when ``value`` holds something besides placeholders and a scheme."""
    return _SCHEME.match(PLACEHOLDER.sub("", value)) is None


def literal_credential(key: str, value: Any, *, env: bool = False) -> bool:
    """Whether ``key: value`` writes a credential into the config literally.

    A value made of ``${NAME}`` placeholders (with an optional ``Bearer``) is
    not literal; neither is an empty one.

    >>> literal_credential("Authorization", "Bearer ${RAG_KEY}")
    False
    >>> literal_credential("Authorization", "Bearer abc123")
    True
    >>> literal_credential("HF_TOKEN", "hf_x", env=True)
    True
    """
    hit = is_credential_env(key) if env else is_credential_key(key)
    if not hit:
        return False
    if isinstance(value, str):
        return _literal(value)
    return value is not None and not isinstance(value, bool)


def literal_in_url(url: str) -> str | None:
    """The part of ``url`` that holds a literal credential, or None.

    >>> literal_in_url("https://u:pw@host/x"), literal_in_url("https://h/?key=abc")
    ('password', "query parameter 'key'")
    >>> literal_in_url("https://h/a?api_key=${K}&q=1") is None
    True
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.password and _literal(parts.password):
        return "password"
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if value and literal_credential(name, value):
            return f"query parameter {name!r}"
    return None


def _mask_text(text: str) -> str:
    text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    if "?" in text and "=" in text:
        head, _, query = text.partition("?")
        pairs = [p.partition("=") for p in query.split("&")]
        if any(is_credential_key(k) and v and _literal(v) for k, _, v in pairs):
            query = "&".join(
                f"{k}={MASK}"
                if is_credential_key(k) and v and _literal(v)
                else k + eq + v
                for k, eq, v in pairs
            )
            text = f"{head}?{query}"
    return text


def mask(value: Any, *, sensitive: bool = False) -> Any:
    """A copy of ``value`` (parsed JSON) with credential-looking values masked.

    Under a credential-looking key every value is masked except ``${NAME}``
    placeholders (they name a variable, not its value); elsewhere, ``Bearer``
    tokens, URL passwords and credential query parameters inside strings are.

    >>> mask({"headers": {"Authorization": "Bearer abc123", "X-Key": "${K}"}})
    {'headers': {'Authorization': '***', 'X-Key': '${K}'}}
    >>> mask({"url": "https://u:pw@h/?token=t0k&q=1", "max_tokens": 5})
    {'url': 'https://u:***@h/?token=***&q=1', 'max_tokens': 5}
    """
    if isinstance(value, Mapping):
        return {
            k: mask(v, sensitive=sensitive or is_credential_key(str(k)))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask(v, sensitive=sensitive) for v in value]
    if isinstance(value, str):
        if sensitive:
            return value if not _literal(value) else MASK
        return _mask_text(value)
    if sensitive and value is not None and not isinstance(value, bool):
        return MASK
    return value


_MIN_CORE = 8
"""Shortest base64 run of a key that is redacted (shorter ones match by chance)."""


def secret_forms(value: str) -> tuple[str, ...]:
    """The texts that give a secret away, longest first (see :func:`redact`)."""
    return _encoded_forms(value)


@functools.lru_cache(maxsize=16)
def _encoded_forms(secret: str) -> tuple[str, ...]:
    """The texts that give ``secret`` away: itself, URL- and base64-encoded.

    A base64 text that contains the key somewhere (``user:KEY``, ``Bearer
    KEY``) encodes it at one of three alignments; the run of characters that
    depends on the key's bytes alone is the same at that alignment whatever
    surrounds it, so each alignment's run is redacted (standard and URL-safe
    alphabets).

    >>> forms = _encoded_forms("sk-test-1234567890")
    >>> "sk-test-1234567890" in forms, "c2stdGVzdC0xMjM0NTY3ODkw" in forms
    (True, True)
    """
    raw = secret.encode()
    forms = {secret, quote(secret, safe=""), quote_plus(secret)}
    for shift in range(3):
        part = raw[shift:]
        part = part[: len(part) - len(part) % 3]
        core = base64.b64encode(part).decode()
        if len(core) >= _MIN_CORE:
            forms.add(core)
            forms.add(base64.urlsafe_b64encode(part).decode())
    # Longest first: a form that contains another is masked whole.
    return tuple(sorted(forms, key=len, reverse=True))


def redact(text: str, secret: str | None) -> str:
    """``text`` with ``secret`` masked, also in its base64 and URL-encoded forms.

    For raw texts a server sent back (an error body that echoes the request):
    the key itself, ``%``-encoded, and base64 of any text holding it.

    >>> key = "sk-live/abc+123=xyz"
    >>> redact(f"bad key {key}; {quote(key, safe='')}", key)
    'bad key ***; ***'
    >>> echo = base64.b64encode(b"Authorization: Bearer " + key.encode()).decode()
    >>> echo
    'QXV0aG9yaXphdGlvbjogQmVhcmVyIHNrLWxpdmUvYWJjKzEyMz14eXo='
    >>> redact(echo, key)  # at most a byte or two of each end stays
    'QXV0aG9yaXphdGlvbjogQmVhcmVyIHNr***eXo='
    >>> redact("nothing here", key), redact("x", None)
    ('nothing here', 'x')
    """
    if not secret:
        return text
    for form in _encoded_forms(secret):
        if form and form in text:
            text = text.replace(form, MASK)
    return text


MIN_SECRET_CHARS = 8
"""Shortest environment value redacted as a secret: a shorter one (``1``,
``true``) is no key, and would be masked wherever the text happens to hold it."""
_PROMPT_KEY = "CUBE_RAY_PROMPT_KEY"
_URL_SECRET = re.compile(
    r"(?:[?&]([^=&#\s]+)=|://[^/@\s]*:)\$\{([A-Za-z_][A-Za-z0-9_]*)\}"
)
"""A placeholder as a URL's query value (group 1 the parameter) or password."""


def secret_names(config: Mapping[str, Any]) -> list[str]:
    """The environment variables a run config reads as secrets.

    Those named by ``*api_key_env`` fields; the ``${NAME}`` placeholders under
    a credential key (``Authorization``, ``HF_TOKEN``), named like a
    credential (``RAG_API_KEY``), or in a URL's password or credential query
    parameter; and ``$CUBE_RAY_PROMPT_KEY``. Works on the config as loaded and
    as the manifest stores it (placeholders and ``*_env`` fields are kept).

    >>> secret_names({
    ...     "judges": {"j": {"api_key_env": "OPENAI_KEY", "model": "m"}},
    ...     "systems": [{"url": "https://h/a?key=${Q}&x=${RAG_HOST}",
    ...                  "headers": {"Authorization": "Bearer ${TOK}",
    ...                              "X-Trace": "${TRACE_ID}"}}],
    ... })
    ['CUBE_RAY_PROMPT_KEY', 'OPENAI_KEY', 'Q', 'TOK']
    """
    names: list[str] = [_PROMPT_KEY]

    def walk(value: Any, credential: bool) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                key = str(k)
                if key.endswith("api_key_env") and isinstance(v, str) and v:
                    names.append(v)
                walk(v, credential or is_credential_key(key))
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v, credential)
        elif isinstance(value, str):
            in_url = {
                m.group(2)
                for m in _URL_SECRET.finditer(value)
                if m.group(1) is None or is_credential_key(m.group(1))
            }
            for name in PLACEHOLDER.findall(value):
                if credential or is_credential_env(name) or name in in_url:
                    names.append(name)

    walk(config, False)
    return sorted(dict.fromkeys(names))


def secret_values(names: Sequence[str]) -> tuple[str, ...]:
    """The values of the variables ``names`` (:func:`secret_names`) set here.

    Values shorter than :data:`MIN_SECRET_CHARS` are left out.
    """
    values = {v for v in map(secret, names) if v and len(v) >= MIN_SECRET_CHARS}
    return tuple(sorted(values, key=len, reverse=True))


def redact_all(text: str, secrets: Sequence[str]) -> str:
    """``text`` with each of ``secrets`` masked (:func:`redact`).

    >>> redact_all("a sk-abcdef123 b hunter22", ["hunter22", "sk-abcdef123"])
    'a *** b ***'
    """
    for value in secrets:
        text = redact(text, value)
    return text


def recorded_secrets(config: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The secret values of a run, from its recorded config and this environment.

    For what cube_ray writes after the run (the report, the audit sheet): the
    variables the config ``manifest.json`` records reads as secrets
    (:func:`secret_names`), as set where it runs now.
    """
    return secret_values(secret_names(config or {}))
