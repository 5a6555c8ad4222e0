"""Bounded retries with exponential backoff, for calls a sink marks retryable."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from twopc.errors import ConfigurationError, TwoPCError

__all__ = ["RetryPolicy", "call_with_retries"]

_log = logging.getLogger("twopc")

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff for commits that fail transiently."""

    max_attempts: int = 5
    initial_backoff_seconds: float = 0.2
    max_backoff_seconds: float = 10.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError("RetryPolicy.max_attempts must be at least 1")
        if self.initial_backoff_seconds < 0 or self.max_backoff_seconds < 0:
            raise ConfigurationError("RetryPolicy backoff times must not be negative")

    def backoff(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        delay = self.initial_backoff_seconds * self.multiplier ** (retry - 1)
        return float(min(delay, self.max_backoff_seconds))


def call_with_retries(
    policy: RetryPolicy,
    action: Callable[[], T],
    describe: str,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[T, int]:
    """Run ``action``; retry twopc errors marked retryable. Returns (result, retries used)."""
    retries = 0
    while True:
        try:
            return action(), retries
        except TwoPCError as exc:
            if not exc.retryable or retries + 1 >= policy.max_attempts:
                raise
            retries += 1
            delay = policy.backoff(retries)
            _log.warning("%s failed (%s); retry %d in %.2fs", describe, exc, retries, delay)
            sleep(delay)
