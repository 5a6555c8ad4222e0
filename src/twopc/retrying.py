"""Trying again, the one way twopc does it: exponential backoff with jitter, bounded by
attempts or a deadline (see :class:`RetryPolicy`). For plugins whose targets make them wait
(a coordinator that loads, a lock another attempt holds)::

    from twopc.retrying import retry_while

    offsets = retry_while(
        lambda: consumer.committed(partitions),
        retryable=lambda exc: is_coordinator_loading(exc),
        timeout=30.0,
        what="reading the marker offsets",
    )

:data:`POLLING` is the policy of twopc's own waits; pass another ``policy`` to change a
loop's pace.
"""

from twopc._contract.retry import POLLING, RetryPolicy, retry_while, wait_until

__all__ = ["POLLING", "RetryPolicy", "retry_while", "wait_until"]
