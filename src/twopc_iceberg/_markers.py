"""The record, in the table itself, of which batches this sink committed.

Every commit writes it twice, atomically with the data (one catalog commit):

* in the summary of the batch's snapshot (``twopc.sink-id``, ``twopc.query-id``,
  ``twopc.batch-id``, ``twopc.partitions``), where anyone reading the table's history sees
  which batch a snapshot holds;
* in a table property per sink id and query, ``twopc.committed.<sink_id>.<query_id>``, with
  the newest batch and its committed partitions (JSON). Properties survive snapshot expiry,
  which removes old snapshots and their summaries: the property is what the sink reads first.

Both also hold the batch's source offsets and partition count (``twopc.source-offsets``,
``twopc.partition-count`` in the summary), for a query whose checkpoint is gone
(:func:`twopc.starting_offsets`).

Batches of one query commit in order, so "batch ``b`` or a later one" is committed once
the newest marker says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyiceberg.table import Table

from twopc import SourceOffsets

__all__ = [
    "NO_MARKER",
    "PROPERTY_PREFIX",
    "SUMMARY_BATCH",
    "SUMMARY_COUNT",
    "SUMMARY_OFFSETS",
    "SUMMARY_PARTITIONS",
    "SUMMARY_QUERY",
    "SUMMARY_SINK",
    "Marker",
    "added_files",
    "marker_property",
    "markers_of",
    "read_marker",
]

PROPERTY_PREFIX = "twopc.committed."
SUMMARY_SINK = "twopc.sink-id"
SUMMARY_QUERY = "twopc.query-id"
SUMMARY_BATCH = "twopc.batch-id"
SUMMARY_PARTITIONS = "twopc.partitions"
SUMMARY_OFFSETS = "twopc.source-offsets"
SUMMARY_COUNT = "twopc.partition-count"


@dataclass(frozen=True)
class Marker:
    """The newest committed batch of one query, with the attempt committed of each of its
    partitions (``-1`` where only a snapshot summary told, which keeps no attempts)."""

    batch_id: int
    attempts: Mapping[int, int]
    count: int = 0
    """How many partitions the batch has (0: not recorded)."""
    offsets: SourceOffsets | None = None
    """The source offsets the batch ends at, when the query's source is Kafka."""
    committed_at: float | None = None
    """When the newest commit of the batch landed (seconds since the epoch)."""

    @property
    def partitions(self) -> frozenset[int]:
        return frozenset(self.attempts)

    def holds(self, batch_id: int, partition: int) -> bool:
        """Whether partition ``partition`` of ``batch_id`` is committed."""
        return self.batch_id > batch_id or (
            self.batch_id == batch_id and partition in self.attempts
        )

    def committed_attempt(self, batch_id: int, partition: int) -> int | None:
        """The attempt committed of that partition, when this marker knows it."""
        if batch_id != self.batch_id:
            return None
        attempt = self.attempts.get(partition)
        return None if attempt is None or attempt < 0 else attempt

    def after(
        self,
        batch_id: int,
        attempts: Mapping[int, int],
        *,
        count: int = 0,
        offsets: SourceOffsets | None = None,
    ) -> Marker:
        """The marker once ``attempts`` (partition -> attempt) of ``batch_id`` commit too,
        of a batch of ``count`` partitions ending at ``offsets``."""
        now = time.time()
        if batch_id == self.batch_id:
            return Marker(
                batch_id,
                {**self.attempts, **attempts},
                count or self.count,
                offsets or self.offsets,
                now,
            )
        return Marker(batch_id, dict(attempts), count, offsets, now)

    def to_property(self) -> str:
        body: dict[str, object] = {
            "batch": self.batch_id,
            "attempts": {str(p): a for p, a in self.attempts.items()},
        }
        if self.count:
            body["count"] = self.count
        if self.offsets is not None:
            body["offsets"] = self.offsets.to_json()
        if self.committed_at is not None:
            body["at"] = self.committed_at
        return json.dumps(body, separators=(",", ":"), sort_keys=True)

    def summary(self, sink_id: str, query_id: str, partitions: Iterable[int]) -> dict[str, str]:
        """The snapshot summary of a commit of ``partitions`` of this marker's batch."""
        summary = {
            SUMMARY_SINK: sink_id,
            SUMMARY_QUERY: query_id,
            SUMMARY_BATCH: str(self.batch_id),
            SUMMARY_PARTITIONS: partition_ranges(partitions),
        }
        if self.count:
            summary[SUMMARY_COUNT] = str(self.count)
        if self.offsets is not None:
            summary[SUMMARY_OFFSETS] = json.dumps(self.offsets.to_json(), separators=(",", ":"))
        return summary


NO_MARKER = Marker(-1, {})
"""Nothing committed yet."""


def marker_property(sink_id: str, query_id: str) -> str:
    return f"{PROPERTY_PREFIX}{sink_id}.{query_id}"


def _parse_property(text: str) -> Marker | None:
    try:
        data = json.loads(text)
        attempts = {int(p): int(a) for p, a in dict(data["attempts"]).items()}
        offsets = SourceOffsets.from_json(data["offsets"]) if data.get("offsets") else None
        at = data.get("at")
        return Marker(
            int(data["batch"]),
            attempts,
            int(data.get("count", 0)),
            offsets,
            None if at is None else float(at),
        )
    except (ValueError, KeyError, TypeError):
        return None


def _from_summary(summary: Mapping[str, str], batch: int, at_ms: int) -> Marker:
    """The marker a snapshot summary tells (no attempts: ``-1`` each)."""
    offsets: SourceOffsets | None = None
    count = 0
    try:
        text = summary.get(SUMMARY_OFFSETS)
        offsets = SourceOffsets.from_json(json.loads(text)) if text else None
        count = int(summary.get(SUMMARY_COUNT) or 0)
    except (ValueError, KeyError, TypeError):
        offsets, count = None, 0
    partitions = _parse_partitions(summary.get(SUMMARY_PARTITIONS))
    return Marker(batch, partitions, count, offsets, at_ms / 1000)


def partition_ranges(partitions: Iterable[int]) -> str:
    """Partitions as runs, ``0-199`` or ``0-4,7,9-12``: every snapshot's summary carries
    them and every table metadata file lists every kept snapshot, so a 1,000-partition
    batch writes 5 bytes there instead of 3,890."""
    runs: list[str] = []
    ordered = sorted(set(partitions))
    start = 0
    for index in range(1, len(ordered) + 1):
        if index == len(ordered) or ordered[index] != ordered[index - 1] + 1:
            first, last = ordered[start], ordered[index - 1]
            runs.append(str(first) if first == last else f"{first}-{last}")
            start = index
    return ",".join(runs)


def _parse_partitions(text: str | None) -> dict[int, int]:
    """The partitions of a summary: runs (``0-199``) or, as twopc 0.2 wrote them, a list."""
    found: dict[int, int] = {}
    for part in (text or "").split(","):
        first, _, last = part.strip().partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            found.update(dict.fromkeys(range(int(first), int(last or first) + 1), -1))
    return found


def read_marker(table: Table, sink_id: str, query_id: str) -> Marker | None:
    """The newest batch of ``query_id`` this sink committed to ``table``, or ``None``."""
    return markers_of(table, sink_id).get(query_id)


def markers_of(table: Table, sink_id: str) -> dict[str, Marker]:
    """The newest committed batch of every query of ``sink_id``: from the table's
    properties, completed from the snapshot summaries (a property removed by hand)."""
    found: dict[str, Marker] = {}
    prefix = f"{PROPERTY_PREFIX}{sink_id}."
    properties: Mapping[str, str] = table.properties
    for key, value in properties.items():
        if key.startswith(prefix):
            marker = _parse_property(value)
            if marker is not None:
                found[key.removeprefix(prefix)] = marker
    for snapshot in table.snapshots():
        summary = snapshot.summary
        if summary is None or summary[SUMMARY_SINK] != sink_id:
            continue
        query_id, batch = summary[SUMMARY_QUERY], summary[SUMMARY_BATCH]
        if not query_id or batch is None or not str(batch).isdigit():
            continue
        seen = _from_summary(summary.additional_properties, int(batch), snapshot.timestamp_ms)
        known = found.get(query_id)
        if known is None or seen.batch_id > known.batch_id:
            found[query_id] = seen
        elif seen.batch_id == known.batch_id:
            found[query_id] = Marker(
                known.batch_id,
                {**seen.attempts, **known.attempts},
                known.count or seen.count,
                known.offsets or seen.offsets,
                known.committed_at or seen.committed_at,
            )
    return found


def added_files(table: Table, sink_id: str, query_id: str, batch_id: int) -> set[str] | None:
    """The data files the snapshots of that batch added (the paths), or ``None`` when no
    snapshot the table keeps names the batch (expired, or never committed)."""
    found: set[str] | None = None
    for snapshot in table.snapshots():
        summary = snapshot.summary
        if summary is None or summary[SUMMARY_SINK] != sink_id:
            continue
        if summary[SUMMARY_QUERY] != query_id or summary[SUMMARY_BATCH] != str(batch_id):
            continue
        found = found if found is not None else set()
        for manifest in snapshot.manifests(table.io):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if entry.snapshot_id == snapshot.snapshot_id:
                    found.add(entry.data_file.file_path)
    return found
