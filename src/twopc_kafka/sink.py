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
per-partition transactions, even behind a barrier, cannot promise that).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

# confluent-kafka's own type hints do not declare this re-export
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # isort: skip

from twopc import (
    CommitOutcome,
    CommitsInTask,
    Committable,
    ConfigurationError,
    Footprint,
    Inspection,
    Payload,
    PendingWork,
    PermanentSinkError,
    RecoveryScope,
    Sink,
    SinkError,
    TargetMarker,
    TaskContext,
    TransientSinkError,
    WorkKind,
)
from twopc_kafka._coordinator_wait import retry_while_coordinator_busy
from twopc_kafka._marker_log import ensure_marker_log, marker_record, read_marker_log, restore
from twopc_kafka._records import VALUE_FORMATS, RecordColumns, RowSerializer, record_columns
from twopc_kafka._registry import (
    REGISTRY_FORMATS,
    RegistryOptions,
    SerializerServiceError,
    redact_url,
)

__all__ = ["MODES", "KafkaPayload", "KafkaSink"]

_log = logging.getLogger("twopc.kafka")

MODES = ("per_partition", "atomic")
_SECRET_KEYS = ("sasl.password", "ssl.key.password", "ssl.keystore.password", "sasl.oauthbearer")
_ENFORCED = {"enable.idempotence": True, "acks": "all"}
_PERMANENT_CODES = {
    KafkaError.INVALID_TRANSACTION_TIMEOUT: "transaction.timeout.ms is above the broker's "
    "transaction.max.timeout.ms (default 900000); lower it or raise the broker's maximum",
    KafkaError.MSG_SIZE_TOO_LARGE: "a record is larger than the broker's or topic's "
    "message.max.bytes",
    KafkaError.UNKNOWN_TOPIC_OR_PART: "the topic or partition does not exist",
    KafkaError._UNKNOWN_TOPIC: "the topic does not exist",
    KafkaError.INVALID_MSG_SIZE: "a record has an invalid size",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "not authorized to write to the topic",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "not authorized to use the transactional id",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "not authorized to commit the marker offsets",
    KafkaError.SASL_AUTHENTICATION_FAILED: "authentication failed (check the SASL settings)",
    KafkaError._AUTHENTICATION: "authentication failed (check the credentials)",
    KafkaError.RECORD_LIST_TOO_LARGE: "a batch of records is too large",
    KafkaError.INVALID_RECORD: "the broker rejected a record",
}


class _ClientErrors:
    """The last client-level error librdkafka reported through ``error_cb`` (connection
    refused, authentication failed). A timed-out call does not carry it, so without this a
    wrong address or wrong credentials would only say "timed out"."""

    def __init__(self) -> None:
        self.last: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        if error.code() != KafkaError._ALL_BROKERS_DOWN or self.last is None:
            self.last = error


def _classify(exc: BaseException, client_error: KafkaError | None) -> tuple[type[SinkError], str]:
    """The error class and cause text for a failed client call: permanent for wrong
    credentials or settings, transient otherwise, with the client's last error (connection
    refused, authentication failed) where the call itself only says "timed out"."""
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    timed_out = error is None and isinstance(exc, TimeoutError)
    if (
        (timed_out or (error is not None and error.code() == KafkaError._TIMED_OUT))
        and client_error is not None
        and client_error.code() in _PERMANENT_CODES
    ):
        error = client_error  # e.g. wrong credentials: say so, not "timed out"
    if error is not None and error.code() in _PERMANENT_CODES:
        return (
            PermanentSinkError,
            f"{_PERMANENT_CODES[error.code()]} ({error.name()}: {error.str()})",
        )
    if error is not None:
        cause = f"{error.name()}: {error.str()}"
    elif timed_out:
        cause = "timed out"
    else:
        cause = f"{type(exc).__name__}: {exc}"
    if client_error is not None and client_error is not error:
        cause += f" (last client error: {client_error.name()}: {client_error.str()})"
    return TransientSinkError, cause


@dataclass(frozen=True)
class KafkaPayload(Payload):
    """A task's committable: its transactional id and rows, or that it found its marker
    and wrote nothing (``skipped``)."""

    version: ClassVar[int] = 1

    transactional_id: str
    rows: int
    skipped: bool = False


@dataclass
class KafkaTransaction:
    """One task's producer and open transaction."""

    ctx: TaskContext
    producer: Any
    transactional_id: str
    skip: bool = False
    rows: int = 0
    errors: list[str] = field(default_factory=list)
    permanent: bool = False
    """Whether a delivery error is one that retrying cannot fix (record too large...)."""

    def delivered(self, err: Any, _msg: Any) -> None:
        """librdkafka's delivery report; only failed deliveries report (see ``_producer``)."""
        if err is not None and len(self.errors) < 5:
            self.errors.append(f"{err.name()}: {err.str()}")
            self.permanent = self.permanent or err.code() in _PERMANENT_CODES


class KafkaSink(Sink[KafkaTransaction], CommitsInTask[KafkaTransaction]):
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
        if not bootstrap_servers:
            raise ConfigurationError("kafka sink: bootstrap_servers is required")
        if mode not in MODES:
            raise ConfigurationError(f"kafka sink: mode must be one of {', '.join(MODES)}")
        if value_format not in VALUE_FORMATS:
            raise ConfigurationError(
                f"kafka sink: value_format must be one of {', '.join(VALUE_FORMATS)}"
            )
        if not (marker_topic or topic):
            raise ConfigurationError(
                "kafka sink: give topic= (or marker_topic=): the commit markers need an "
                "existing topic"
            )
        config = dict(producer_config or {})
        for key, value in _ENFORCED.items():
            if key in config and str(config[key]).lower() != str(value).lower():
                raise ConfigurationError(
                    f"kafka sink: {key}={config[key]!r} would give up exactly-once; twopc "
                    f"needs {key}={value}"
                )
        if "transactional.id" in config:
            raise ConfigurationError(
                "kafka sink: transactional.id is derived from transactional_id_prefix, the "
                "sink id and the partition; do not set it"
            )
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.mode = mode
        self.prefix = transactional_id_prefix
        self.value_format = value_format
        self.key_column = key_column
        if value_serializer is not None and ":" not in value_serializer:
            raise ConfigurationError(
                "kafka sink: value_serializer must be 'package.module:factory', not "
                f"{value_serializer!r}"
            )
        self.value_serializer = value_serializer
        self.registry = self._registry_options(
            value_format,
            value_serializer=value_serializer,
            url=schema_registry_url,
            value_schema=value_schema,
            client_config=schema_registry_config,
            serializer_config=serializer_config,
        )
        self._serializer: RowSerializer | None = None
        self.marker_topic = marker_topic or topic or ""
        if marker_log_topic is not None and marker_log_topic in (self.marker_topic, topic):
            raise ConfigurationError(
                "kafka sink: marker_log_topic must be a topic of its own (compacted), not the "
                f"output or marker topic {marker_log_topic!r}"
            )
        self.marker_log_topic = marker_log_topic or None
        self._marker_log_ready = False
        self.transaction_timeout_ms = int(transaction_timeout_ms)
        self.producer_config = config
        self.timeout = float(operation_timeout_seconds)
        self.lingering_probe = int(lingering_probe)
        self.single_task = mode == "atomic"  # one transaction per micro-batch
        self._known_topics: set[str] = set()
        self._swept_prefix = False
        # transactional ids this process has fenced (aborting their open transaction)
        self._probed: set[str] = set()

    @staticmethod
    def _registry_options(
        value_format: str,
        *,
        value_serializer: str | None,
        url: str | None,
        value_schema: str | None,
        client_config: dict[str, Any] | None,
        serializer_config: dict[str, Any] | None,
    ) -> RegistryOptions | None:
        """The Avro/Protobuf settings, checked now; None for the other value formats."""
        if value_format not in REGISTRY_FORMATS:
            given = {
                "schema_registry_url": url,
                "value_schema": value_schema,
                "schema_registry_config": client_config,
                "serializer_config": serializer_config,
            }
            extra = sorted(name for name, value in given.items() if value is not None)
            if extra:
                raise ConfigurationError(
                    f"kafka sink: {', '.join(extra)} only apply to value_format='avro' or "
                    f"'protobuf', not {value_format!r}"
                )
            return None
        if value_serializer is not None:
            raise ConfigurationError(
                f"kafka sink: value_format={value_format!r} and value_serializer both say how "
                "to serialize values; give one"
            )
        return RegistryOptions(
            value_format,
            url or "",
            value_schema or "",
            dict(client_config or {}),
            dict(serializer_config or {}),
        )

    def __repr__(self) -> str:
        safe = {
            k: ("***" if k.startswith(_SECRET_KEYS) else v) for k, v in self.producer_config.items()
        }
        registry = ""
        if self.registry is not None:
            url = redact_url(self.registry.url)
            registry = f", value_format={self.value_format!r}, schema_registry_url={url!r}"
        log = ""
        if self.marker_log_topic is not None:
            log = f", marker_log_topic={self.marker_log_topic!r}"
        return (
            f"KafkaSink({self.bootstrap_servers!r}, topic={self.topic!r}, mode={self.mode!r}"
            f"{registry}{log}, producer_config={safe!r})"
        )

    def describe(self) -> str:
        return f"kafka {self.bootstrap_servers} topic {self.topic}"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_known_topics"] = set()
        state["_serializer"] = None
        state["_probed"] = set()
        return state

    # -- ids and clients ---------------------------------------------------------------------

    def transactional_id(self, sink_id: str, partition: int) -> str:
        return f"{self.prefix}-{sink_id}-{partition}"

    def marker_group(self, sink_id: str, query_id: str, partition: int) -> str:
        return f"{self.prefix}.{sink_id}.{query_id}.p{partition}"

    def _base_config(self) -> dict[str, Any]:
        return {**self.producer_config, "bootstrap.servers": self.bootstrap_servers}

    def _producer(self, transactional_id: str, errors: _ClientErrors | None = None) -> Any:
        config = {
            # A Python callback per delivered record costs more than producing it; failures
            # still report, and flush() still waits for every record.
            "delivery.report.only.error": True,
            # A stalled broker answers nothing, and librdkafka then waits for each request
            # until socket.timeout.ms (60 s, capped at transaction.timeout.ms), whatever the
            # call's own timeout: send_offsets_to_transaction would block that long.
            "socket.timeout.ms": self._request_timeout_ms(),
            **self._base_config(),
            **_ENFORCED,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": self.transaction_timeout_ms,
        }
        if errors is not None and "error_cb" not in config:
            config["error_cb"] = errors
        return Producer(config)

    def _request_timeout_ms(self) -> int:
        """librdkafka's ``socket.timeout.ms`` for the producers: the operation timeout."""
        return max(10, min(int(self.timeout * 1000), self.transaction_timeout_ms))

    def _admin_only_config(self) -> dict[str, Any]:
        producer_only = ("linger.ms", "batch.size", "compression.type", "queue.buffering")
        return {k: v for k, v in self._base_config().items() if not k.startswith(producer_only)}

    def _error(
        self, exc: BaseException, what: str, client_error: KafkaError | None = None
    ) -> SinkError:
        kind, cause = _classify(exc, client_error)
        return kind(f"{what}: {cause}")

    # -- phase 1 -----------------------------------------------------------------------------

    def begin_transaction(self, ctx: TaskContext) -> KafkaTransaction:
        transactional_id = self.transactional_id(ctx.sink_id, ctx.partition)
        client_errors = _ClientErrors()
        producer = self._producer(transactional_id, client_errors)
        try:
            # Fences every earlier attempt of this partition and aborts its open transaction.
            producer.init_transactions(self.timeout)
        except KafkaException as exc:
            with contextlib.suppress(KafkaException):  # raises again on fatal errors
                producer.poll(0)  # serves error_cb: why the broker could not be reached
            raise self._error(
                exc, f"cannot start transactions on {self.bootstrap_servers}", client_errors.last
            ) from exc
        txn = KafkaTransaction(ctx, producer, transactional_id)
        # Read the marker only now, after fencing: no zombie can commit behind our back.
        last = self._committed_batch(ctx)
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
            raise self._error(exc, "begin_transaction failed") from exc
        return txn

    def _committed_batch(self, ctx: TaskContext) -> int | None:
        """The last batch this partition committed, from its marker group's offset.

        A group coordinator that is still loading or moving (a fresh or restarted broker)
        answers with a retriable error; that is waited out within the operation timeout,
        never read as "no marker", which would write a committed batch again.
        """
        try:
            position = retry_while_coordinator_busy(
                lambda: self._read_marker(ctx), self.timeout, f"sink {ctx.sink_id!r} marker"
            )
        except KafkaException as exc:
            raise self._error(exc, "reading the commit marker failed") from exc
        if position.offset < 1:
            return None
        return int(position.offset) - 1

    def _read_marker(self, ctx: TaskContext) -> TopicPartition:
        consumer = Consumer(
            {
                **self._admin_only_config(),
                "group.id": self.marker_group(ctx.sink_id, ctx.query_id, ctx.partition),
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        try:
            (position,) = consumer.committed([TopicPartition(self.marker_topic, 0)], self.timeout)
        finally:
            consumer.close()
        if position.error is not None:
            raise KafkaException(position.error)
        return position

    def _check_topic(self, topic: str) -> None:
        """Fail clearly on a missing topic instead of letting the broker auto-create it."""
        if topic in self._known_topics:
            return
        admin = AdminClient(self._admin_only_config())
        try:
            metadata = admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise self._error(exc, f"cannot read metadata from {self.bootstrap_servers}") from exc
        self._known_topics = set(metadata.topics)
        if topic not in self._known_topics:
            raise PermanentSinkError(
                f"topic {topic!r} does not exist on {self.bootstrap_servers}; create it first"
            )

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
            topic = self.topic or ""
            columns = record_columns(
                batch,
                self.value_format,
                self.key_column,
                serializer,
                topic,
                serializer_label=label,
            )
        except ValueError as exc:
            raise PermanentSinkError(str(exc)) from exc
        except SerializerServiceError as exc:
            kind = TransientSinkError if exc.retryable else PermanentSinkError
            raise kind(str(exc)) from exc
        self._check_topics(txn, columns)
        self._produce_all(txn, columns)
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

    def _check_topics(self, txn: KafkaTransaction, columns: RecordColumns) -> None:
        """Every row has a topic, and every topic named by a ``topic`` column exists."""
        if columns.topics is None:
            if self.topic is None:
                self._no_topic(txn, 0)
            return
        named = set(columns.topics)
        if None in named and self.topic is None:
            self._no_topic(txn, columns.topics.index(None))
        for topic in sorted(t for t in named if t is not None and t != self.topic):
            self._check_topic(topic)

    def _no_topic(self, txn: KafkaTransaction, index: int) -> None:
        raise PermanentSinkError(
            f"row {txn.rows + index} has no topic (no topic column value and no default topic)"
        )

    def _produce_all(self, txn: KafkaTransaction, columns: RecordColumns) -> None:
        """Produce every record; the loops are lean because they run once per row."""
        produce = txn.producer.produce
        delivered = txn.delivered
        values = columns.values
        keys = columns.keys or [None] * len(values)
        simple = columns.topics is None and columns.partitions is None and columns.headers is None
        start, current, end = 0, 0, len(values)
        while start < end:
            try:
                if simple:
                    for current in range(start, end):
                        produce(self.topic, values[current], keys[current], on_delivery=delivered)
                else:
                    for current in range(start, end):
                        record = columns.record(current)
                        produce(
                            record.topic or self.topic,
                            record.value,
                            record.key,
                            -1 if record.partition is None else record.partition,
                            on_delivery=delivered,
                            headers=record.headers,
                        )
                start = end
            except BufferError:
                # local queue full: serve the delivery queue until some records are acked (only
                # failures call back, so a long poll would wait out its whole timeout)
                txn.producer.flush(0.02)
                start = current
            except KafkaException as exc:
                raise self._error(exc, f"producing row {txn.rows + current} failed") from exc
        txn.rows += len(values)

    def pre_commit(self, txn: KafkaTransaction) -> Committable:
        ctx = txn.ctx
        payload = KafkaPayload(txn.transactional_id, txn.rows, skipped=txn.skip)
        if not txn.skip:
            group_name = self.marker_group(ctx.sink_id, ctx.query_id, ctx.partition)
            if self.marker_log_topic is not None:
                key, value = marker_record(group_name, ctx.query_id, ctx.partition, ctx.batch_id)
                try:
                    txn.producer.produce(
                        self.marker_log_topic, value, key, 0, on_delivery=txn.delivered
                    )
                except KafkaException as exc:
                    raise self._error(exc, "producing the marker log record failed") from exc
            remaining = txn.producer.flush(self.timeout)
            if txn.errors:
                # A fenced zombie or a broker restart fails deliveries too; only rejections
                # of the records themselves are permanent.
                kind = PermanentSinkError if txn.permanent else TransientSinkError
                raise kind(f"the broker rejected records: {'; '.join(txn.errors)}")
            if remaining:
                raise TransientSinkError(
                    f"{remaining} record(s) not delivered within {self.timeout}s"
                )
            marker = TopicPartition(
                self.marker_topic,
                0,
                ctx.batch_id + 1,
                metadata=json.dumps({"query_id": ctx.query_id, "batch_id": ctx.batch_id}),
            )
            group = Consumer({**self._admin_only_config(), "group.id": group_name})
            try:
                metadata = group.consumer_group_metadata()
            finally:
                group.close()
            try:
                txn.producer.send_offsets_to_transaction([marker], metadata, self.timeout)
            except KafkaException as exc:
                raise self._error(exc, "sending the commit marker failed") from exc
        return Committable.for_task(ctx, payload)

    def abort(self, txn: KafkaTransaction) -> None:
        if txn.skip:
            return
        try:
            txn.producer.abort_transaction(self.timeout)
        except KafkaException:
            # The broker aborts it when the next attempt's init_transactions fences us, or
            # at transaction.timeout.ms.
            _log.warning("abort_transaction failed for %s", txn.transactional_id, exc_info=True)

    # -- phase 2 (in the task) -------------------------------------------------------------

    def commit_in_task(self, txn: KafkaTransaction) -> CommitOutcome:
        if txn.skip:
            return CommitOutcome.ALREADY_COMMITTED  # the marker showed the batch committed
        started = time.monotonic()
        try:
            txn.producer.commit_transaction(self.timeout)
        except KafkaException as exc:
            error = exc.args[0]
            if error.retriable():  # a timed-out commit may be called again
                raise self._error(exc, "commit_transaction failed") from exc
            raise SinkError(
                f"commit_transaction failed and the transaction is lost ({error.name()}: "
                f"{error.str()}): a newer attempt of this partition fenced this producer, "
                "or the broker aborted the transaction after transaction.timeout.ms; the "
                "task fails and a new attempt writes the data"
            ) from exc
        _log.debug("committed %s in %.3fs", txn.transactional_id, time.monotonic() - started)
        return CommitOutcome.COMMITTED

    def sweep(self, sink_id: str, keep: Sequence[Committable] = ()) -> int:
        """Abort lingering transactions of this sink once per process (query start), so
        ``read_committed`` consumers are not stalled by a crashed run until its timeout."""
        if self._swept_prefix:
            return 0
        if not self._probe(sink_id, 0):
            # Broker unreachable or credentials refused: do not wait out every probe; the
            # batch's tasks report the cause, and the next batch sweeps again.
            return 0
        partitions = max(self.lingering_probe, self._partitions_seen(sink_id))
        for partition in range(1, partitions):
            if self.transactional_id(sink_id, partition) not in self._probed:
                self._probe(sink_id, partition)
        self._swept_prefix = True
        _log.info(
            "sink %r: probed %d transactional ids for lingering transactions", sink_id, partitions
        )
        return 0

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
            if not self._probe_id(transactional_id):
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

    def committed_partitions(
        self, scope: RecoveryScope, batch_id: int, footprint: Footprint
    ) -> set[int] | None:
        """Partitions whose marker group (under the footprint's prefix) shows ``batch_id``
        or a later batch committed."""
        prefix = str(footprint.naming.get("transactional_id_prefix", self.prefix))
        client_errors = _ClientErrors()
        config: dict[str, Any] = {**self._admin_only_config(), "error_cb": client_errors}
        admin = AdminClient(config)
        try:
            groups = [
                g
                for g in self._marker_groups(admin, scope.sink_id, prefix)
                if g[1] == scope.query_id
            ]
            markers = self._marker_offsets(admin, groups)
            if self.marker_log_topic is not None:
                markers += self._restored_markers(admin, scope, prefix, footprint, markers)
        except (KafkaException, TimeoutError) as exc:
            admin.poll(0)  # serves error_cb: why the broker could not be reached
            kind, cause = _classify(exc, client_errors.last)
            raise kind(
                f"cannot read the marker groups {prefix}.{scope.sink_id}.* on "
                f"{self.bootstrap_servers}: {cause}"
            ) from exc
        return {m.partition for m in markers if m.batch_id >= batch_id}

    def _restored_markers(
        self,
        admin: Any,
        scope: RecoveryScope,
        prefix: str,
        footprint: Footprint,
        markers: list[TargetMarker],
    ) -> list[TargetMarker]:
        """Markers the marker log holds for groups the broker no longer has (or holds
        behind), committed to their groups again so that the tasks read them as usual.

        The log is read only when groups are missing: none for the query, or fewer than
        the footprint's partitions."""
        log_topic = str(self.marker_log_topic)
        self._ensure_marker_log(admin)
        present = {m.partition for m in markers if m.query_id == scope.query_id}
        if present and len(present) >= footprint.partitions:
            return []
        key_prefix = f"{prefix}.{scope.sink_id}.{scope.query_id}.p"
        try:
            logged = read_marker_log(self._admin_only_config(), log_topic, key_prefix, self.timeout)
        except ValueError as exc:
            raise PermanentSinkError(str(exc)) from exc
        newest = {m.partition: m.batch_id for m in markers if m.query_id == scope.query_id}
        lost = sorted(
            (
                m
                for m in logged.values()
                if m.query_id == scope.query_id and newest.get(m.partition, -1) < m.batch_id
            ),
            key=lambda m: m.partition,
        )
        if not lost:
            return []
        restore(admin, self.marker_topic, lost, self.timeout)
        _log.warning(
            "sink %r query %s: %d marker group(s) were gone from the broker (expired after "
            "offsets.retention.minutes?); restored from the marker log %r: %s",
            scope.sink_id,
            scope.query_id,
            len(lost),
            log_topic,
            ", ".join(f"p{m.partition}=batch {m.batch_id}" for m in lost),
        )
        return [TargetMarker(m.query_id, m.partition, m.batch_id) for m in lost]

    def _ensure_marker_log(self, admin: Any) -> None:
        """Create the marker log topic once per process, or check the existing one."""
        if self._marker_log_ready:
            return
        try:
            ensure_marker_log(admin, str(self.marker_log_topic), self.timeout)
        except ValueError as exc:
            raise PermanentSinkError(str(exc)) from exc
        self._known_topics.add(str(self.marker_log_topic))
        self._marker_log_ready = True

    def _probe(self, sink_id: str, partition: int) -> bool:
        return self._probe_id(self.transactional_id(sink_id, partition))

    def _probe_id(self, transactional_id: str) -> bool:
        """``init_transactions`` on one transactional id: aborts its open transaction."""
        producer = self._producer(transactional_id)
        try:
            producer.init_transactions(self.timeout)
            self._probed.add(transactional_id)
            return True
        except KafkaException as exc:
            _log.warning("probing %s for a lingering transaction failed: %s", transactional_id, exc)
            return False
        finally:
            del producer  # no librdkafka client may outlive this (forked tasks follow)

    # -- read-only inspection -----------------------------------------------------------------

    def inspect(self, sink_id: str) -> Inspection:
        """Marker offsets and partitions held back by an open transaction, without probing.

        confluent-kafka's AdminClient cannot list or describe transactions, and
        ``init_transactions`` (the sweep's probe) aborts what it finds, so an open
        transaction is only visible as a partition whose last stable offset (what a
        ``read_committed`` reader may read up to) is below its high watermark.
        """
        admin = AdminClient(self._admin_only_config())
        groups = self._marker_groups(admin, sink_id)
        markers = tuple(self._marker_offsets(admin, groups))
        pending = tuple(self._open_transactions(admin))
        probes = max(self.lingering_probe, self._partitions_seen(sink_id))
        topics = ", ".join(sorted(self._inspected_topics()))
        notes = (
            f"kafka: open transactions are seen per topic partition (last stable offset below "
            f"the high watermark) on {topics} only; Kafka's admin API as used here cannot list "
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

    def _inspected_topics(self) -> set[str]:
        return {t for t in (self.topic, self.marker_topic, self.marker_log_topic) if t}

    def _marker_groups(
        self, admin: Any, sink_id: str, id_prefix: str | None = None
    ) -> list[tuple[str, str, int]]:
        """(group, query id, partition) of every marker group of the sink (under this
        sink's ``transactional_id_prefix``, or ``id_prefix``)."""
        listing = admin.list_consumer_groups(request_timeout=self.timeout).result(self.timeout)
        prefix = f"{id_prefix or self.prefix}.{sink_id}."
        found = []
        for group in listing.valid:
            name = str(group.group_id)
            if not name.startswith(prefix):
                continue
            query_id, sep, tail = name[len(prefix) :].rpartition(".p")
            if sep and query_id and tail.isdigit():
                found.append((name, query_id, int(tail)))
        return sorted(found)

    def _marker_offsets(self, admin: Any, groups: list[tuple[str, str, int]]) -> list[TargetMarker]:
        markers = []
        for name, query_id, partition in groups:
            request = ConsumerGroupTopicPartitions(name, [TopicPartition(self.marker_topic, 0)])
            futures = admin.list_consumer_group_offsets([request], request_timeout=self.timeout)
            result = futures[name].result(self.timeout)
            for tp in result.topic_partitions or ():
                if tp.error is None and tp.offset >= 1:
                    markers.append(TargetMarker(query_id, partition, int(tp.offset) - 1))
        return markers

    def _open_transactions(self, admin: Any) -> list[PendingWork]:
        metadata = admin.list_topics(timeout=self.timeout)
        partitions = [
            TopicPartition(topic, p)
            for topic in sorted(self._inspected_topics())
            if topic in metadata.topics
            for p in sorted(metadata.topics[topic].partitions)
        ]
        if not partitions:
            return []
        stable = self._end_offsets(admin, partitions, IsolationLevel.READ_COMMITTED)
        high = self._end_offsets(admin, partitions, IsolationLevel.READ_UNCOMMITTED)
        stuck = [
            tp for tp in partitions if stable[tp.topic, tp.partition] < high[tp.topic, tp.partition]
        ]
        ages = self._first_unstable_ages(stuck, stable)
        return [
            PendingWork(
                kind=WorkKind.OPEN,
                ident=f"{tp.topic}[{tp.partition}]",
                age_seconds=ages.get((tp.topic, tp.partition)),
                detail=(
                    f"last stable offset {stable[tp.topic, tp.partition]} < high watermark "
                    f"{high[tp.topic, tp.partition]}: an open transaction holds "
                    "read_committed readers back"
                ),
            )
            for tp in stuck
        ]

    def _end_offsets(
        self, admin: Any, partitions: list[TopicPartition], isolation: Any
    ) -> dict[tuple[str, int], int]:
        request = {tp: OffsetSpec.latest() for tp in partitions}  # type: ignore[no-untyped-call]
        futures = admin.list_offsets(
            request, isolation_level=isolation, request_timeout=self.timeout
        )
        return {
            (tp.topic, tp.partition): int(future.result(self.timeout).offset)
            for tp, future in futures.items()
        }

    def _first_unstable_ages(
        self, stuck: list[TopicPartition], stable: dict[tuple[str, int], int]
    ) -> dict[tuple[str, int], float]:
        """Age of the first record past the last stable offset: how long the open
        transaction has held readers back (read_uncommitted, never committing offsets)."""
        if not stuck:
            return {}
        consumer = Consumer(
            {
                **self._admin_only_config(),
                "group.id": f"{self.prefix}.status",
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
            }
        )
        ages: dict[tuple[str, int], float] = {}
        try:
            consumer.assign(
                [
                    TopicPartition(tp.topic, tp.partition, stable[tp.topic, tp.partition])
                    for tp in stuck
                ]
            )
            deadline = time.monotonic() + min(self.timeout, 10.0)
            while len(ages) < len(stuck) and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                key = (str(msg.topic()), int(msg.partition() or 0))
                _, stamp = msg.timestamp()
                if key not in ages and stamp > 0:
                    ages[key] = max(0.0, time.time() - stamp / 1000.0)
        finally:
            consumer.close()
        return ages

    def _partitions_seen(self, sink_id: str) -> int:
        """One more than the highest partition with a marker group, in any query."""
        admin = AdminClient(self._admin_only_config())
        try:
            listing = admin.list_consumer_groups(request_timeout=self.timeout).result(self.timeout)
        except Exception as exc:
            _log.warning("listing consumer groups failed: %s", exc)
            return 0
        prefix = f"{self.prefix}.{sink_id}."
        highest = -1
        for group in listing.valid:
            name = str(group.group_id)
            if name.startswith(prefix) and ".p" in name:
                tail = name.rsplit(".p", 1)[1]
                if tail.isdigit():
                    highest = max(highest, int(tail))
        return highest + 1
