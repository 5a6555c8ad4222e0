"""Local-engine streams whose offsets look like a Kafka source's, for the tests of the
source offsets each target stores (``twopc.starting_offsets``): batches of two partitions,
partition ``p`` of every batch being partition ``p`` of :data:`TOPIC`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from twopc import local
from twopc.faults import FaultPlan

__all__ = ["TOPIC", "batches", "run_stream"]

TOPIC = "orders"


def batches(count: int, *, partitions: int = 2, rows: int = 3, key: bool = False) -> list[Any]:
    """``count`` batches of ``partitions`` partitions of ``rows`` ids, numbered through from
    0; ``key``: with the id as a string ``key`` column (a Kafka sink's record key)."""
    found, next_id = [], 0
    for _ in range(count):
        batch = []
        for _ in range(partitions):
            ids = pa.array(range(next_id, next_id + rows), pa.int64())
            columns = {"key": pa.array([str(i) for i in ids.to_pylist()])} if key else {}
            batch.append(pa.table({**columns, "id": ids}))
            next_id += rows
        found.append(batch)
    return found


def run_stream(
    sink: Any,
    sink_id: str,
    checkpoint: Path,
    data: list[Any],
    *,
    faults: str | None = None,
    start: dict[str, int] | None = None,
    commit_log: str | None = None,
) -> None:
    """Run ``data`` through ``sink`` on a checkpoint (a new one starting at ``start``,
    ``{"0": offset, ...}`` as ``twopc.starting_offsets`` gives it for :data:`TOPIC`)."""
    stream = local.LocalStream(
        str(checkpoint),
        data,
        kafka_topic=TOPIC,
        starting_offsets={int(p): o for p, o in (start or {}).items()},
    )
    writer = local.foreach_batch(
        sink,
        sink_id,
        commit_log=commit_log,
        faults=FaultPlan.parse(faults) if faults else None,
        processes=False,
    )
    stream.run(writer)
