"""A judge that scores its own model's answers (CUBE_METHOD.md section 12).

Judges prefer text their own model wrote. When a judge's model is the
generator's (which writes the bounds and the built-in RAG's answers) or a
system's declared model (``systems[].model``), the judge gets the flag
"judges its own model's answers".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["OWN_MODEL", "engine_models", "model_key", "own_model_flags"]

OWN_MODEL = "judges its own model's answers"
"""Flag of a judge whose model also wrote answers it scores."""


def model_key(name: str) -> str:
    """A model's name for comparison: its last path part, lower case, no suffix.

    >>> model_key("/models/Qwen2.5-7B-Instruct/") == model_key("qwen2.5-7b-instruct")
    True
    >>> model_key("Qwen/Qwen2.5-7B-Instruct-GGUF") == model_key("qwen2.5-7b-instruct")
    True
    >>> model_key("glm-4-9b-chat") == model_key("qwen2.5-7b-instruct")
    False
    """
    last = name.rstrip("/").rsplit("/", 1)[-1].lower()
    return re.sub(r"[-_.](gguf|awq|gptq|fp8|int4|int8)$", "", last)


def engine_models(engine: Any) -> set[str]:
    """The model keys an engine config names (``model``, ``served_name``)."""
    names = [getattr(engine, "model", None), getattr(engine, "served_name", None)]
    return {model_key(n) for n in names if isinstance(n, str) and n}


def own_model_flags(
    judges: Mapping[str, Any],
    generator: Any,
    systems: Mapping[str, str | None],
) -> list[dict[str, Any]]:
    """One flag per (judge, writer) that share a model.

    Args:
        judges: Judge name -> engine config.
        generator: The generator's engine config.
        systems: System name -> declared model (``systems[].model``) or None.

    >>> from types import SimpleNamespace as S
    >>> qwen = S(model="/models/Qwen2.5-7B-Instruct", served_name=None)
    >>> flags = own_model_flags({"q": qwen, "g": S(model="glm-4-9b-chat")}, qwen,
    ...                         {"rag": "qwen2.5-7b-instruct", "rag@x": None})
    >>> [(f["judge"], f["system"]) for f in flags]
    [('q', 'generator'), ('q', 'rag')]
    """
    writers = {"generator": engine_models(generator)}
    writers |= {s: {model_key(m)} for s, m in systems.items() if m}
    out = []
    for judge, engine in judges.items():
        mine = engine_models(engine)
        for writer, models in writers.items():
            shared = sorted(mine & models)
            if shared:
                out.append(
                    {
                        "flag": OWN_MODEL,
                        "judge": judge,
                        "system": writer,
                        "model": shared[0],
                    }
                )
    return out
