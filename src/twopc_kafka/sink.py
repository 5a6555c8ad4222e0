"""The ``kafka`` backend: Kafka transactions with confluent-kafka (librdkafka).

A Kafka transaction cannot leave the producer that opened it (librdkafka cannot resume
another process's transaction), so each task commits its own transaction: the sink is a
:class:`~twopc.CommitsInTask`. Exactly-once comes from three things:

* a stable ``transactional.id`` per Spark partition (``<prefix>-<sink_id>-<partition>``):
  ``init_transactions`` of a new attempt fences every older attempt (zombie) and aborts
  its open transaction;
* a marker committed in the same transaction: the offset ``batch_id + 1`` of a consumer
  group per (sink, query, partition), sent with ``send_offsets_to_transaction``;
* the marker is read *after* fencing, so a replayed or retried task whose transaction
  already committed writes nothing.

``mode="atomic"`` writes each micro-batch in a single task and a single transaction, so a
``read_committed`` consumer sees all of a batch or none of it (see the Kafka page for why
per-partition transactions, even behind a barrier, cannot promise that). That one
transaction can also be a :class:`~twopc.SinkGroup`'s last resource
(:class:`~twopc.LastResource`): its commit decides the group's batch.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
from confluent_kafka import KafkaException, TopicPartition

from twopc import (
    CommitOutcome,
    CommitsInTask,
    CommitsProgressInTask,
    Committable,
    Footprint,
    Inspection,
    KeepsSourceOffsets,
    LastResource,
    Payload,
    PermanentSinkError,
    ProgressInTask,
    ProgressReporter,
    RecoveryScope,
    Sink,
    SinkError,
    StoredBatch,
    TaskContext,
    TransientSinkError,
    WorkTimeout,
)
from twopc_kafka._clients import KafkaClients
from twopc_kafka._errors import ClientErrors, classify, error
from twopc_kafka._inspect import open_transactions
from twopc_kafka._marker_log import MarkerLog, marker_record
from twopc_kafka._markers import Markers, marker_lifetime_seconds
from twopc_kafka._options import MODES, KafkaOptions
from twopc_kafka._produce import (
    KafkaTransaction,
    check_partitions,
    produce_all,
    require_topics,
)
from twopc_kafka._records import RowSerializer, record_columns
from twopc_kafka._registry import SerializerServiceError, redact_url

__all__ = ["MODES", "KafkaPayload", "KafkaSink", "KafkaTransaction"]

_log = logging.getLogger("twopc.kafka")


@dataclass(frozen=True)
class KafkaPayload(Payload):
    """A task's committable: its transactional id and the rows it wrote (0 when it found
    its marker and wrote nothing; ``commit_in_task`` says so). Version 1 also carried a
    ``skipped`` flag that nothing read; it is dropped when read."""

    version: ClassVar[int] = 2
    reads: ClassVar[tuple[int, ...]] = (1, 2)

    transactional_id: str
    rows: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any], version: int) -> KafkaPayload:
        return cls(str(data["transactional_id"]), int(data["rows"]))


class KafkaSink(
    Sink[KafkaTransaction],
    CommitsInTask[KafkaTransaction],
    CommitsProgressInTask,
    KeepsSourceOffsets,
    LastResource,
):
    """Exactly-once writes to Kafka topics.

    Args:
        bootstrap_servers: the brokers, ``host:port[,host:port]``.
        topic: the default topic; a ``topic`` column overrides it per row.
        mode: ``per_partition`` (one transaction per Spark partition, in parallel) or
            ``atomic`` (one transaction per micro-batch, written by one task).
        transactional_id_prefix: first part of every ``transactional.id`` and marker group.
        value_format: ``json``, ``string`` or ``bytes`` for frames without Spark's Kafka
            columns (``key``, ``value``, ``topic``, ``partition``, ``headers``); ``avro``
            or ``protobuf`` for every row of any frame, through confluent-kafka's
            serializers and the schema registry at ``schema_registry_url`` (needs
            ``twopc[avro]`` / ``twopc[protobuf]``).
        key_column: the column used as the record key for such frames.
        value_serializer: ``"package.module:factory"``; ``factory()`` returns
            ``serialize(row: dict, topic: str) -> bytes``, used for every row instead of
            ``value_format`` (for serializers twopc does not build itself). It is imported
            in each task, so a client it holds is created where it is used.
        json_non_finite: what a ``json`` value does with NaN and infinities, which JSON
            cannot hold (``json`` would write ``NaN``, which strict readers refuse):
            ``"error"`` (default) fails the batch naming the row and column, ``"null"``
            writes ``null``.
        schema_registry_url: the registry's base URL (Confluent REST API), for
            ``value_format="avro"`` or ``"protobuf"``.
        value_schema: the Avro schema as JSON text, or the Protobuf message class as
            ``"package.module:Message"``.
        schema_registry_config: more ``SchemaRegistryClient`` settings: credentials
            (``basic.auth.user.info``), TLS (``ssl.ca.location`` ...), ``timeout``,
            ``max.retries``. Secret values are redacted in ``repr`` and never logged.
        serializer_config: settings of confluent-kafka's ``AvroSerializer`` /
            ``ProtobufSerializer`` (``auto.register.schemas``, ``use.latest.version``,
            ``subject.name.strategy`` ...).
        marker_topic: the topic whose partition 0 carries the marker offsets (default:
            ``topic``); it must exist.
        marker_log_topic: a compacted topic that keeps a copy of every marker, committed in
            the same transaction, so that markers outlive the broker's
            ``offsets.retention.minutes`` (created with one partition and
            ``cleanup.policy=compact`` when missing). Default: no copy.
        transaction_timeout_ms: ``transaction.timeout.ms``; must not exceed the broker's
            ``transaction.max.timeout.ms``.
        producer_config: more librdkafka settings (TLS, SASL, ``linger.ms`` ...), passed
            through; ``enable.idempotence`` and ``acks=all`` are enforced.
        operation_timeout_seconds: timeout of each transactional call.
        lingering_probe: at least this many partition ids are probed for lingering
            transactions when the query starts.
    """

    backend_name = "kafka"

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        topic: str | None = None,
        mode: str = "per_partition",
        transactional_id_prefix: str = "twopc",
        value_format: str = "json",
        key_column: str | None = None,
        value_serializer: str | None = None,
        json_non_finite: str = "error",
        schema_registry_url: str | None = None,
        value_schema: str | None = None,
        schema_registry_config: dict[str, Any] | None = None,
        serializer_config: dict[str, Any] | None = None,
        marker_topic: str | None = None,
        marker_log_topic: str | None = None,
        transaction_timeout_ms: int = 60_000,
        producer_config: dict[str, Any] | None = None,
        operation_timeout_seconds: float = 30.0,
        lingering_probe: int = 8,
    ) -> None:
        options = KafkaOptions.of(
            bootstrap_servers,
            topic=topic,
            mode=mode,
            transactional_id_prefix=transactional_id_prefix,
            value_format=value_format,
            key_column=key_column,
            value_serializer=value_serializer,
            json_non_finite=json_non_finite,
            schema_registry_url=schema_registry_url,
            value_schema=value_schema,
            schema_registry_config=schema_registry_config,
            serializer_config=serializer_config,
            marker_topic=marker_topic,
            marker_log_topic=marker_log_topic,
            transaction_timeout_ms=transaction_timeout_ms,
            producer_config=producer_config,
            operation_timeout_seconds=operation_timeout_seconds,
            lingering_probe=lingering_probe,
        )
        self.bootstrap_servers = options.bootstrap_servers
        self.topic = options.topic
        self.mode = options.mode
        self.prefix = options.transactional_id_prefix
        self.value_format = options.value_format
        self.key_column = options.key_column
        self.value_serializer = options.value_serializer
        self.json_non_finite = options.json_non_finite
        self.registry = options.registry
        self._serializer: RowSerializer | None = None
        self.marker_topic = options.marker_topic
        self.marker_log_topic = options.marker_log_topic
        self.transaction_timeout_ms = options.transaction_timeout_ms
        self.producer_config = options.producer_config
        self.timeout = options.operation_timeout_seconds
        self.lingering_probe = options.lingering_probe
        self.clients = KafkaClients(
            self.bootstrap_servers,
            self.producer_config,
            self.timeout,
            self.transaction_timeout_ms,
        )
        self.markers = Markers(self.clients, self.marker_topic, self.prefix)
        self.marker_log = (
            MarkerLog(self.clients, self.marker_log_topic) if self.marker_log_topic else None
        )
        self.single_task = self.mode == "atomic"  # one transaction per micro-batch
        self._known_topics: dict[str, int] = {}
        """The cluster's topics and their partition counts, as last read."""
        self._swept_prefix = False
        # transactional ids this process has fenced (aborting their open transaction)
        self._probed: set[str] = set()
        self._marker_lifetime: float | None = None

    def __repr__(self) -> str:
        registry = ""
        if self.registry is not None:
            url = redact_url(self.registry.url)
            registry = f", value_format={self.value_format!r}, schema_registry_url={url!r}"
        log = ""
        if self.marker_log_topic is not None:
            log = f", marker_log_topic={self.marker_log_topic!r}"
        return (
            f"KafkaSink({self.bootstrap_servers!r}, topic={self.topic!r}, mode={self.mode!r}"
            f"{registry}{log}, producer_config={self.clients.redacted()!r})"
        )

    def describe(self) -> str:
        return f"kafka {self.bootstrap_servers} topic {self.topic}"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_known_topics"] = {}
        state["_serializer"] = None
        state["_probed"] = set()
        return state

    def transactional_id(self, sink_id: str, partition: int) -> str:
        return f"{self.prefix}-{sink_id}-{partition}"

    def marker_group(self, sink_id: str, query_id: str, partition: int) -> str:
        return self.markers.group(sink_id, query_id, partition)

    def commits_progress(self, reporter: ProgressReporter) -> bool:
        """``atomic`` mode commits the source offsets in the batch's one transaction, when
        the group lives on this sink's cluster; ``per_partition`` cannot (a batch is many
        transactions), so the coordinator sets them after the batch's commit."""
        from twopc_kafka.progress import ConsumerGroup

        if self.mode != "atomic" or not isinstance(reporter, ConsumerGroup):
            return False
        if _servers(reporter.bootstrap_servers) == _servers(self.bootstrap_servers):
            return True
        ours = self._cluster_id()
        return ours is not None and ours == reporter.cluster_id()

    def _cluster_id(self) -> str | None:
        try:
            described = self.clients.admin().describe_cluster(request_timeout=self.timeout)
            return str(described.result(self.timeout).cluster_id)
        except KafkaException:
            _log.warning("cannot read the cluster id of %s", self.bootstrap_servers)
            return None

    # -- phase 1 -----------------------------------------------------------------------------

    def begin_transaction(self, ctx: TaskContext) -> KafkaTransaction:
        transactional_id = self.transactional_id(ctx.sink_id, ctx.partition)
        client_errors = ClientErrors()
        producer = self.clients.producer(transactional_id, client_errors)
        try:
            # Fences every earlier attempt of this partition and aborts its open transaction.
            producer.init_transactions(self.timeout)
        except KafkaException as exc:
            with contextlib.suppress(KafkaException):  # raises again on fatal errors
                producer.poll(0)  # serves error_cb: why the broker could not be reached
            raise error(
                exc, f"cannot start transactions on {self.bootstrap_servers}", client_errors.last
            ) from exc
        txn = KafkaTransaction(ctx, producer, transactional_id)
        # Read the marker only now, after fencing: no zombie can commit behind our back.
        try:
            last = self.markers.committed_batch(ctx.sink_id, ctx.query_id, ctx.partition)
        except KafkaException as exc:
            raise error(exc, "reading the commit marker failed") from exc
        if last is not None and last >= ctx.batch_id:
            _log.info(
                "sink %r batch %d partition %d already committed (marker %d); skipping",
                ctx.sink_id,
                ctx.batch_id,
                ctx.partition,
                last,
            )
            txn.skip = True
            return txn
        self._check_topic(self.marker_topic)
        if self.marker_log_topic is not None:
            self._check_topic(self.marker_log_topic)
        if self.topic:
            self._check_topic(self.topic)
        try:
            producer.begin_transaction()
        except KafkaException as exc:
            raise error(exc, "begin_transaction failed") from exc
        return txn

    def _check_topic(self, topic: str) -> None:
        """Fail clearly on a missing topic instead of letting the broker auto-create it."""
        if topic in self._known_topics:
            return
        self._read_topics()  # this process's list, if recent
        if topic not in self._known_topics:
            self._read_topics(refresh=True)  # the cluster's, now
        if topic not in self._known_topics:
            raise PermanentSinkError(
                f"topic {topic!r} does not exist on {self.bootstrap_servers}; create it first"
            )

    def _read_topics(self, *, refresh: bool = False) -> None:
        """The cluster's topics and partition counts (listing all topics never creates one),
        as this process read them within the last minute unless ``refresh``."""
        try:
            self._known_topics = self.clients.topics(refresh=refresh)
        except KafkaException as exc:
            self.clients.forget_shared()
            raise error(exc, f"cannot read metadata from {self.bootstrap_servers}") from exc

    def _partition_count(self, topic: str, refresh: bool) -> int:
        """How many partitions ``topic`` has; read from the brokers again with ``refresh``."""
        if refresh or topic not in self._known_topics:
            self._read_topics(refresh=True)
        return self._known_topics.get(topic, 0)

    def invoke(self, txn: KafkaTransaction, batch: pa.RecordBatch) -> None:
        if txn.skip:
            return
        if self.key_column and self.key_column not in batch.schema.names:
            raise PermanentSinkError(
                f"key_column {self.key_column!r} is not in the data ({batch.schema.names})"
            )
        serializer = self._row_serializer()
        label = "value_serializer" if self.registry is None else self.registry.label
        try:
            columns = record_columns(
                batch,
                self.value_format,
                self.key_column,
                serializer,
                self.topic or "",
                serializer_label=label,
                json_non_finite=self.json_non_finite,
                first_row=txn.rows,
            )
        except ValueError as exc:
            raise PermanentSinkError(str(exc)) from exc
        except SerializerServiceError as exc:
            kind = TransientSinkError if exc.retryable else PermanentSinkError
            raise kind(str(exc)) from exc
        for topic in sorted(require_topics(txn, columns, self.topic)):
            self._check_topic(topic)
        check_partitions(txn, columns, self.topic, self._partition_count)
        produce_all(txn, columns, self.topic)
        txn.producer.poll(0)

    def _row_serializer(self) -> RowSerializer | None:
        """The serializer of every row, built in the task (registry clients never pickle)."""
        if self._serializer is None:
            if self.registry is not None:
                self._serializer = self.registry.row_serializer()
            elif self.value_serializer is not None:
                module_name, _, attribute = self.value_serializer.partition(":")
                factory = getattr(importlib.import_module(module_name), attribute)
                self._serializer = factory()
        return self._serializer

    def pre_commit(self, txn: KafkaTransaction) -> Committable:
        ctx = txn.ctx
        payload = KafkaPayload(txn.transactional_id, 0 if txn.skip else txn.rows)
        if not txn.skip:
            group = self.marker_group(ctx.sink_id, ctx.query_id, ctx.partition)
            marker = self.markers.offset(
                ctx.batch_id,
                ctx.query_id,
                partitions=ctx.partitions,
                source_offsets=ctx.source_offsets if ctx.partition == 0 else None,
            )
            if self.marker_log is not None:
                key, value = marker_record(
                    group, ctx.query_id, ctx.partition, ctx.batch_id, marker.metadata
                )
                try:
                    txn.producer.produce(
                        self.marker_log.topic, value, key, 0, on_delivery=txn.delivered
                    )
                except KafkaException as exc:
                    raise error(exc, "producing the marker log record failed") from exc
            self._flush(txn)
            metadata = self.clients.group_metadata(group)
            try:
                txn.producer.send_offsets_to_transaction([marker], metadata, self.timeout)
            except KafkaException as exc:
                raise error(exc, "sending the commit marker failed") from exc
            if ctx.progress is not None:
                self._send_source_offsets(txn, ctx.progress)
        return Committable.for_task(ctx, payload)

    def _send_source_offsets(self, txn: KafkaTransaction, progress: ProgressInTask) -> None:
        """The batch's source offsets, to the progress group, in the same transaction."""
        positions = [
            TopicPartition(topic, partition, offset, metadata=progress.metadata)
            for topic, partition, offset in progress.offsets.positions()
        ]
        metadata = self.clients.group_metadata(progress.group_id)
        try:
            txn.producer.send_offsets_to_transaction(positions, metadata, self.timeout)
        except KafkaException as exc:
            raise error(
                exc, f"sending the source offsets to group {progress.group_id!r} failed"
            ) from exc

    def _flush(self, txn: KafkaTransaction) -> None:
        remaining = txn.producer.flush(self.timeout)
        if txn.errors:
            # A fenced zombie or a broker restart fails deliveries too; only rejections of
            # the records themselves are permanent.
            kind = PermanentSinkError if txn.permanent else TransientSinkError
            raise kind(f"the broker rejected records: {'; '.join(txn.errors)}")
        if remaining:
            raise TransientSinkError(f"{remaining} record(s) not delivered within {self.timeout}s")

    def abort(self, txn: KafkaTransaction) -> None:
        if txn.skip:
            return
        try:
            txn.producer.abort_transaction(self.timeout)
        except KafkaException:
            # The broker aborts it when the next attempt's init_transactions fences us, or
            # at transaction.timeout.ms.
            _log.warning("abort_transaction failed for %s", txn.transactional_id, exc_info=True)

    # -- the commit, in the task -------------------------------------------------------------

    def commit_in_task(self, txn: KafkaTransaction) -> CommitOutcome:
        if txn.skip:
            return CommitOutcome.ALREADY_COMMITTED  # the marker showed the batch committed
        started = time.monotonic()
        try:
            txn.producer.commit_transaction(self.timeout)
        except KafkaException as exc:
            reason = exc.args[0]
            if reason.retriable():  # a timed-out commit may be called again
                raise error(exc, "commit_transaction failed") from exc
            raise SinkError(
                f"commit_transaction failed and the transaction is lost ({reason.name()}: "
                f"{reason.str()}): a newer attempt of this partition fenced this producer, "
                "or the broker aborted the transaction after transaction.timeout.ms; the "
                "task fails and a new attempt writes the data"
            ) from exc
        _log.debug("committed %s in %.3fs", txn.transactional_id, time.monotonic() - started)
        return CommitOutcome.COMMITTED

    # -- a group's last resource -------------------------------------------------------------

    def last_resource_refusal(self) -> str | None:
        if self.mode != "atomic":
            return (
                f"mode={self.mode!r} commits one transaction per Spark partition; only "
                "mode='atomic' writes a batch in one transaction"
            )
        return None

    def fence_and_check(self, scope: RecoveryScope, batch_id: int) -> bool:
        """``init_transactions`` on the batch's transactional id (aborts its open
        transaction and fences every producer that holds it), then the marker: whether
        batch ``batch_id`` or a later one committed. Fencing is not skipped for an id this
        process probed before: a task may have opened a transaction since."""
        transactional_id = self.transactional_id(scope.sink_id, 0)
        self._probed.discard(transactional_id)
        if not self._probe(transactional_id):
            raise TransientSinkError(
                f"cannot fence the transactional id {transactional_id} on "
                f"{self.bootstrap_servers}, so whether the group's batch {batch_id} committed "
                "cannot be decided yet; retried at the next recovery"
            )
        footprint = Footprint(partitions=1, naming=self.naming())
        committed = self.committed_partitions(scope, batch_id, footprint)
        return bool(committed and 0 in committed)

    # -- lingering transactions --------------------------------------------------------------

    def sweep(self, sink_id: str, keep: Sequence[Committable] = ()) -> int:
        """Abort lingering transactions of this sink once per process (query start), so
        ``read_committed`` consumers are not stalled by a crashed run until its timeout."""
        if self._swept_prefix:
            return 0
        if not self._probe(self.transactional_id(sink_id, 0)):
            # Broker unreachable or credentials refused: do not wait out every probe; the
            # batch's tasks report the cause, and the next batch sweeps again.
            return 0
        partitions = max(self.lingering_probe, self.markers.partitions_seen(sink_id))
        for partition in range(1, partitions):
            self._probe(self.transactional_id(sink_id, partition))
        self._swept_prefix = True
        _log.info(
            "sink %r: probed %d transactional ids for lingering transactions", sink_id, partitions
        )
        return 0

    def work_timeout(self) -> WorkTimeout:
        """The broker aborts a transaction open longer than ``transaction.timeout.ms``."""
        return WorkTimeout("transaction.timeout.ms", self.transaction_timeout_ms / 1000)

    def naming(self) -> dict[str, Any]:
        """The prefix names every transactional id and marker group; the mode decides how
        many transactions a batch has."""
        return {"transactional_id_prefix": self.prefix, "mode": self.mode}

    def sweep_lingering(self, sink_id: str, footprint: Footprint) -> int:
        """Fence every transactional id a run with ``footprint`` used, under its prefix
        (which may differ from this run's), aborting what it left open."""
        prefix = str(footprint.naming.get("transactional_id_prefix", self.prefix))
        ids = [f"{prefix}-{sink_id}-{p}" for p in range(footprint.partitions)]
        todo = [i for i in ids if i not in self._probed]
        for transactional_id in todo:
            if not self._probe(transactional_id):
                break  # unreachable: the batch's tasks report why; the next run retries
        if todo:
            _log.info(
                "sink %r: probed %d transactional id(s) %s-%s-* of an earlier run",
                sink_id,
                len(todo),
                prefix,
                sink_id,
            )
        return 0  # fencing cannot tell whether a transaction was open

    def _probe(self, transactional_id: str) -> bool:
        """``init_transactions`` on one transactional id (once per process): aborts its
        open transaction."""
        if transactional_id in self._probed:
            return True
        producer = self.clients.producer(transactional_id)
        try:
            producer.init_transactions(self.timeout)
            self._probed.add(transactional_id)
            return True
        except KafkaException as exc:
            _log.warning("probing %s for a lingering transaction failed: %s", transactional_id, exc)
            return False
        finally:
            del producer  # no librdkafka client may outlive this (forked tasks follow)

    # -- markers -----------------------------------------------------------------------------

    def committed_partitions(
        self, scope: RecoveryScope, batch_id: int, footprint: Footprint
    ) -> set[int] | None:
        """Partitions whose marker group (under the footprint's prefix) shows ``batch_id``
        or a later batch committed; expired groups are restored from the marker log first,
        where there is one."""
        prefix = str(footprint.naming.get("transactional_id_prefix", self.prefix))
        client_errors = ClientErrors()
        admin = self.clients.admin(client_errors)
        try:
            groups = [
                g
                for g in self.markers.groups(admin, scope.sink_id, prefix)
                if g[1] == scope.query_id
            ]
            markers = self.markers.read(admin, groups)
            if self.marker_log is not None:
                markers += self.marker_log.restore_missing(
                    admin,
                    scope,
                    Markers(self.clients, self.marker_topic, prefix),
                    footprint,
                    markers,
                )
        except (KafkaException, TimeoutError) as exc:
            raise self._unreadable_markers(
                exc, admin, client_errors, prefix, scope.sink_id
            ) from exc
        return {m.partition for m in markers if m.batch_id >= batch_id}

    def _unreadable_markers(
        self, exc: Exception, admin: Any, client_errors: ClientErrors, prefix: str, sink_id: str
    ) -> SinkError:
        """The error for marker groups the broker would not show, with its reason."""
        admin.poll(0)  # serves error_cb: why the broker could not be reached
        kind, cause = classify(exc, client_errors.last)
        return kind(
            f"cannot read the marker groups {prefix}.{sink_id}.* on "
            f"{self.bootstrap_servers}: {cause}"
        )

    def stored_offsets(self, sink_id: str) -> list[StoredBatch]:
        """What the marker groups keep: each partition's newest batch, its partition count
        and (partition 0's marker) the batch's source offsets."""
        client_errors = ClientErrors()
        admin = self.clients.admin(client_errors)
        try:
            return self.markers.stored(admin, self.markers.groups(admin, sink_id))
        except (KafkaException, TimeoutError) as exc:
            raise self._unreadable_markers(exc, admin, client_errors, self.prefix, sink_id) from exc

    def markers_expire_after(self) -> float | None:
        """The brokers drop a marker group's offsets ``offsets.retention.minutes`` after
        their last commit; with a ``marker_log_topic`` they are restored, so they last."""
        if self.marker_log is not None:
            return None
        if self._marker_lifetime is None:
            self._marker_lifetime = marker_lifetime_seconds(self.clients)
        return self._marker_lifetime

    # -- read-only inspection -----------------------------------------------------------------

    def inspect(self, sink_id: str) -> Inspection:
        """Marker offsets and partitions held back by an open transaction, without probing
        (see :mod:`twopc_kafka._inspect`)."""
        admin = self.clients.admin()
        markers = tuple(self.markers.read(admin, self.markers.groups(admin, sink_id)))
        topics = {t for t in (self.topic, self.marker_topic, self.marker_log_topic) if t}
        pending = tuple(open_transactions(self.clients, admin, topics, f"{self.prefix}.status"))
        probes = max(self.lingering_probe, self.markers.partitions_seen(sink_id))
        shown = ", ".join(sorted(topics))
        notes = (
            f"kafka: open transactions are seen per topic partition (last stable offset below "
            f"the high watermark) on {shown} only; Kafka's admin API as used here cannot list "
            "transactions, so status cannot tell which transactional id holds a partition "
            "open, nor see an open transaction that wrote only to other topics (rows with a "
            "topic column)",
            f"kafka: recover aborts open transactions of the transactional ids "
            f"{self.transactional_id(sink_id, 0)} .. {self.transactional_id(sink_id, probes - 1)} "
            "(init_transactions fences them); a transaction of another producer stays open "
            "until its transaction.timeout.ms",
            "kafka: each task commits its own transaction, so nothing waits for a commit "
            "decision; the marker offsets show which partitions committed",
        )
        return Inspection(pending, markers, notes)


def _servers(bootstrap: str) -> set[str]:
    return {part.strip().lower() for part in bootstrap.split(",") if part.strip()}
