"""The commit calls a sink's coordinator retried, counted for the batches' metrics.

A leaf the coordinator's parts share: the decider counts each retry as it waits for it,
and whichever batch reports next takes the count, so retries of a commit that gave up show
in the failed batch's metrics, not only those of a commit that succeeded.
"""

from __future__ import annotations

import threading

__all__ = ["RetryTally"]


class RetryTally:
    """Retries counted since the last :meth:`take`. Thread-safe: phase 2 may commit from
    several threads, and a background commit runs beside the next batch."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self._count += 1

    def take(self) -> int:
        """The retries since the last call; the count starts again at 0."""
        with self._lock:
            count, self._count = self._count, 0
        return count
