"""Token and request counters of one engine, shared by its concurrent requests."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Usage", "UsageMeter"]


@dataclass
class Usage:
    """Token and request counters of one engine (all calls so far)."""

    requests: int = 0
    """HTTP requests sent, retries included."""
    retries: int = 0
    """Requests that were retries."""
    prompt_tokens: int = 0
    """Sum of ``usage.prompt_tokens`` reported by the server."""
    completion_tokens: int = 0
    """Sum of ``usage.completion_tokens`` reported by the server."""
    statuses: dict[str, int] = field(default_factory=dict)
    """How many rows ended with each status."""


class UsageMeter:
    """Adds to one :class:`Usage` under a lock (batches may run on helper threads).

    Examples:
        >>> meter = UsageMeter()
        >>> meter.request(attempt=0); meter.request(attempt=1)
        >>> meter.tokens(prompt=3, completion=None)
        >>> meter.statuses(["ok", "timeout", "ok"])
        >>> meter.usage
        Usage(requests=2, retries=1, prompt_tokens=3, completion_tokens=0, statuses={'ok': 2, 'timeout': 1})
    """  # noqa: E501

    def __init__(self) -> None:
        self.usage = Usage()
        self._lock = threading.Lock()

    def request(self, *, attempt: int) -> None:
        """One request sent; ``attempt`` > 0 makes it a retry."""
        with self._lock:
            self.usage.requests += 1
            self.usage.retries += attempt > 0

    def tokens(self, *, prompt: int | None, completion: int | None) -> None:
        """Tokens a server reported for one reply."""
        with self._lock:
            self.usage.prompt_tokens += prompt or 0
            self.usage.completion_tokens += completion or 0

    def statuses(self, statuses: Sequence[str]) -> None:
        """The final status of each row of a batch."""
        with self._lock:
            for status in statuses:
                self.usage.statuses[status] = self.usage.statuses.get(status, 0) + 1
