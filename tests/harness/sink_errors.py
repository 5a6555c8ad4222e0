"""Errors as a task of the core raises them, and their texts, for tests that call a sink
directly."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import twopc
from twopc._contract.boundary import leaving_sink


@contextmanager
def in_task(ctx: twopc.TaskContext) -> Iterator[None]:
    """Errors leave the block as they leave a task of the core: named by sink, batch and
    partition (sinks raise them without; tests that call a sink directly use this)."""
    with leaving_sink(ctx.sink_id, ctx.batch_id, ctx.partition):
        yield


def exception_texts(exc: BaseException) -> list[str]:
    """str and repr of the exception and of everything chained to it."""
    texts: list[str] = []
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        texts += [str(current), repr(current)]
        pending += [current.__cause__, current.__context__]
    return texts
