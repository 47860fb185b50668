"""A deterministic fake engine for unit tests and scale benchmarks.

Two modes:

* scripted: ``FakeEngine(script=[...])`` returns the scripted outputs in order
  (for ``generate`` and ``score`` alike, scores parsed strictly) and raises
  :class:`~cube_ray.errors.EngineError` when the script runs out, so a test
  that makes more calls than it expects fails loudly;
* hashed: without a script, outputs are a pure function of (seed, prompt), so
  reruns are reproducible and resume can be checked row by row.

It is never the default engine of a run; a config must ask for ``backend: fake``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence

from cube_ray.engines.base import (
    SCORE_CHOICES,
    Generation,
    SamplingParams,
    ScoreMode,
    ScoreResult,
)
from cube_ray.errors import EngineError

__all__ = ["FakeEngine"]


def _digest(seed: int, prompt: str) -> bytes:
    return hashlib.blake2b(f"{seed}\x00{prompt}".encode(), digest_size=16).digest()


class FakeEngine:
    """Deterministic engine; see the module docstring.

    Args:
        name: Name recorded in output tables.
        seed: Changes every hashed output.
        script: Outputs to return in order; raises when exhausted.
        latency_s: Sleep per call (a batch), like a GPU step.
        startup_s: Sleep on construction, like loading a model.
    """

    def __init__(
        self,
        name: str = "fake",
        *,
        seed: int = 0,
        script: Sequence[str] | None = None,
        latency_s: float = 0.0,
        startup_s: float = 0.0,
    ) -> None:
        if startup_s:
            time.sleep(startup_s)
        self.name = name
        self.seed = seed
        self._script = list(script) if script is not None else None
        self._latency_s = latency_s
        self.calls = 0
        """Number of prompts handled (generate and score)."""

    def _next_scripted(self) -> str:
        assert self._script is not None
        if not self._script:
            msg = f"FakeEngine {self.name!r}: script exhausted after {self.calls} calls"
            raise EngineError(msg)
        return self._script.pop(0)

    def generate(
        self, prompts: Sequence[str], *, sampling: SamplingParams
    ) -> list[Generation]:
        """Return one deterministic text per prompt."""
        if self._latency_s:
            time.sleep(self._latency_s)
        out = []
        for prompt in prompts:
            self.calls += 1
            if self._script is not None:
                text = self._next_scripted()
            else:
                text = f"{self.name} says {_digest(self.seed, prompt).hex()[:12]}"
            out.append(
                Generation(
                    text=text[: sampling.max_tokens * 8],
                    prompt_tokens=len(prompt),
                    completion_tokens=len(text),
                    latency_s=self._latency_s,
                )
            )
        return out

    def score(self, prompts: Sequence[str], *, mode: ScoreMode) -> list[ScoreResult]:
        """Return one deterministic score in 0..10 per prompt."""
        if self._latency_s:
            time.sleep(self._latency_s)
        out = []
        for prompt in prompts:
            self.calls += 1
            if self._script is not None:
                raw = self._next_scripted()
                stripped = raw.strip()
                if stripped in SCORE_CHOICES:
                    out.append(ScoreResult(float(stripped), raw=raw))
                else:
                    out.append(ScoreResult(None, status="parse_error", raw=raw))
                continue
            d = _digest(self.seed, prompt)
            if mode == "expected":
                score = round(d[0] / 255 * 10, 3)
            else:
                score = float(d[0] % 11)
            out.append(ScoreResult(score, raw=f"{score:g}", prompt_tokens=len(prompt)))
        return out

    def yes_no(
        self, prompts: Sequence[str], *, words: tuple[str, str], mode: ScoreMode
    ) -> list[ScoreResult]:
        """P(yes) per prompt: hashed (``expected``) or 0/1 (``argmax``)."""
        if self._latency_s:
            time.sleep(self._latency_s)
        out = []
        for prompt in prompts:
            self.calls += 1
            if self._script is not None:
                raw = self._next_scripted()
                said = raw.strip().casefold()
                yes, no = (w.casefold() for w in words)
                p = 1.0 if said == yes else 0.0 if said == no else None
                status = "ok" if p is not None else "parse_error"
                out.append(ScoreResult(p, status=status, raw=raw))
                continue
            p = round(_digest(self.seed, prompt)[1] / 255, 3)
            if mode == "argmax":
                p = 1.0 if p >= 0.5 else 0.0
            word = words[0] if p >= 0.5 else words[1]
            out.append(ScoreResult(p, raw=word, prompt_tokens=len(prompt)))
        return out

    def score_lines(
        self, prompts: Sequence[str], *, count: int, mode: ScoreMode
    ) -> list[list[ScoreResult]]:
        """``count`` deterministic scores in 0..10 per prompt."""
        if self._latency_s:
            time.sleep(self._latency_s)
        out = []
        for prompt in prompts:
            self.calls += 1
            d = _digest(self.seed, prompt)
            scores = [
                round(d[k % 16] / 255 * 10, 3)
                if mode == "expected"
                else float(d[k % 16] % 11)
                for k in range(count)
            ]
            raw = "\n".join(f"{x:g}" for x in scores)
            out.append(
                [ScoreResult(x, raw=raw, prompt_tokens=len(prompt)) for x in scores]
            )
        return out

    def close(self) -> None:
        """Nothing to release."""
