"""Where errors leave a sink: the one place that says which sink, batch and partition.

Sinks raise twopc errors without a location, or any other exception. Every call the core
makes into a sink runs inside :func:`leaving_sink`, which fills in the location of a twopc
error (keeping its class, so retryable stays retryable) and turns any other exception into
the given twopc error class, naming the exception's type.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from twopc.errors import SinkError, TwoPCError

__all__ = ["describe_exception", "leaving_sink"]


@contextmanager
def leaving_sink(
    sink_id: str,
    batch_id: int | None = None,
    partition: int | None = None,
    *,
    wrap: type[TwoPCError] = SinkError,
    what: str = "",
) -> Iterator[None]:
    """Stamp errors leaving the ``with`` block with their location; ``what`` prefixes the
    cause of a foreign exception (``"commit failed: "``)."""
    try:
        yield
    except TwoPCError as exc:
        exc.at(sink_id=sink_id, batch_id=batch_id, partition=partition)
        raise
    except Exception as exc:
        raise wrap(
            f"{what}{describe_exception(exc)}",
            sink_id=sink_id,
            batch_id=batch_id,
            partition=partition,
        ) from exc


def describe_exception(exc: BaseException) -> str:
    """A foreign exception as ``Type: message`` (a twopc error as its own message). A
    client's bare timeout carries no message: say what it means."""
    if isinstance(exc, TwoPCError):
        return str(exc)
    text = str(exc).strip()
    if not text and isinstance(exc, TimeoutError):
        text = "no answer in time (is the target stalled or unreachable?)"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
