"""Every wait-and-try-again of twopc and its backends, with one policy: exponential backoff
with jitter, bounded by a number of attempts or a deadline.

Jitter spreads the retries of many tasks that failed at the same moment (a broker restart,
a database failover fails every task of a batch at once): without it they all come back
in step and meet the recovering server together. Each wait is drawn uniformly from the
upper ``jitter`` fraction of its backoff: with the default 0.5, a backoff of 1 s waits
0.5 to 1 s.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from twopc.errors import ConfigurationError, TwoPCError

__all__ = ["POLLING", "RetryPolicy", "call_with_retries", "retry_while", "wait_until"]

_log = logging.getLogger("twopc")

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff and jitter.

    ``max_attempts`` bounds the calls (1: no retry); retry ``n`` waits
    ``min(initial_backoff_seconds * multiplier ** (n - 1), max_backoff_seconds)``, less a
    random part of at most ``jitter`` of it (0: exactly that; 1: anything from 0 up).
    """

    max_attempts: int = 5
    initial_backoff_seconds: float = 0.2
    max_backoff_seconds: float = 10.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError("RetryPolicy.max_attempts must be at least 1")
        if self.initial_backoff_seconds < 0 or self.max_backoff_seconds < 0:
            raise ConfigurationError("RetryPolicy backoff times must not be negative")
        if self.multiplier < 1:
            raise ConfigurationError("RetryPolicy.multiplier must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ConfigurationError("RetryPolicy.jitter must be between 0 and 1")

    def ceiling(self, retry: int) -> float:
        """The backoff before retry number ``retry`` (1-based), before jitter."""
        delay = self.initial_backoff_seconds * self.multiplier ** (retry - 1)
        return float(min(delay, self.max_backoff_seconds))

    def backoff(self, retry: int, draw: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number ``retry`` (1-based), jitter included
        (``draw`` returns a number in [0, 1))."""
        ceiling = self.ceiling(retry)
        return ceiling * (1 - self.jitter * draw())

    def delays(self, draw: Callable[[], float] = random.random) -> Iterator[float]:
        """The waits before retry 1, 2, ... without end (for deadline-bounded loops)."""
        retry = 0
        while True:
            retry += 1
            yield self.backoff(retry, draw)


POLLING = RetryPolicy(
    max_attempts=1_000_000, initial_backoff_seconds=0.1, max_backoff_seconds=2.0, jitter=0.5
)
"""How twopc polls a state it waits for (a coordinator that loads, tasks that end, a lock
held by another attempt): from 0.1 s up to 2 s between looks, with jitter. The one place
these waits are configured."""


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


def retry_while(
    call: Callable[[], T],
    retryable: Callable[[Exception], bool],
    *,
    timeout: float,
    what: str,
    policy: RetryPolicy = POLLING,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Run ``call``; while it raises an error ``retryable`` accepts, try again after the
    policy's backoff, until ``timeout`` seconds have passed or its attempts are used up;
    then raise the last error. Other errors raise at once."""
    deadline = clock() + timeout
    attempts = 0
    delays = policy.delays()
    while True:
        attempts += 1
        try:
            return call()
        except Exception as exc:
            delay = next(delays)
            if not retryable(exc) or attempts >= policy.max_attempts or clock() + delay > deadline:
                raise
            _log.info("%s: %s; trying again in %.2fs", what, exc, delay)
        sleep(delay)


def wait_until(
    condition: Callable[[], bool],
    *,
    timeout: float,
    policy: RetryPolicy = POLLING,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Look at ``condition`` until it holds or ``timeout`` seconds have passed, waiting
    the policy's backoff between looks; whether it held."""
    deadline = clock() + timeout
    for delay in policy.delays():
        if condition():
            return True
        now = clock()
        if now >= deadline:
            return False
        sleep(min(delay, deadline - now))
    return False  # pragma: no cover - delays() never ends
