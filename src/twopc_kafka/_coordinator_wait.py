"""Waiting out a Kafka group coordinator that is not ready yet.

Right after a broker starts (or a coordinator moves), offset requests fail with
``COORDINATOR_LOAD_IN_PROGRESS``, ``COORDINATOR_NOT_AVAILABLE`` or ``NOT_COORDINATOR`` for
a few seconds. These are retriable by definition; failing the task on them fails the whole
micro-batch on Spark's ``local[*]``, which does not retry tasks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from twopc.retrying import retry_while

__all__ = ["COORDINATOR_BUSY", "retry_while_coordinator_busy"]

T = TypeVar("T")

COORDINATOR_BUSY = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
    }
)


def retry_while_coordinator_busy(
    call: Callable[[], T],
    timeout: float,
    what: str,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Run ``call``; while it raises a coordinator-busy error, retry with twopc's backoff
    (:data:`twopc.retrying.POLLING`: exponential, with jitter) until ``timeout`` seconds
    have passed, then raise the last error. Other errors raise at once."""
    return retry_while(
        call, _coordinator_busy, timeout=timeout, what=what, sleep=sleep, clock=clock
    )


def _coordinator_busy(exc: Exception) -> bool:
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return (
        isinstance(exc, KafkaException) and error is not None and error.code() in COORDINATOR_BUSY
    )
