"""A query down for longer than its Kafka markers live.

A second broker, with its own data directory and ``offsets.retention.minutes=1``, lets the
marker consumer groups expire within the test. After the expiry:

- a batch that crashed after its decision is still skipped on restart (the commit log says
  it committed), so nothing is written twice;
- a batch that crashed with some tasks committed and no decision cannot be told apart
  from one where nothing committed: the restart refuses with ``CommitStateUnknownError``
  and writes nothing, instead of writing the committed partitions again;
- the same batch, with ``marker_log_topic`` set, finishes exactly once: the driver restores
  the expired groups from the compacted marker log (with their metadata: the batch's
  source offsets stay readable) and the committed partition is skipped;
- a first batch (no batch before it whose markers could show the expiry) that crashed the
  same way is refused too, because its first run is older than the broker's
  ``offsets.retention.minutes``, which the sink reads from the broker.
"""

from __future__ import annotations

import gc
import json
import socket
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from tests.harness.kafka_topics import TIMEOUT
from tests.harness.services import Services
from tests.harness.targets import KafkaTarget
from twopc.local import LocalStream

# its own broker with a one-minute offsets retention (~90 s): --extended and the campaigns
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.extended]


def _free_base_port() -> int:
    """A port with the two after it free too (client, controller, SASL listener)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base < 60000 and all(_free(base + i) for i in (1, 2)):
            return base
    raise RuntimeError("no three free consecutive ports")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def short_retention_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_base_port()
    services = Services(
        env={
            "TWOPC_SERVICES_DIR": str(tmp_path_factory.mktemp("short-retention")),
            "TWOPC_KAFKA_PORT": str(port),
            "TWOPC_KAFKA_EXTRA_CONFIG": (
                "offsets.retention.minutes=1\noffsets.retention.check.interval.ms=1000"
            ),
        }
    )
    env = services.start("kafka")
    try:
        yield env["KAFKA_BOOTSTRAP_SERVERS"]
    finally:
        services.stop("kafka")


def _batch(first: int, partitions: int = 2, rows: int = 20) -> list[pa.Table]:
    tables = []
    for p in range(partitions):
        ids = list(range(first + p * rows, first + (p + 1) * rows))
        tables.append(pa.table({"id": ids, "key": [str(i) for i in ids]}))
    return tables


def _sink(bootstrap: str, topic: str, marker_log: str | None = None) -> twopc.Sink[Any]:
    return twopc.create_sink(
        "kafka",
        bootstrap_servers=bootstrap,
        topic=topic,
        key_column="key",
        operation_timeout_seconds=15,
        marker_log_topic=marker_log,
    )


def _cleanup_policy(bootstrap: str, topic: str) -> str:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)
    return str(entries["cleanup.policy"].value)


def _marker_groups(bootstrap: str, sink_id: str, topic: str) -> list[str]:
    """Marker groups of ``sink_id`` that still hold a committed offset."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    listing = admin.list_consumer_groups(request_timeout=TIMEOUT).result(TIMEOUT)
    alive = []
    for group in listing.valid:
        name = str(group.group_id)
        if f".{sink_id}." not in name:
            continue
        request = ConsumerGroupTopicPartitions(name, [TopicPartition(topic, 0)])
        result = admin.list_consumer_group_offsets([request], request_timeout=TIMEOUT)[name]
        partitions = result.result(TIMEOUT).topic_partitions or []
        if any(tp.offset >= 0 for tp in partitions):
            alive.append(name)
    return alive


def test_replays_after_the_markers_expired(short_retention_broker: str, tmp_path: Path) -> None:
    target = KafkaTarget(short_retention_broker)
    decided = target.prepare(f"mr-{uuid.uuid4().hex[:8]}", "per_partition", tmp_path, 2)
    window = target.prepare(f"mr-{uuid.uuid4().hex[:8]}", "per_partition", tmp_path, 2)
    logged = target.prepare(f"mr-{uuid.uuid4().hex[:8]}", "per_partition", tmp_path, 2)
    first = target.prepare(f"mr-{uuid.uuid4().hex[:8]}", "per_partition", tmp_path, 2)
    specs = (decided, window, logged, first)
    marker_logs = {logged.sink_id: f"{logged.table}-markers"}
    batches = [_batch(0), _batch(1000)]
    # tasks run inline, partition 0 before partition 1: partition 0 has committed in its task
    # when partition 1 fails before its own commit
    window_faults = "before_task_commit:raise@batch=1,partition=1"
    runs = {
        # crashed after the decision: the tasks committed, the log knows it
        decided.sink_id: "after_decision:kill@batch=1",
        # partition 0 committed in its task, partition 1 failed before its commit
        window.sink_id: window_faults,
        # the same, with a marker log that outlives the groups
        logged.sink_id: window_faults,
        # the same in the query's first batch
        first.sink_id: "before_task_commit:raise@batch=0,partition=1",
    }
    for spec in specs:
        stream = LocalStream(str(tmp_path / spec.sink_id / "chk"), batches, kafka_topic="in")
        writer = twopc.local.foreach_batch(
            _sink(spec.address, spec.table, marker_logs.get(spec.sink_id)),
            sink_id=spec.sink_id,
            commit_log=str(tmp_path / spec.sink_id / "log"),
            faults=twopc.FaultPlan.parse(runs[spec.sink_id]),
            processes=spec is decided,
        )
        if spec is decided:
            # the kill lands in the driver itself: run it in a child process
            import multiprocessing

            child = multiprocessing.get_context("fork").Process(target=stream.run, args=(writer,))
            # no librdkafka client of an earlier test may be alive when the driver forks: the
            # child would collect it, and its threads do not exist there (SIGSEGV)
            gc.collect()
            child.start()
            child.join(120)
            assert child.exitcode == -9
        else:
            with pytest.raises(twopc.TwoPCError):
                stream.run(writer)
    before = {spec.sink_id: target.committed(spec) for spec in specs}
    assert len(before[decided.sink_id]) == 80  # both batches, once
    assert len(before[window.sink_id]) == 60  # batch 0 and batch 1's partition 0
    assert before[logged.sink_id] == before[window.sink_id]
    assert len(before[first.sink_id]) == 20  # batch 0's partition 0
    # twopc created the marker log, compacted
    assert _cleanup_policy(short_retention_broker, marker_logs[logged.sink_id]) == "compact"

    deadline = time.monotonic() + 240
    while any(_marker_groups(short_retention_broker, spec.sink_id, spec.table) for spec in specs):
        assert time.monotonic() < deadline, "the marker groups never expired"
        time.sleep(5)

    def restart(spec: Any) -> None:
        stream = LocalStream(str(tmp_path / spec.sink_id / "chk"), batches, kafka_topic="in")
        stream.run(
            twopc.local.foreach_batch(
                _sink(spec.address, spec.table, marker_logs.get(spec.sink_id)),
                sink_id=spec.sink_id,
                commit_log=str(tmp_path / spec.sink_id / "log"),
            )
        )

    restart(decided)  # the replay of batch 1 is skipped by the commit log
    assert target.committed(decided) == before[decided.sink_id]

    with pytest.raises(twopc.CommitStateUnknownError, match="even for batch 0"):
        restart(window)
    assert target.committed(window) == before[window.sink_id]  # nothing written twice

    with pytest.raises(twopc.CommitStateUnknownError, match="drops its markers 60 s after"):
        restart(first)
    assert target.committed(first) == before[first.sink_id]  # nothing written twice

    restart(logged)  # groups restored from the log: partition 0 skipped, partition 1 written
    expected = Counter(i for table in batches for part in table for i in part["id"].to_pylist())
    assert target.committed(logged) == expected  # both batches, each row once
    # the restored partition 0 marker keeps the batch's source offsets, as the log kept them
    sink = _sink(logged.address, logged.table, marker_logs[logged.sink_id])
    ends = {str(p): sum(len(b[p]) for b in batches) for p in range(len(batches[0]))}
    assert json.loads(twopc.starting_offsets(sink, logged.sink_id)) == {"in": ends}
    for spec in specs:
        target.cleanup(spec)
