"""A Kafka consumer group as a query's progress on its Kafka source: lag tools
(``kafka-consumer-groups.sh``, Burrow, lag exporters) read it like any consumer's.

twopc writes the group and never reads it to decide anything: Spark's checkpoint says what
each batch consumed. Offsets carry the metadata ``twopc sink=<id> query=<id> batch=<n>``,
so a group another application uses (active members, or offsets without that metadata) is
refused instead of overwritten.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from twopc import (
    ConfigurationError,
    GroupProgress,
    ProgressReporter,
    SourceOffsets,
    TransientSinkError,
)
from twopc.retrying import retry_while
from twopc_kafka._clients import KafkaClients

__all__ = ["ConsumerGroup"]

_log = logging.getLogger("twopc.kafka")

_KIND = "kafka-consumer-group"
"""What :meth:`ConsumerGroup.describe` records as the reporter's kind (its ``ProgressSpec``)."""
_OURS = "twopc sink="
_COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}
_LATEST: Any = OffsetSpec.latest()  # type: ignore[no-untyped-call]


class ConsumerGroup(ProgressReporter):
    """The consumer group that shows a query's progress on its Kafka source.

    Args:
        group_id: the group lag tools watch; used by this query alone.
        bootstrap_servers: the source cluster's brokers.
        config: more librdkafka settings for the admin client (TLS, SASL ...), passed
            through; secret values are never logged.
        timeout_seconds: timeout of each request to the brokers.

    With a Kafka sink in ``atomic`` mode on the same cluster the offsets are committed in
    each batch's transaction; otherwise they are set after each batch's commit.
    """

    def __init__(
        self,
        group_id: str,
        bootstrap_servers: str,
        *,
        config: Mapping[str, Any] | None = None,
        timeout_seconds: float = 10.0,
    ) -> None:
        if not group_id or not isinstance(group_id, str):
            raise ConfigurationError("ConsumerGroup needs a group_id")
        self.group_id = group_id
        self.bootstrap_servers = bootstrap_servers
        self.timeout = timeout_seconds
        self._clients = KafkaClients(bootstrap_servers, dict(config or {}), timeout_seconds)
        self._admin: Any = None
        self._cluster_id: str | None = None

    @classmethod
    def from_description(
        cls, described: Mapping[str, Any], config: Mapping[str, Any] | None = None
    ) -> ConsumerGroup:
        """The group :meth:`describe` recorded (``group``, ``bootstrap_servers``), with the
        admin client's settings ``config``: how ``twopc status`` and ``format("twopc")``'s
        ``progress_*`` options build it (the plugin's ``ProgressSpec`` factory)."""
        missing = [key for key in ("group", "bootstrap_servers") if not described.get(key)]
        if missing:
            raise ConfigurationError(
                f"a {_KIND} progress reporter needs {' and '.join(map(repr, missing))} (the "
                "group lag tools watch, and the brokers of the source's cluster; "
                'format("twopc"): .option("progress_group", ...), '
                '.option("progress_bootstrap_servers", ...))'
            )
        return cls(str(described["group"]), str(described["bootstrap_servers"]), config=config)

    def __repr__(self) -> str:
        return (
            f"ConsumerGroup(group_id={self.group_id!r}, "
            f"bootstrap_servers={self.bootstrap_servers!r}, config={self._clients.redacted()})"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_admin"] = None  # librdkafka clients never pickle; made again where used
        return state

    # -- what the coordinator asks -----------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {
            "kind": _KIND,
            "group": self.group_id,
            "bootstrap_servers": self.bootstrap_servers,
        }

    def check(self, sink_id: str) -> None:
        members = self._members()
        if members:
            raise ConfigurationError(
                f"consumer group {self.group_id!r} on {self.bootstrap_servers} has "
                f"{len(members)} active member(s) ({', '.join(members[:3])}): another "
                "application consumes with it. The progress group must belong to this query "
                "alone: choose another group id",
                sink_id=sink_id,
            )
        foreign = [
            f"{tp.topic}[{tp.partition}]@{tp.offset} ({tp.metadata or 'no metadata'})"
            for tp in self._committed()
            if tp.offset >= 0 and not _written_by(tp.metadata, sink_id)
        ]
        if foreign:
            raise ConfigurationError(
                f"consumer group {self.group_id!r} on {self.bootstrap_servers} holds offsets "
                f"that twopc sink {sink_id!r} did not commit: {', '.join(foreign[:3])}"
                f"{' ...' if len(foreign) > 3 else ''}. Another application (or another "
                "twopc sink) uses it. Choose another group id, or delete the group if it is "
                "no longer used: kafka-consumer-groups.sh --bootstrap-server "
                f"{self.bootstrap_servers} --delete --group {self.group_id}",
                sink_id=sink_id,
            )

    def publish(self, offsets: SourceOffsets, sink_id: str, query_id: str) -> None:
        metadata = self.offset_metadata(sink_id, query_id, offsets.batch_id)
        positions = [
            KafkaTopicPartition(topic, partition, offset, metadata=metadata)
            for topic, partition, offset in offsets.positions()
        ]
        request = ConsumerGroupTopicPartitions(self.group_id, positions)
        try:
            result = self._ask("alter_consumer_group_offsets", request)
        except (KafkaException, FutureTimeout) as exc:
            raise TransientSinkError(
                f"setting the offsets of consumer group {self.group_id!r} failed: {exc}"
            ) from exc
        failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
        if failed:
            raise TransientSinkError(
                f"setting the offsets of consumer group {self.group_id!r} failed for "
                + ", ".join(f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in failed)
            )

    def progress(self, offsets: SourceOffsets) -> GroupProgress:
        keys = [(topic, partition) for topic, partition, _ in offsets.positions()]
        committed: dict[tuple[str, int], int | None] = dict.fromkeys(keys)
        for tp in self._committed([KafkaTopicPartition(t, p) for t, p in keys]):
            committed[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        request = {KafkaTopicPartition(t, p): _LATEST for t, p in keys}
        try:
            futures = self._admin_client().list_offsets(request, request_timeout=self.timeout)
            end = {
                (tp.topic, tp.partition): int(future.result(self.timeout).offset)
                for tp, future in futures.items()
            }
        except (KafkaException, FutureTimeout) as exc:
            raise TransientSinkError(
                f"reading the end offsets of the source failed: {exc}"
            ) from exc
        return GroupProgress(self.group_id, committed, end)

    # -- what the Kafka sink asks -------------------------------------------------------------

    def cluster_id(self) -> str | None:
        """The source cluster's id (``None`` when it cannot be read)."""
        if self._cluster_id is None:
            try:
                described = self._admin_client().describe_cluster(request_timeout=self.timeout)
                self._cluster_id = str(described.result(self.timeout).cluster_id)
            except KafkaException:
                _log.warning("cannot read the cluster id of %s", self.bootstrap_servers)
        return self._cluster_id

    # -- the admin client ---------------------------------------------------------------------

    def _admin_client(self) -> Any:
        if self._admin is None:
            self._admin = self._clients.admin()
        return self._admin

    def _ask(self, method: str, request: Any) -> Any:
        """The answer about this group of the admin client's ``method`` called with
        ``[request]``; a group coordinator that is moving or still loading (right after a
        broker start) is asked again until the timeout."""

        def ask() -> Any:
            futures = getattr(self._admin_client(), method)([request], request_timeout=self.timeout)
            return futures[self.group_id].result(self.timeout)

        def moving(exc: Exception) -> bool:
            error = exc.args[0] if exc.args else None
            return (
                isinstance(exc, KafkaException)
                and isinstance(error, KafkaError)
                and error.code() in _COORDINATOR_MOVING
            )

        return retry_while(ask, moving, timeout=self.timeout, what=f"asking group {self.group_id}")

    def _members(self) -> list[str]:
        try:
            group = self._ask("describe_consumer_groups", self.group_id)
        except (KafkaException, FutureTimeout) as exc:
            if _not_found(exc):
                return []
            raise TransientSinkError(
                f"describing consumer group {self.group_id!r} on {self.bootstrap_servers} "
                f"failed: {exc}"
            ) from exc
        return [f"{m.client_id}@{m.host}" for m in group.members or []]

    def _committed(
        self, partitions: list[KafkaTopicPartition] | None = None
    ) -> list[KafkaTopicPartition]:
        request = ConsumerGroupTopicPartitions(self.group_id, partitions)
        try:
            result = self._ask("list_consumer_group_offsets", request)
        except (KafkaException, FutureTimeout) as exc:
            if _not_found(exc):
                return []
            raise TransientSinkError(
                f"reading the offsets of consumer group {self.group_id!r} failed: {exc}"
            ) from exc
        return list(result.topic_partitions or [])


def _written_by(metadata: str | None, sink_id: str) -> bool:
    return bool(metadata) and str(metadata).startswith(f"{_OURS}{sink_id} ")


def _not_found(exc: BaseException) -> bool:
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.code() == KafkaError.GROUP_ID_NOT_FOUND
