"""A durable copy of the Kafka sink's commit markers, in a compacted topic.

The markers themselves are consumer-group offsets, which the broker deletes
``offsets.retention.minutes`` after their last commit (7 days by default). With
``marker_log_topic`` set, every transaction also produces one record to that topic,
keyed by the marker group's name, whose value names the batch. It commits atomically with
the data and the offset, and log compaction keeps the newest record per key for as long
as the topic lives. When a restart finds marker groups gone, the driver reads the log and
commits each group's offset again, before any task reads it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

# confluent-kafka's own type hints do not declare these re-exports
from confluent_kafka.admin import ConfigResource, NewTopic  # type: ignore[attr-defined]  # isort: skip

from twopc import Footprint, PermanentSinkError, RecoveryScope, TargetMarker
from twopc_kafka._clients import KafkaClients
from twopc_kafka._markers import METADATA_LIMIT

if TYPE_CHECKING:
    from twopc_kafka._markers import Markers

__all__ = [
    "LoggedMarker",
    "MarkerLog",
    "ensure_marker_log",
    "marker_record",
    "read_marker_log",
    "restore",
]

_log = logging.getLogger("twopc.kafka")

_FORMAT = 1


@dataclass(frozen=True)
class LoggedMarker:
    """The newest batch the marker log holds for one marker group."""

    group: str
    query_id: str
    partition: int
    batch_id: int
    metadata: str | None = None
    """The marker offset's metadata as the transaction committed it (the batch's partition
    count, time and, in partition 0's, its source offsets); ``None`` in records of twopc
    before 0.3.0."""


def marker_record(
    group: str, query_id: str, partition: int, batch_id: int, metadata: str | None = None
) -> tuple[bytes, bytes]:
    """Key and value of the log record a transaction commits with its marker offset, whose
    ``metadata`` it keeps too, so that a restored marker stores what the original did."""
    value: dict[str, Any] = {
        "format": _FORMAT,
        "query_id": query_id,
        "partition": partition,
        "batch_id": batch_id,
    }
    if metadata:
        value["metadata"] = metadata
    return group.encode(), json.dumps(value, separators=(",", ":")).encode()


def ensure_marker_log(admin: AdminClient, topic: str, timeout: float) -> bool:
    """Create the compacted log topic when it does not exist, and check that an existing
    one is compacted and never deleted by time or size (else its markers expire too).

    Returns True when the topic was created. Raises ValueError on a topic whose cleanup
    policy would delete markers, KafkaException when the broker refuses."""
    metadata = admin.list_topics(timeout=timeout)
    if topic not in metadata.topics:
        new = NewTopic(
            topic,
            num_partitions=1,
            replication_factor=-1,  # the broker's default.replication.factor
            config={"cleanup.policy": "compact"},
        )
        future = admin.create_topics([new], request_timeout=timeout)[topic]
        try:
            future.result(timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            return False
        _log.info("created the compacted marker log topic %r", topic)
        return True
    partitions = len(metadata.topics[topic].partitions)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout)
    policy = str(entries["cleanup.policy"].value)
    if {p.strip() for p in policy.split(",")} != {"compact"}:
        raise ValueError(
            f"marker_log_topic {topic!r} has cleanup.policy={policy}: the broker would delete "
            "its markers by age or size. Use a topic with cleanup.policy=compact only "
            f"(kafka-configs --alter --entity-type topics --entity-name {topic} "
            "--add-config cleanup.policy=compact), or another name and let twopc create it"
        )
    if partitions != 1:
        raise ValueError(
            f"marker_log_topic {topic!r} has {partitions} partitions; it needs exactly one "
            "(twopc writes and reads partition 0 only)"
        )
    return False


def read_marker_log(
    config: Mapping[str, Any], topic: str, key_prefix: str, timeout: float
) -> dict[str, LoggedMarker]:
    """The newest marker per group whose name starts with ``key_prefix``, read with
    ``read_committed`` from the start of the topic up to its last stable offset.

    Raises ValueError on a record of another format than this version writes."""
    consumer = Consumer(
        {
            **config,
            "group.id": f"{key_prefix}marker-log-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    found: dict[str, LoggedMarker] = {}
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout)
        if high <= low:
            return found
        consumer.assign([TopicPartition(topic, 0, low)])
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"reading the marker log {topic!r} did not reach its end within {timeout}s"
                )
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return found
                raise KafkaException(error)
            marker = _parse(msg.key(), msg.value(), key_prefix)
            if marker is not None:
                previous = found.get(marker.group)
                if previous is None or marker.batch_id >= previous.batch_id:
                    found[marker.group] = marker
    finally:
        consumer.close()


def _parse(key: bytes | None, value: bytes | None, key_prefix: str) -> LoggedMarker | None:
    if not key or not value:
        return None  # a tombstone, or a record twopc did not write
    group = key.decode(errors="replace")
    if not group.startswith(key_prefix):
        return None
    try:
        body = json.loads(value)
        version = int(body.get("format", 0))
        kept = body.get("metadata")
        marker = LoggedMarker(
            group,
            str(body["query_id"]),
            int(body["partition"]),
            int(body["batch_id"]),
            kept if isinstance(kept, str) else None,
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        _log.warning("marker log record %r is not a twopc marker; ignored", group)
        return None
    if version != _FORMAT:
        # never guess at a marker of another format: a misread batch id skips or rewrites data
        raise ValueError(
            f"marker log record {group!r} has format {version}, this twopc reads format "
            f"{_FORMAT} only; run the twopc version that wrote it (or a newer one)"
        )
    return marker


def restore(
    admin: AdminClient, marker_topic: str, markers: list[LoggedMarker], timeout: float
) -> None:
    """Commit each group's marker offset (``batch_id + 1``) again, with the metadata the
    log kept (the batch's partition count and source offsets). The groups have no
    members, so the broker accepts an offset commit from outside the group."""
    for marker in markers:
        offset = TopicPartition(
            marker_topic, 0, marker.batch_id + 1, metadata=_restored_metadata(marker)
        )
        request = ConsumerGroupTopicPartitions(marker.group, [offset])
        futures = admin.alter_consumer_group_offsets([request], request_timeout=timeout)
        result = futures[marker.group].result(timeout)
        for tp in result.topic_partitions or ():
            if tp.error is not None:
                raise KafkaException(tp.error)


def _restored_metadata(marker: LoggedMarker) -> str:
    """The marker's metadata as its transaction wrote it, marked ``restored``; the batch
    alone where the log kept none (or nothing readable)."""
    body: dict[str, Any] = {}
    if marker.metadata:
        try:
            kept = json.loads(marker.metadata)
        except ValueError:
            kept = None
        if isinstance(kept, dict):
            body = kept
    body.update(query_id=marker.query_id, batch_id=marker.batch_id, restored=True)
    text = json.dumps(body, separators=(",", ":"))
    if len(text.encode()) > METADATA_LIMIT:
        return marker.metadata or ""  # it fit when the transaction wrote it
    return text


@dataclass
class MarkerLog:
    """The sink's marker log topic: created or checked once per process, read only when
    marker groups are missing."""

    clients: KafkaClients
    topic: str
    _ready: bool = field(default=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_ready": False}  # checked again in each process

    def ensure(self, admin: AdminClient) -> None:
        """Create the topic (compacted, one partition), or check the existing one."""
        if self._ready:
            return
        try:
            ensure_marker_log(admin, self.topic, self.clients.timeout)
        except ValueError as exc:
            raise PermanentSinkError(str(exc)) from exc
        self._ready = True

    def restore_missing(
        self,
        admin: AdminClient,
        scope: RecoveryScope,
        markers: Markers,
        footprint: Footprint,
        present: list[TargetMarker],
    ) -> list[TargetMarker]:
        """Markers the log holds for groups the broker no longer has (or holds behind),
        committed to their groups again so that the tasks read them as usual. The log is
        read only when groups are missing: none for the query, or fewer than the
        footprint's partitions."""
        self.ensure(admin)
        mine = {m.partition: m.batch_id for m in present if m.query_id == scope.query_id}
        if mine and len(mine) >= footprint.partitions:
            return []
        key_prefix = markers.group(scope.sink_id, scope.query_id, 0)[:-1]  # "<...>.p"
        try:
            logged = read_marker_log(
                self.clients.admin_only(), self.topic, key_prefix, self.clients.timeout
            )
        except ValueError as exc:
            raise PermanentSinkError(str(exc)) from exc
        lost = sorted(
            (
                m
                for m in logged.values()
                if m.query_id == scope.query_id and mine.get(m.partition, -1) < m.batch_id
            ),
            key=lambda m: m.partition,
        )
        if not lost:
            return []
        restore(admin, markers.topic, lost, self.clients.timeout)
        _log.warning(
            "sink %r query %s: %d marker group(s) were gone from the broker (expired after "
            "offsets.retention.minutes?); restored from the marker log %r: %s",
            scope.sink_id,
            scope.query_id,
            len(lost),
            self.topic,
            ", ".join(f"p{m.partition}=batch {m.batch_id}" for m in lost),
        )
        return [TargetMarker(m.query_id, m.partition, m.batch_id) for m in lost]
