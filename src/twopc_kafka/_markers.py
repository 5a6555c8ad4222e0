"""The Kafka sink's commit markers: a consumer group per (sink, query, partition) whose
committed offset on partition 0 of the marker topic is the last committed batch plus one.

The offset is committed in the same transaction as the data (``send_offsets_to_transaction``),
so it becomes visible exactly when the data does.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition

from twopc import SourceOffsets, StoredBatch, TargetMarker
from twopc_kafka._clients import KafkaClients
from twopc_kafka._coordinator_wait import retry_while_coordinator_busy

__all__ = ["METADATA_LIMIT", "MarkerGroup", "Markers"]

_log = logging.getLogger("twopc.kafka")

MarkerGroup = tuple[str, str, int]
"""(group name, query id, partition)."""


@dataclass(frozen=True)
class Markers:
    """The marker groups of the sinks with one ``transactional_id_prefix``."""

    clients: KafkaClients
    topic: str
    """The marker topic: its partition 0 carries the offsets."""
    prefix: str

    def group(self, sink_id: str, query_id: str, partition: int) -> str:
        return f"{self.prefix}.{sink_id}.{query_id}.p{partition}"

    def offset(
        self,
        batch_id: int,
        query_id: str,
        *,
        partitions: int = 0,
        source_offsets: SourceOffsets | None = None,
    ) -> TopicPartition:
        """The marker a transaction of ``batch_id`` commits. Its metadata also keeps the
        batch's partition count and, in partition 0's marker, its source offsets, when
        they fit the brokers' limit for offset metadata (else logged, once)."""
        body: dict[str, Any] = {"query_id": query_id, "batch_id": batch_id}
        if partitions:
            body["partitions"] = partitions
        body["at"] = round(time.time(), 3)
        metadata = json.dumps(body, separators=(",", ":"))
        if source_offsets is not None:
            with_offsets = json.dumps(
                {**body, "offsets": source_offsets.to_json()}, separators=(",", ":")
            )
            if len(with_offsets.encode()) <= METADATA_LIMIT:
                metadata = with_offsets
            else:
                _offsets_too_large(len(with_offsets.encode()))
        return TopicPartition(self.topic, 0, batch_id + 1, metadata=metadata)

    def committed_batch(self, sink_id: str, query_id: str, partition: int) -> int | None:
        """The last batch this partition committed, from its marker group's offset.

        A group coordinator that is still loading or moving (a fresh or restarted broker)
        answers with a retriable error; that is waited out within the operation timeout,
        never read as "no marker", which would write a committed batch again. Raises
        ``KafkaException`` when the broker does not answer.
        """
        group = self.group(sink_id, query_id, partition)
        position = retry_while_coordinator_busy(
            lambda: self._read(group), self.clients.timeout, f"sink {sink_id!r} marker"
        )
        if position.offset < 1:
            return None
        return int(position.offset) - 1

    def _read(self, group: str) -> TopicPartition:
        """The group's committed offset on the marker topic, through this process's shared
        admin client (a consumer per read cost a connection and a coordinator lookup per
        task), asked to be stable: an offset a transaction still holds is waited for
        (``UNSTABLE_OFFSET_COMMIT``, retried like a busy coordinator), never read past."""
        timeout = self.clients.timeout
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(self.topic, 0)])
        try:
            futures = self.clients.shared_admin().list_consumer_group_offsets(
                [request], require_stable=True, request_timeout=timeout
            )
            result = futures[group].result(timeout)
        except KafkaException:
            raise
        except Exception as exc:  # the future's timeout, a client gone after a failure
            self.clients.forget_shared()
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, str(exc))) from exc
        (position,) = result.topic_partitions
        if position.error is not None:
            if position.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT:
                raise KafkaException(
                    KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "unstable offset")
                )
            raise KafkaException(position.error)
        return position  # type: ignore[no-any-return]

    def groups(self, admin: Any, sink_id: str, prefix: str | None = None) -> list[MarkerGroup]:
        """Every marker group of the sink, under this prefix or ``prefix``."""
        timeout = self.clients.timeout
        listing = admin.list_consumer_groups(request_timeout=timeout).result(timeout)
        start = f"{prefix or self.prefix}.{sink_id}."
        found = []
        for group in listing.valid:
            name = str(group.group_id)
            if not name.startswith(start):
                continue
            query_id, sep, tail = name[len(start) :].rpartition(".p")
            if sep and query_id and tail.isdigit():
                found.append((name, query_id, int(tail)))
        return sorted(found)

    def read(self, admin: Any, groups: list[MarkerGroup]) -> list[TargetMarker]:
        """The newest committed batch each group shows (groups without an offset: none)."""
        timeout = self.clients.timeout
        markers = []
        for name, query_id, partition in groups:
            request = ConsumerGroupTopicPartitions(name, [TopicPartition(self.topic, 0)])
            futures = admin.list_consumer_group_offsets([request], request_timeout=timeout)
            result = futures[name].result(timeout)
            for tp in result.topic_partitions or ():
                if tp.error is None and tp.offset >= 1:
                    markers.append(TargetMarker(query_id, partition, int(tp.offset) - 1))
        return markers

    def stored(self, admin: Any, groups: list[MarkerGroup]) -> list[StoredBatch]:
        """What each group's marker keeps (batch, partition count, source offsets, time),
        grouped by query and batch."""
        timeout = self.clients.timeout
        rows: dict[tuple[str, int], list[tuple[int, dict[str, Any]]]] = {}
        for name, query_id, partition in groups:
            request = ConsumerGroupTopicPartitions(name, [TopicPartition(self.topic, 0)])
            futures = admin.list_consumer_group_offsets([request], request_timeout=timeout)
            for tp in futures[name].result(timeout).topic_partitions or ():
                if tp.error is None and tp.offset >= 1:
                    kept = _metadata(tp.metadata)
                    rows.setdefault((query_id, int(tp.offset) - 1), []).append((partition, kept))
        return [
            StoredBatch(
                query_id,
                batch_id,
                frozenset(p for p, _ in found),
                max(int(m.get("partitions") or 0) for _, m in found),
                next(
                    (SourceOffsets.from_json(m["offsets"]) for _, m in found if m.get("offsets")),
                    None,
                ),
                max(float(m.get("at") or 0.0) for _, m in found) or None,
            )
            for (query_id, batch_id), found in sorted(rows.items())
        ]

    def partitions_seen(self, sink_id: str) -> int:
        """One more than the highest partition with a marker group, in any query; 0 when
        the groups cannot be listed (logged)."""
        try:
            groups = self.groups(self.clients.admin(), sink_id)
        except Exception as exc:
            _log.warning("listing consumer groups failed: %s", exc)
            return 0
        return max((partition for _, _, partition in groups), default=-1) + 1


METADATA_LIMIT = 4096
"""The brokers' default ``offset.metadata.max.bytes``: a marker whose metadata is longer
is refused by the broker, so the source offsets are left out of it then."""
_WARNED: list[bool] = []


def _offsets_too_large(size: int) -> None:
    if _WARNED:
        return
    _WARNED.append(True)
    _log.warning(
        "the batch's source offsets (%d bytes of marker metadata) do not fit the %d bytes "
        "Kafka keeps with a consumer group offset by default (offset.metadata.max.bytes): "
        "the markers keep no source offsets, and twopc.starting_offsets cannot restart this "
        "query from the topic",
        size,
        METADATA_LIMIT,
    )


def _metadata(text: str | None) -> dict[str, Any]:
    """A marker's metadata as written by :meth:`Markers.offset` (empty when unreadable)."""
    try:
        body = json.loads(text or "")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


DEFAULT_RETENTION_MINUTES = 10_080
"""The broker's default ``offsets.retention.minutes`` (7 days)."""


def marker_lifetime_seconds(clients: KafkaClients) -> float:
    """How long the brokers keep a marker group's offsets after their last commit: the
    cluster's ``offsets.retention.minutes``, read from one broker's configuration. When
    the broker will not say (no DescribeConfigs permission), Kafka's default, with a
    warning: a shorter setting would then go unnoticed."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # isort: skip
        ConfigResource,
        ResourceType,
    )

    admin = clients.admin()
    try:
        brokers = admin.list_topics(timeout=clients.timeout).brokers
        resource = ConfigResource(ResourceType.BROKER, str(min(brokers)))
        futures = admin.describe_configs([resource], request_timeout=clients.timeout)
        entries = futures[resource].result(timeout=clients.timeout)
        return float(entries["offsets.retention.minutes"].value) * 60
    except Exception as exc:  # any failure: fall back to the documented default
        _log.warning(
            "cannot read offsets.retention.minutes from %s (%s); assuming Kafka's default of "
            "%d minutes for how long marker groups live",
            clients.bootstrap_servers,
            exc,
            DEFAULT_RETENTION_MINUTES,
        )
        return DEFAULT_RETENTION_MINUTES * 60.0
