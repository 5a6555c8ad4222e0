"""The Kafka sink against the real broker, checked by reading the topics back.

The sink is driven directly through the protocol (``begin_transaction`` ... ``commit``) and
through the coordinator (``twopc.local.foreach_batch``, tasks inline or in child processes).
What counts is what a ``read_committed`` consumer (and ``kcat``) sees, never the sink's own
bookkeeping. Every test uses its own topic, transactional-id prefix and sink id, so tests do
not disturb one another or other users of the broker.

Tasks run inline (``processes=False``) except in one test: forking a process that holds live
librdkafka clients (a test's raw producers, an admin client) can hang or crash the child, a
hazard of the local engine's ``fork`` only (Spark forks its Python workers from a daemon
that holds no Kafka client).
"""

from __future__ import annotations

import contextlib
import gc
import json
import pickle
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

import twopc
from tests.harness.exactly_once import assert_exactly_once
from tests.harness.kafka_topics import (
    TIMEOUT,
    admin,
    committed_keys,
    create_topic,
    ensure_kcat,
    kcat_keys,
    read_messages,
    reader,
    stable_end,
    topic_exists,
    uncommitted_keys,
    unique,
)
from tests.harness.services import ServiceControl
from tests.harness.sink_errors import in_task
from twopc import local
from twopc._contract.paths import CommitPath
from twopc._coordination.phase1 import Phase1Task, _Attempt
from twopc.local import LocalStream
from twopc_kafka.sink import KafkaPayload, KafkaSink

pytestmark = pytest.mark.integration

QUERY = "query-1"


# -- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    return create_topic(kafka_bootstrap)


@pytest.fixture
def prefix() -> str:
    """A transactional-id prefix of this test only."""
    return unique("tp")


@pytest.fixture(scope="session")
def kcat() -> str:
    path = ensure_kcat()
    if path is None:
        pytest.skip("kcat is not installed and 'apt-get install -y kcat' failed")
    return path


@pytest.fixture
def raw_producers() -> Iterator[list[Producer]]:
    """Raw transactional producers of a test: open transactions are aborted at the end, so
    no test leaves a lingering transaction on the shared broker."""
    made: list[Producer] = []
    yield made
    for producer in made:
        with contextlib.suppress(KafkaException):  # fenced producers refuse everything
            producer.abort_transaction(5)


def sink_for(bootstrap: str, topic: str, prefix: str, **options: Any) -> KafkaSink:
    options.setdefault("key_column", "key")
    options.setdefault("operation_timeout_seconds", TIMEOUT)
    return KafkaSink(bootstrap, topic=topic, transactional_id_prefix=prefix, **options)


def rows(batch: int, partition: int, count: int, tag: str = "") -> pa.Table:
    """Partition ``partition`` of micro-batch ``batch``: keys ``b<batch>-p<partition>-<i>``."""
    return pa.table(
        {
            "key": [f"b{batch}-p{partition}-{i}{tag}" for i in range(count)],
            "batch": pa.array([batch] * count, pa.int64()),
            "n": pa.array(range(count), pa.int64()),
        }
    )


def keys_of(batches: list[list[pa.Table]]) -> set[str]:
    return {k for parts in batches for table in parts for k in table.column("key").to_pylist()}


def ctx(sink_id: str, batch: int, partition: int, attempt: int = 0) -> twopc.TaskContext:
    return twopc.TaskContext(sink_id, QUERY, batch, partition, attempt)


def write_direct(sink: KafkaSink, context: twopc.TaskContext, table: pa.Table) -> Any:
    """Phase 1 through the protocol: begin, invoke per record batch, pre_commit."""
    txn = sink.begin_transaction(context)
    for record_batch in table.to_batches(max_chunksize=64):
        sink.invoke(txn, record_batch)
    return txn, sink.pre_commit(txn)


# -- visibility and replay (per_partition) ----------------------------------------------------


def test_records_become_visible_only_at_commit(
    kafka_bootstrap: str, topic: str, prefix: str
) -> None:
    sink = sink_for(kafka_bootstrap, topic, prefix)
    tables = [rows(0, p, 120) for p in range(2)]
    prepared = [write_direct(sink, ctx("vis", 0, p), tables[p]) for p in range(2)]

    # Prepared (flushed, marker sent) but not committed: in the log, invisible to readers.
    assert committed_keys(kafka_bootstrap, topic) == Counter()
    assert sum(uncommitted_keys(kafka_bootstrap, topic).values()) == 240

    assert sink.commit_in_task(prepared[0][0]) is twopc.CommitOutcome.COMMITTED
    assert set(committed_keys(kafka_bootstrap, topic)) == set(tables[0].column("key").to_pylist())

    assert sink.commit_in_task(prepared[1][0]) is twopc.CommitOutcome.COMMITTED
    assert_exactly_once(committed_keys(kafka_bootstrap, topic), keys_of([tables]))

    # The marker committed with the data makes a replayed task a no-op.
    again = sink_for(kafka_bootstrap, topic, prefix)
    txn, committable = write_direct(again, ctx("vis", 0, 1, attempt=1), tables[1])
    assert txn.skip and KafkaPayload.of(committable).rows == 0
    assert again.commit_in_task(txn) is twopc.CommitOutcome.ALREADY_COMMITTED
    assert_exactly_once(committed_keys(kafka_bootstrap, topic), keys_of([tables]))


@pytest.mark.parametrize("processes", [False, True], ids=["inline", "processes"])
def test_replay_of_batch_whose_decision_was_never_recorded(
    kafka_bootstrap: str, topic: str, prefix: str, tmp_path: Path, processes: bool
) -> None:
    gc.collect()  # no librdkafka client of an earlier test may be alive when tasks fork
    batches = [[rows(b, p, 100) for p in range(3)] for b in range(3)]
    stream = LocalStream(str(tmp_path / "chk"), batches)

    crashing = local.foreach_batch(
        sink_for(kafka_bootstrap, topic, prefix),
        "replay",
        faults=twopc.FaultPlan.parse("before_decision:raise@batch=1"),
        processes=processes,
    )
    with pytest.raises(twopc.InjectedFault, match="sink 'replay', batch 1"):
        stream.run(crashing)
    # Every task of batch 1 committed its own transaction before the crash.
    assert_exactly_once(committed_keys(kafka_bootstrap, topic), keys_of(batches[:2]))

    # A new writer (a restarted query) runs batch 1 again: the markers make it a no-op.
    restarted = local.foreach_batch(
        sink_for(kafka_bootstrap, topic, prefix), "replay", processes=processes
    )
    assert stream.run(restarted) == [1, 2]
    assert_exactly_once(committed_keys(kafka_bootstrap, topic), keys_of(batches))
    assert [m.status for m in restarted.metrics] == ["committed", "committed"]

    # And once the decision is in the commit log, a third run skips the batch outright.
    third = local.foreach_batch(
        sink_for(kafka_bootstrap, topic, prefix), "replay", processes=processes
    )
    assert third.write(stream.query_id, 2, batches[2], str(tmp_path / "chk")).status == "skipped"
    assert_exactly_once(committed_keys(kafka_bootstrap, topic), keys_of(batches))


def test_aborted_transaction_is_never_visible(
    kafka_bootstrap: str, topic: str, prefix: str, kcat: str
) -> None:
    sink = sink_for(kafka_bootstrap, topic, prefix)
    doomed = rows(0, 0, 50, tag="-aborted")
    txn, _ = write_direct(sink, ctx("abort", 0, 0), doomed)
    sink.abort(txn)
    kept = rows(1, 0, 50)
    txn, _ = write_direct(sink, ctx("abort", 1, 0), kept)
    assert sink.commit_in_task(txn) is twopc.CommitOutcome.COMMITTED

    expected = set(kept.column("key").to_pylist())
    assert_exactly_once(committed_keys(kafka_bootstrap, topic), expected)
    assert_exactly_once(kcat_keys(kcat, kafka_bootstrap, topic), expected)
    # The aborted records are in the log all the same: only the isolation level hides them.
    assert set(doomed.column("key").to_pylist()) <= set(uncommitted_keys(kafka_bootstrap, topic))


def test_task_failing_half_way_leaves_nothing_visible(
    kafka_bootstrap: str, topic: str, prefix: str, tmp_path: Path, kcat: str
) -> None:
    batch = [rows(0, 0, 200)]
    failing = local.foreach_batch(
        sink_for(kafka_bootstrap, topic, prefix),
        "halfway",
        commit_log=str(tmp_path / "log"),
        faults=twopc.FaultPlan.parse("after_invoke:raise@batch=0,rows=100"),
        processes=False,
    )
    with pytest.raises(twopc.BatchFailedError, match="sink 'halfway', batch 0"):
        failing.write(QUERY, 0, batch)
    assert committed_keys(kafka_bootstrap, topic) == Counter()
    assert kcat_keys(kcat, kafka_bootstrap, topic) == Counter()

    fixed = local.foreach_batch(
        sink_for(kafka_bootstrap, topic, prefix),
        "halfway",
        commit_log=str(tmp_path / "log"),
        processes=False,
    )
    assert fixed.write(QUERY, 0, batch).status == "committed"
    assert_exactly_once(kcat_keys(kcat, kafka_bootstrap, topic), keys_of([batch]))


# -- zombies and lingering transactions --------------------------------------------------------


def test_zombie_attempt_is_fenced_by_the_next_attempt(
    kafka_bootstrap: str, topic: str, prefix: str
) -> None:
    sink = sink_for(kafka_bootstrap, topic, prefix)
    zombie_rows = rows(0, 0, 40, tag="-attempt0")
    winner_rows = rows(0, 0, 40, tag="-attempt1")
    zombie, _ = write_direct(sink, ctx("zombie", 0, 0, attempt=0), zombie_rows)
    # A retry of the same partition: same transactional.id, so init_transactions fences
    # attempt 0 and aborts its open transaction.
    winner, _ = write_direct(sink, ctx("zombie", 0, 0, attempt=1), winner_rows)
    assert zombie.transactional_id == winner.transactional_id == f"{prefix}-zombie-0"

    with pytest.raises(twopc.SinkError, match="fenced") as excinfo:
        sink.commit_in_task(zombie)
    error = excinfo.value
    assert not error.retryable, "a fenced commit must not be retried as if it were transient"
    # Asking again must fail again, never report the lost transaction as committed.
    with pytest.raises(twopc.SinkError, match="fenced"):
        sink.commit_in_task(zombie)

    assert sink.commit_in_task(winner) is twopc.CommitOutcome.COMMITTED
    assert_exactly_once(
        committed_keys(kafka_bootstrap, topic), set(winner_rows.column("key").to_pylist())
    )


def test_fenced_commit_fails_the_task_instead_of_passing_as_committed(
    kafka_bootstrap: str, topic: str, prefix: str
) -> None:
    """The in-task commit retries transient errors; a fenced producer is not one. The task
    fails naming sink, batch and partition (stamped by the core), and aborts."""
    sink = sink_for(kafka_bootstrap, topic, prefix)
    zombie, _ = write_direct(sink, ctx("zombie2", 0, 0, attempt=0), rows(0, 0, 5))
    write_direct(sink_for(kafka_bootstrap, topic, prefix), ctx("zombie2", 0, 0, 1), rows(0, 0, 5))
    task = Phase1Task(sink, "zombie2", QUERY, 0, CommitPath.TASK, retry=twopc.RetryPolicy(3, 0.0))
    with pytest.raises(twopc.SinkError, match="fenced") as excinfo:
        task._commit_in_task(zombie, _Attempt(zombie.ctx, 0, 0.0))
    error = excinfo.value
    assert (error.sink_id, error.batch_id, error.partition) == ("zombie2", 0, 0)


def test_lingering_transaction_stalls_readers_until_the_sweep(
    kafka_bootstrap: str, topic: str, prefix: str, tmp_path: Path, raw_producers: list[Producer]
) -> None:
    sink_id = "linger"
    # A crashed earlier run left a transaction open under one of this sink's ids.
    lingering = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": f"{prefix}-{sink_id}-3",
            "transaction.timeout.ms": 600_000,
        }
    )
    raw_producers.append(lingering)
    lingering.init_transactions(TIMEOUT)
    lingering.begin_transaction()
    lingering.produce(topic, key=b"lingering", value=b"{}")
    assert lingering.flush(TIMEOUT) == 0

    # Another sink's open transaction (other topic) must survive this sink's sweep.
    other_topic = create_topic(kafka_bootstrap)
    other = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{prefix}-other-0"}
    )
    raw_producers.append(other)
    other.init_transactions(TIMEOUT)
    other.begin_transaction()
    other.produce(other_topic, key=b"other", value=b"{}")
    assert other.flush(TIMEOUT) == 0

    # Data committed after the open transaction is stuck behind it for read_committed.
    before = sink_for(kafka_bootstrap, topic, prefix)
    txn, _ = write_direct(before, ctx("unrelated", 0, 0), rows(0, 0, 10))
    before.commit_in_task(txn)
    assert stable_end(kafka_bootstrap, topic) == 0
    assert committed_keys(kafka_bootstrap, topic) == Counter()
    assert uncommitted_keys(kafka_bootstrap, topic)["lingering"] == 1

    # Status sees the stalled partition without touching it (no probe, so no abort).
    inspection = sink_for(kafka_bootstrap, topic, prefix).inspect(sink_id)
    (stalled,) = inspection.pending
    assert (stalled.kind, stalled.ident) == (twopc.WorkKind.OPEN, f"{topic}[0]")
    assert stalled.age_seconds is not None and stalled.age_seconds < 600
    assert stable_end(kafka_bootstrap, topic) == 0

    # The first batch of a restarted writer sweeps the sink's ids and aborts it.
    batch = [rows(5, p, 30) for p in range(2)]
    # Tasks inline: forking while this process holds live librdkafka clients (the raw
    # producers above) can leave the child stuck on a lock held by a client thread.
    writer = local.foreach_batch(
        sink_for(kafka_bootstrap, topic, prefix),
        sink_id,
        commit_log=str(tmp_path / "log"),
        processes=False,
    )
    assert writer.write(QUERY, 5, batch).status == "committed"
    expected = keys_of([batch]) | set(rows(0, 0, 10).column("key").to_pylist())
    assert_exactly_once(committed_keys(kafka_bootstrap, topic), expected)
    assert stable_end(kafka_bootstrap, topic) > 0
    after = sink_for(kafka_bootstrap, topic, prefix).inspect(sink_id)
    assert after.pending == ()
    assert after.markers == (twopc.TargetMarker(QUERY, 0, 5), twopc.TargetMarker(QUERY, 1, 5))

    # The fenced lingering producer can no longer commit its transaction.
    with pytest.raises(KafkaException):
        lingering.commit_transaction(TIMEOUT)
    assert "lingering" not in committed_keys(kafka_bootstrap, topic)

    # ... and the other sink's transaction was left alone.
    assert stable_end(kafka_bootstrap, other_topic) == 0
    assert uncommitted_keys(kafka_bootstrap, other_topic) == Counter({"other": 1})


# -- atomic mode ------------------------------------------------------------------------------


class _Observer(threading.Thread):
    """A read_committed consumer polling while batches are written.

    Each time it has caught up with the partition's stable end (partition EOF) it records a
    snapshot: the number of records it has seen per micro-batch.
    """

    def __init__(self, bootstrap: str, topic: str, expected_total: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.expected_total = expected_total
        self.snapshots: list[dict[int, int]] = []
        self.counts: Counter[int] = Counter()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.progress = threading.Condition()

    def run(self) -> None:
        try:
            with reader(self.bootstrap, self.topic) as (consumer, _):
                self.ready.set()
                caught_up = False  # the last event was the end of the partition
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    if (
                        self.stop.is_set()
                        and caught_up
                        and sum(self.counts.values()) >= self.expected_total
                    ):
                        return
                    msg = consumer.poll(0.05)
                    if msg is None:
                        continue
                    err = msg.error()
                    if err is None:
                        caught_up = False
                        key = (msg.key() or b"").decode()  # b<batch>-p<partition>-<i>
                        self.counts[int(key.split("-")[0][1:])] += 1
                        continue
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(err)
                    caught_up = True
                    with self.progress:
                        self.snapshots.append(dict(self.counts))
                        self.progress.notify_all()
                raise AssertionError("the observer did not reach the end in time")
        except BaseException as exc:
            self.error = exc
            self.ready.set()

    def wait_for_batch(self, batch: int, timeout: float = 30.0) -> None:
        with self.progress:
            assert self.progress.wait_for(
                lambda: any(batch in s for s in self.snapshots) or self.error is not None,
                timeout,
            ), f"batch {batch} never became visible"


def test_atomic_mode_readers_never_see_part_of_a_batch(
    kafka_bootstrap: str, topic: str, prefix: str, tmp_path: Path
) -> None:
    partitions, per_partition, n_batches = 4, 150, 5
    batch_size = partitions * per_partition
    batches = [[rows(b, p, per_partition) for p in range(partitions)] for b in range(n_batches)]
    sink = sink_for(kafka_bootstrap, topic, prefix, mode="atomic")
    assert sink.single_task
    writer = local.foreach_batch(sink, "atomic", commit_log=str(tmp_path / "log"), processes=False)

    observer = _Observer(kafka_bootstrap, topic, n_batches * batch_size)
    observer.start()
    assert observer.ready.wait(TIMEOUT)
    try:
        for batch_id, parts in enumerate(batches):
            metrics = writer.write(QUERY, batch_id, parts)
            # one task, one transaction, for the whole batch
            assert (metrics.status, metrics.partitions, metrics.rows) == (
                "committed",
                1,
                batch_size,
            )
            if batch_id % 2 == 0:  # let the reader catch up now and then, interleaving reads
                observer.wait_for_batch(batch_id)
    finally:
        observer.stop.set()
        observer.join(60)
    assert not observer.is_alive()
    if observer.error is not None:
        raise observer.error

    partial = [s for s in observer.snapshots if any(n != batch_size for n in s.values())]
    assert not partial, f"a reader saw part of a batch: {partial[:3]}"
    assert observer.counts == Counter(dict.fromkeys(range(n_batches), batch_size))
    # the reader really looked in between batches, not only at the end
    assert any(0 < len(s) < n_batches for s in observer.snapshots), observer.snapshots
    assert_exactly_once(committed_keys(kafka_bootstrap, topic), keys_of(batches))


# -- errors: clear, naming sink, batch, partition and cause; nothing visible ----------------------


def test_transaction_timeout_above_broker_maximum(
    kafka_bootstrap: str, topic: str, prefix: str, tmp_path: Path
) -> None:
    sink = sink_for(kafka_bootstrap, topic, prefix, transaction_timeout_ms=900_001)
    writer = local.foreach_batch(
        sink, "too-long", commit_log=str(tmp_path / "log"), processes=False
    )
    with pytest.raises(twopc.BatchFailedError) as excinfo:
        writer.write(QUERY, 0, [rows(0, 0, 10)])
    error = excinfo.value
    assert (error.sink_id, error.batch_id, error.partition) == ("too-long", 0, 0)
    assert "transaction.max.timeout.ms" in str(error)
    assert "sink 'too-long', batch 0, partition 0" in str(error)

    with pytest.raises(twopc.PermanentSinkError, match=r"transaction\.max\.timeout\.ms"):
        sink.begin_transaction(ctx("too-long", 0, 0))
    assert uncommitted_keys(kafka_bootstrap, topic) == Counter()


def test_record_over_the_clients_message_max_bytes(
    kafka_bootstrap: str, topic: str, prefix: str, tmp_path: Path
) -> None:
    sink = sink_for(
        kafka_bootstrap, topic, prefix, producer_config={"message.max.bytes": 1_000_000}
    )
    table = pa.table(
        {
            "key": [f"big-{i}" for i in range(11)],
            "blob": ["x"] * 10 + ["y" * 2_000_000],
        }
    )
    writer = local.foreach_batch(sink, "big", commit_log=str(tmp_path / "log"), processes=False)
    with pytest.raises(twopc.BatchFailedError) as excinfo:
        writer.write(QUERY, 3, [table])
    text = str(excinfo.value)
    assert "sink 'big', batch 3, partition 0" in text
    assert "message.max.bytes" in text and "MSG_SIZE_TOO_LARGE" in text
    assert committed_keys(kafka_bootstrap, topic) == Counter()

    direct = sink_for(
        kafka_bootstrap, topic, prefix, producer_config={"message.max.bytes": 1_000_000}
    )
    txn = direct.begin_transaction(ctx("big", 4, 0))
    with pytest.raises(twopc.PermanentSinkError, match=r"message\.max\.bytes"):
        direct.invoke(txn, table.to_batches()[0])
    direct.abort(txn)


def test_record_over_the_topics_limit_then_fixed_and_rerun(
    kafka_bootstrap: str, prefix: str, tmp_path: Path, kcat: str
) -> None:
    """The broker rejects the record; nothing of the (atomic) batch is visible; after the
    topic is fixed the same batch commits exactly once."""
    topic = create_topic(kafka_bootstrap, config={"max.message.bytes": "10000"})
    batch = [rows(0, p, 50) for p in range(3)]
    # the last row of partition 2 is a 50 kB record
    pads = [""] * 49 + ["z" * 50_000]
    batch = [
        t.append_column("pad", pa.array(pads if p == 2 else [""] * 50)) for p, t in enumerate(batch)
    ]

    def writer() -> Any:
        return local.foreach_batch(
            sink_for(kafka_bootstrap, topic, prefix, mode="atomic"),
            "topic-limit",
            commit_log=str(tmp_path / "log"),
            processes=False,
        )

    with pytest.raises(twopc.BatchFailedError) as excinfo:
        writer().write(QUERY, 0, batch)
    text = str(excinfo.value)
    assert "sink 'topic-limit', batch 0, partition 0" in text
    assert "the broker rejected records" in text and "MSG_SIZE_TOO_LARGE" in text
    assert committed_keys(kafka_bootstrap, topic) == Counter()
    assert kcat_keys(kcat, kafka_bootstrap, topic) == Counter()

    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "200000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    client = admin(kafka_bootstrap)  # keep it alive until the futures are done
    for future in client.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT)
    time.sleep(1)  # let the broker apply the new topic config

    assert writer().write(QUERY, 0, batch).status == "committed"
    assert_exactly_once(kcat_keys(kcat, kafka_bootstrap, topic), keys_of([batch]))


def test_missing_topic_is_named_and_not_auto_created(
    kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    missing = unique("twopc-missing")
    writer = local.foreach_batch(
        sink_for(kafka_bootstrap, missing, prefix),
        "nowhere",
        commit_log=str(tmp_path / "log"),
        processes=False,
    )
    with pytest.raises(twopc.BatchFailedError) as excinfo:
        writer.write(QUERY, 0, [rows(0, 0, 5)])
    text = str(excinfo.value)
    assert f"topic {missing!r} does not exist" in text
    assert "sink 'nowhere', batch 0, partition 0" in text
    time.sleep(1)
    assert not topic_exists(kafka_bootstrap, missing), "the sink made the broker create it"


def test_unreachable_broker_is_a_transient_error(prefix: str, tmp_path: Path) -> None:
    sink = KafkaSink(
        "127.0.0.1:1",
        topic="anything",
        transactional_id_prefix=prefix,
        operation_timeout_seconds=2,
        lingering_probe=1,
    )
    with pytest.raises(twopc.TransientSinkError) as excinfo, in_task(ctx("offline", 0, 0)):
        sink.begin_transaction(ctx("offline", 0, 0))
    text = str(excinfo.value)
    assert text.startswith(
        "sink 'offline', batch 0, partition 0: cannot start transactions on 127.0.0.1:1"
    )
    assert "Connection refused" in text
    assert excinfo.value.retryable

    writer = local.foreach_batch(sink, "offline", commit_log=str(tmp_path / "log"), processes=False)
    # the driver's check of the marker groups, before phase 1, is the first to give up
    with pytest.raises(twopc.TransientSinkError, match="Connection refused") as failed:
        writer.write(QUERY, 0, [rows(0, 0, 5)])
    assert "sink 'offline', batch 0" in str(failed.value)
    assert "nothing of the batch was written" in str(failed.value)
    del excinfo, failed, sink, writer
    gc.collect()  # the tracebacks keep producers alive that keep dialling 127.0.0.1:1


def test_sasl_settings_against_a_plaintext_listener(
    kafka_bootstrap: str, topic: str, prefix: str
) -> None:
    """Wrong security settings: the client's SASL handshake is refused by the PLAINTEXT
    listener. (A real SASL listener with a wrong password would need another broker.)"""
    sink = sink_for(
        kafka_bootstrap,
        topic,
        prefix,
        operation_timeout_seconds=3,
        producer_config={
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "twopc",
            "sasl.password": "not-the-password",
        },
    )
    with pytest.raises(twopc.PermanentSinkError) as excinfo, in_task(ctx("sasl", 0, 0)):
        sink.begin_transaction(ctx("sasl", 0, 0))
    text = str(excinfo.value)
    assert "sink 'sasl', batch 0, partition 0" in text
    assert "authentication failed" in text and "SASL" in text
    assert "not-the-password" not in text


@pytest.mark.parametrize(
    "setting",
    [{"enable.idempotence": False}, {"acks": 1}, {"acks": "1"}, {"transactional.id": "mine"}],
    ids=["no-idempotence", "acks-1", "acks-1-string", "transactional-id"],
)
def test_settings_that_give_up_exactly_once_are_refused(
    kafka_bootstrap: str, setting: dict[str, Any]
) -> None:
    with pytest.raises(twopc.ConfigurationError, match=re.escape(next(iter(setting)))):
        KafkaSink(kafka_bootstrap, topic="t", producer_config=setting)
    with pytest.raises(twopc.ConfigurationError):
        twopc.create_sink(
            "kafka", bootstrap_servers=kafka_bootstrap, topic="t", producer_config=setting
        )


def test_repr_hides_secrets(kafka_bootstrap: str) -> None:
    sink = twopc.create_sink(
        "kafka",
        bootstrap_servers=kafka_bootstrap,
        topic="t",
        producer_config={
            "sasl.username": "alice",
            "sasl.password": "s3cret-pw",
            "sasl.oauthbearer.client.secret": "s3cret-oauth",
            "ssl.key.password": "s3cret-key",
        },
    )
    for text in (repr(sink), sink.describe(), repr(local.foreach_batch(sink, "secret"))):
        assert "s3cret" not in text, text
    assert "alice" in repr(sink)
    # the settings still travel to the executors
    assert pickle.loads(pickle.dumps(sink)).producer_config["sasl.password"] == "s3cret-pw"


# -- broker crash ------------------------------------------------------------------------------


def _port_open(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def test_broker_killed_mid_transaction(
    kafka_bootstrap: str, topic: str, prefix: str, tmp_path: Path, services: ServiceControl
) -> None:
    sink_id = "broker-crash"
    batch = [rows(0, p, 80) for p in range(2)]
    old = sink_for(kafka_bootstrap, topic, prefix)
    # Phase 1 of both partitions is under way: records are in the log, nothing committed.
    open_txns = []
    for partition, table in enumerate(batch):
        txn = old.begin_transaction(ctx(sink_id, 0, partition))
        old.invoke(txn, table.to_batches()[0])
        assert txn.producer.flush(TIMEOUT) == 0
        open_txns.append(txn)

    services.kill("kafka")
    if _port_open(kafka_bootstrap):
        services.restart("kafka")
        pytest.skip(
            f"the broker at {kafka_bootstrap} was not started by this checkout's "
            "scripts/services, so it cannot be killed from here (set TWOPC_KAFKA_PORT to a "
            "free port to get a broker of this checkout)"
        )
    services.restart("kafka")

    # The restarted query runs the batch again; its sweep and init_transactions abort the
    # transactions the crash left open. (Tasks inline: the old producers are still alive in
    # this process, and forking next to live librdkafka threads can hang the child.)
    writer = local.foreach_batch(
        sink_for(kafka_bootstrap, topic, prefix),
        sink_id,
        commit_log=str(tmp_path / "log"),
        processes=False,
    )
    assert writer.write(QUERY, 0, batch).status == "committed"
    assert_exactly_once(committed_keys(kafka_bootstrap, topic), keys_of([batch]))
    # The old copies are in the log (aborted), never visible.
    assert set(uncommitted_keys(kafka_bootstrap, topic).values()) == {2}

    for txn in open_txns:  # the pre-crash producers were fenced: they cannot commit
        with pytest.raises(KafkaException):
            txn.producer.commit_transaction(5)
    assert_exactly_once(committed_keys(kafka_bootstrap, topic), keys_of([batch]))


# -- the marker log: markers that outlive their consumer groups ---------------------------------


def _delete_marker_groups(bootstrap: str, prefix: str) -> list[str]:
    """Delete every marker group under ``prefix``, as the broker does when they expire."""
    client = admin(bootstrap)
    listing = client.list_consumer_groups(request_timeout=TIMEOUT).result(TIMEOUT)
    names = [str(g.group_id) for g in listing.valid if str(g.group_id).startswith(f"{prefix}.")]
    for future in client.delete_consumer_groups(names, request_timeout=TIMEOUT).values():
        future.result(TIMEOUT)
    return names


@pytest.mark.parametrize("logged", [True, False], ids=["marker-log", "no-marker-log"])
def test_partly_committed_batch_after_its_marker_groups_are_gone(
    kafka_bootstrap: str, topic: str, prefix: str, tmp_path: Path, logged: bool
) -> None:
    """Partition 0 of batch 1 commits in its task, partition 1 fails; then the marker groups
    are deleted (what offsets.retention.minutes does to a query down for long). With a
    marker log the restart restores them and finishes the batch exactly once; without one
    it refuses and writes nothing."""
    marker_log = f"{topic}-markers" if logged else None
    batches = [[rows(b, p, 50) for p in range(2)] for b in range(2)]
    stream = LocalStream(str(tmp_path / "chk"), batches)
    crashing = local.foreach_batch(
        sink_for(kafka_bootstrap, topic, prefix, marker_log_topic=marker_log),
        "lost-groups",
        faults=twopc.FaultPlan.parse("before_task_commit:raise@batch=1,partition=1"),
        processes=False,
    )
    with pytest.raises(twopc.BatchFailedError, match="sink 'lost-groups', batch 1"):
        stream.run(crashing)
    committed_before = committed_keys(kafka_bootstrap, topic)
    assert_exactly_once(committed_before, keys_of([batches[0], batches[1][:1]]))
    assert len(_delete_marker_groups(kafka_bootstrap, prefix)) == 2

    restarted = local.foreach_batch(
        sink_for(kafka_bootstrap, topic, prefix, marker_log_topic=marker_log),
        "lost-groups",
        processes=False,
    )
    if not logged:
        with pytest.raises(twopc.CommitStateUnknownError, match=r"batch 1 .* no longer shows"):
            stream.run(restarted)
        assert committed_keys(kafka_bootstrap, topic) == committed_before
        return
    assert stream.run(restarted) == [1]
    assert_exactly_once(committed_keys(kafka_bootstrap, topic), keys_of(batches))
    # The log holds one committed record per partition and batch that committed: batch 1's
    # partition 0 from the failed run (the restart skipped it), its partition 1 from the
    # restart.
    logged_batches = Counter(
        (message.text_key, json.loads(message.value or b"{}")["batch_id"])
        for message in read_messages(kafka_bootstrap, str(marker_log), "read_committed")
    )
    group = f"{prefix}.lost-groups.{stream.query_id}.p"
    assert logged_batches == Counter(
        {(f"{group}0", 0): 1, (f"{group}1", 0): 1, (f"{group}0", 1): 1, (f"{group}1", 1): 1}
    )


def test_marker_log_topic_that_deletes_is_refused(
    kafka_bootstrap: str, topic: str, prefix: str, tmp_path: Path
) -> None:
    deleting = create_topic(kafka_bootstrap, config={"cleanup.policy": "delete"})
    writer = local.foreach_batch(
        sink_for(kafka_bootstrap, topic, prefix, marker_log_topic=deleting),
        "bad-log",
        commit_log=str(tmp_path / "log"),
        processes=False,
    )
    with pytest.raises(twopc.PermanentSinkError) as excinfo:
        writer.write(QUERY, 0, [rows(0, 0, 5)])
    text = str(excinfo.value)
    assert "sink 'bad-log', batch 0" in text
    assert f"marker_log_topic {deleting!r} has cleanup.policy=delete" in text
    assert committed_keys(kafka_bootstrap, topic) == Counter()


def test_marker_log_topic_must_be_its_own_topic(kafka_bootstrap: str, topic: str) -> None:
    with pytest.raises(twopc.ConfigurationError, match="marker_log_topic must be a topic"):
        KafkaSink(kafka_bootstrap, topic=topic, marker_log_topic=topic)
