"""The source offsets the SQL sinks keep in their marker rows, for a query whose checkpoint
is gone (:func:`twopc.starting_offsets`).

Every marker row also stores the batch's partition count (``partitions``), so that a batch
committed in some partitions only is told from a whole one; partition 0's row stores the
batch's offsets (``source_offsets``, JSON), once per batch rather than once per partition.
Both columns are nullable: a marker table of an earlier version gains them on first use,
and a row written without them (a query whose source is not Kafka) holds NULL.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from twopc import SourceOffsets, StoredBatch, TaskContext

__all__ = [
    "OFFSET_COLUMNS",
    "MarkerOffsets",
    "MarkerRow",
    "marker_offsets",
    "stored_batches",
    "warn_no_offset_columns",
]

_log = logging.getLogger("twopc.jdbc")
_WARNED: set[str] = set()

OFFSET_COLUMNS = ("partitions", "source_offsets")
"""The marker table's columns for the source offsets, added to a table of an earlier
version."""


@dataclass(frozen=True)
class MarkerOffsets:
    """What one marker row stores of the source: the batch's partition count, and the
    offsets as JSON (partition 0's row only; ``None`` in the others)."""

    partitions: int | None
    source_offsets: str | None


def marker_offsets(ctx: TaskContext) -> MarkerOffsets:
    """What the marker row of ``ctx``'s partition stores."""
    offsets = ctx.source_offsets
    text = (
        json.dumps(offsets.to_json(), sort_keys=True, separators=(",", ":"))
        if offsets is not None and ctx.partition == 0
        else None
    )
    return MarkerOffsets(ctx.partitions or None, text)


@dataclass(frozen=True)
class MarkerRow:
    """The newest marker row of one partition of one query."""

    query_id: str
    partition: int
    batch_id: int
    partitions: int | None
    source_offsets: str | None
    committed_at: float | None


def stored_batches(rows: Sequence[MarkerRow]) -> list[StoredBatch]:
    """The rows grouped by query and batch, as :meth:`~twopc.KeepsSourceOffsets.stored_offsets`
    returns them."""
    grouped: dict[tuple[str, int], list[MarkerRow]] = {}
    for row in rows:
        grouped.setdefault((row.query_id, row.batch_id), []).append(row)
    found = []
    for (query_id, batch_id), same in sorted(grouped.items()):
        text = next((r.source_offsets for r in same if r.source_offsets), None)
        found.append(
            StoredBatch(
                query_id,
                batch_id,
                frozenset(r.partition for r in same),
                max((r.partitions or 0) for r in same),
                SourceOffsets.from_json(json.loads(text)) if text else None,
                max((r.committed_at or 0.0) for r in same) or None,
            )
        )
    return found


def warn_no_offset_columns(table: str, reason: str, statement: str) -> None:
    """Once per table and process: the marker table lacks the offset columns and the
    sink's user may not add them, so batches commit without their source offsets."""
    if table in _WARNED:
        return
    _WARNED.add(table)
    _log.warning(
        "marker table %s was created by twopc 0.2 or earlier and has no source offset "
        "columns, which its user may not add (%s): batches commit without their source "
        "offsets, so twopc.starting_offsets cannot restart this query from the table. Have "
        "the table's owner run: %s;",
        table,
        reason,
        statement,
    )
