"""Where errors cross a boundary: the one place that says which sink, batch and partition.

Two boundaries, one rule (fill in the location of a twopc error, keeping its class, so
retryable stays retryable; turn any other exception into a twopc error that names its type):

* :func:`leaving_sink`: every call the core makes into a sink. Sinks raise twopc errors
  without a location, or any other exception.
* :func:`leaving_twopc`: every entry point (``foreach_batch``, ``write_batch``,
  ``format("twopc")``'s commit and abort). What the core itself raises, or lets through
  from the commit log's storage, leaves twopc as a twopc error naming the sink and batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from twopc.errors import SinkError, TwoPCError

__all__ = ["as_twopc_error", "describe_exception", "leaving_sink", "leaving_twopc"]


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


@contextmanager
def leaving_twopc(sink_id: str, batch_id: int | None = None) -> Iterator[None]:
    """The outer boundary of an entry point: every exception leaving the ``with`` block
    is a twopc error that names the sink and the batch (see :func:`as_twopc_error`)."""
    try:
        yield
    except Exception as exc:
        error = as_twopc_error(exc, sink_id, batch_id)
        if error is exc:
            raise
        raise error from exc


def as_twopc_error(exc: Exception, sink_id: str, batch_id: int | None = None) -> TwoPCError:
    """``exc`` as the error an entry point fails with: a twopc error, stamped with the sink
    and the batch, or, for anything else (e.g. the commit log's storage failing), a
    :class:`~twopc.TwoPCError` that names the exception's type and chains it."""
    if isinstance(exc, TwoPCError):
        return exc.at(sink_id=sink_id, batch_id=batch_id)
    return TwoPCError(describe_exception(exc), sink_id=sink_id, batch_id=batch_id)


def describe_exception(exc: BaseException) -> str:
    """A foreign exception as ``Type: message`` (a twopc error as its own message). A
    client's bare timeout carries no message: say what it means."""
    if isinstance(exc, TwoPCError):
        return str(exc)
    text = str(exc).strip()
    if not text and isinstance(exc, TimeoutError):
        text = "no answer in time (is the target stalled or unreachable?)"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
