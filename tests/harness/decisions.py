"""Committables and decisions of a files-like sink ("orders"), made up for the commit log's
tests (the log stores them; nothing is written)."""

from __future__ import annotations

from twopc import Committable
from twopc._coordination.commit_log import Decision


def committable(query: str, batch: int, partition: int, attempt: int = 0) -> Committable:
    return Committable(
        "orders",
        query,
        batch,
        partition,
        attempt,
        payload={"staging": f"s/{query}/{batch}/{partition}-{attempt}", "files": []},
    )


def decision(query: str, batch: int, partitions: int = 2) -> Decision:
    return Decision(
        "orders", query, batch, tuple(committable(query, batch, p) for p in range(partitions))
    )
