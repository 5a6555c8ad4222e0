"""Source progress: the Kafka offsets each micro-batch consumed, published where lag tools
look (a consumer group), committed with the batch's output where the target allows it.

Spark keeps its Kafka source offsets only in the checkpoint (``<checkpoint>/offsets/N``,
written before batch N runs). twopc reads them from there and hands them to a
:class:`ProgressReporter` (``twopc_kafka.ConsumerGroup``):

* a sink with the :class:`CommitsProgressInTask` role (the Kafka sink in ``atomic`` mode,
  on the group's cluster) commits them in the batch's own transaction, so the group's
  offsets and a ``read_committed`` reader of the output always agree;
* every other sink's batch is first committed, then the group is advanced from the driver
  (also when a decided batch is finished after a crash, or replayed).

The group is progress *reporting*: twopc never reads it to decide what to write. Spark's
checkpoint stays the source of truth, so a group that is ahead, behind or deleted changes
nothing in the output.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twopc.storage import filesystem_for, join

__all__ = [
    "CommitsProgressInTask",
    "GroupProgress",
    "ProgressInTask",
    "ProgressReporter",
    "SourceOffsets",
    "kafka_offsets_in",
    "kafka_offsets_of",
]

_log = logging.getLogger("twopc")


@dataclass(frozen=True)
class SourceOffsets:
    """The Kafka offsets a micro-batch ends at: topic → partition → the next offset to read
    (what a consumer group commits). Read from the checkpoint's offset log."""

    batch_id: int
    topics: Mapping[str, Mapping[int, int]]

    def positions(self) -> list[tuple[str, int, int]]:
        """``(topic, partition, offset)`` triples, sorted."""
        return sorted(
            (topic, partition, offset)
            for topic, partitions in self.topics.items()
            for partition, offset in partitions.items()
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "topics": {t: {str(p): o for p, o in ps.items()} for t, ps in self.topics.items()},
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> SourceOffsets:
        topics = {
            str(t): {int(p): int(o) for p, o in ps.items()} for t, ps in body["topics"].items()
        }
        return cls(int(body["batch_id"]), topics)


@dataclass(frozen=True)
class ProgressInTask:
    """What a task needs to commit a batch's source offsets in its own transaction."""

    group_id: str
    offsets: SourceOffsets
    metadata: str
    """The offset metadata that tells the group's offsets as this sink's (see
    :meth:`ProgressReporter.offset_metadata`)."""


@dataclass(frozen=True)
class GroupProgress:
    """Where the group stands against the source: per ``(topic, partition)``, its
    committed offset (``None``: none) and the partition's end offset."""

    group_id: str
    committed: Mapping[tuple[str, int], int | None]
    end: Mapping[tuple[str, int], int]

    @property
    def lag(self) -> int | None:
        """Records between the group's offsets and the partitions' ends, summed; ``None``
        when a partition has no committed offset."""
        total = 0
        for key, end in self.end.items():
            committed = self.committed.get(key)
            if committed is None:
                return None
            total += max(end - committed, 0)
        return total

    def to_json(self) -> dict[str, Any]:
        keys = sorted(self.end)
        return {
            "group": self.group_id,
            "lag": self.lag,
            "partitions": [
                {"topic": t, "partition": p, "committed": self.committed.get((t, p)), "end": e}
                for (t, p), e in ((k, self.end[k]) for k in keys)
            ],
        }


class ProgressReporter(ABC):
    """Publishes a query's source offsets where lag tools read them.

    Implementations: ``twopc_kafka.ConsumerGroup``; a plugin provides one with a
    :class:`~twopc.ProgressSpec`. One reporter serves one sink id; it refuses a group that
    another application (or another twopc sink) uses.
    """

    group_id: str

    @abstractmethod
    def check(self, sink_id: str) -> None:
        """Refuse (:class:`~twopc.ConfigurationError`) a group that is not this sink's:
        one with active members, or with offsets another application committed."""

    @abstractmethod
    def publish(self, offsets: SourceOffsets, sink_id: str, query_id: str) -> None:
        """Set the group's offsets to ``offsets``, after the batch committed. Idempotent
        (a finished batch may be published again after a crash)."""

    @abstractmethod
    def progress(self, offsets: SourceOffsets) -> GroupProgress:
        """The group's committed offsets and the end offsets of ``offsets``' partitions."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """What to keep in the commit log to find the group again (no secrets). Its
        ``kind`` names the :class:`~twopc.ProgressSpec` whose factory builds the reporter
        again from this mapping (``twopc status`` does)."""

    def offset_metadata(self, sink_id: str, query_id: str, batch_id: int) -> str:
        """The metadata committed with every offset: whose offsets they are."""
        return f"twopc sink={sink_id} query={query_id} batch={batch_id}"


class CommitsProgressInTask(ABC):
    """Sink role: the task's own transaction can carry the batch's source offsets (a Kafka
    transaction on the group's cluster, written by one task for the whole batch)."""

    @abstractmethod
    def commits_progress(self, reporter: ProgressReporter) -> bool:
        """Whether this sink, as configured, commits ``reporter``'s offsets in the batch's
        transaction (``TaskContext.progress`` then carries them)."""


def kafka_offsets_of(
    checkpoint_root: str, batch_id: int, storage_options: dict[str, Any] | None = None
) -> SourceOffsets | None:
    """The Kafka offsets batch ``batch_id`` ends at, from ``<checkpoint>/offsets/<batch>``
    (after the version and metadata lines, one line per source; a Kafka source's is
    ``{"topic": {"partition": offset}}``). ``None`` when the file cannot be read or no
    source is a Kafka source. A partition read by two sources keeps the smaller offset."""
    try:
        fs, root = filesystem_for(checkpoint_root, storage_options)
        text = fs.cat_file(join(root, "offsets", str(batch_id))).decode()
    except Exception:
        _log.debug("no offsets for batch %d in %s", batch_id, checkpoint_root, exc_info=True)
        return None
    return kafka_offsets_in(text, batch_id)


def kafka_offsets_in(text: str, batch_id: int) -> SourceOffsets | None:
    """:func:`kafka_offsets_of` for the text of an offset log entry already read."""
    topics: dict[str, dict[int, int]] = {}
    for line in text.splitlines()[2:]:
        for topic, partitions in _kafka_offsets_in(line).items():
            known = topics.setdefault(topic, {})
            for partition, offset in partitions.items():
                known[partition] = min(offset, known.get(partition, offset))
    return SourceOffsets(batch_id, topics) if topics else None


def _kafka_offsets_in(line: str) -> dict[str, dict[int, int]]:
    """A source's offsets if they have the Kafka source's shape, else nothing."""
    try:
        body = json.loads(line)
    except ValueError:
        return {}
    if not isinstance(body, dict) or not body:
        return {}
    found: dict[str, dict[int, int]] = {}
    for topic, partitions in body.items():
        if not isinstance(partitions, dict) or not partitions:
            return {}
        try:
            found[str(topic)] = {
                int(p): int(o)
                for p, o in partitions.items()
                if isinstance(o, int) and not isinstance(o, bool)
            }
        except ValueError:
            return {}
        if len(found[str(topic)]) != len(partitions):
            return {}
    return found
