"""Helpers for the Kafka sink tests: topics, readers of committed output, kcat.

Everything talks to the real broker. Readers assign every partition of a topic from the
beginning and read until each partition reports its end (for ``read_committed`` that end is
the last stable offset, so a lingering open transaction shows up as "nothing visible past
it"). Every client is closed before the helper returns.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 30.0


def unique(prefix: str) -> str:
    """A name no other test (or other test run on the same broker) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(
    bootstrap: str,
    name: str | None = None,
    *,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
) -> str:
    """Create a topic (a fresh name unless given) and wait until it is usable."""
    name = name or unique("twopc-kafka-it")
    client = admin(bootstrap)
    topic = NewTopic(
        name, num_partitions=partitions, replication_factor=1, config=dict(config or {})
    )
    for future in client.create_topics([topic]).values():
        future.result(TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        metadata = client.list_topics(name, timeout=TIMEOUT).topics.get(name)
        if metadata is not None and metadata.error is None and len(metadata.partitions):
            return name
        time.sleep(0.1)
    raise AssertionError(f"topic {name} did not become ready")


def topic_exists(bootstrap: str, name: str) -> bool:
    """Whether the broker knows the topic; lists all topics, so it never auto-creates one."""
    return name in admin(bootstrap).list_topics(timeout=TIMEOUT).topics


@dataclass(frozen=True)
class Message:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None

    @property
    def text_key(self) -> str:
        return (self.key or b"").decode()


def _partitions(bootstrap: str, topic: str) -> list[int]:
    metadata = admin(bootstrap).list_topics(topic, timeout=TIMEOUT).topics[topic]
    if metadata.error is not None:
        raise KafkaException(metadata.error)
    return sorted(metadata.partitions)


@contextlib.contextmanager
def reader(
    bootstrap: str, topic: str, isolation: str = "read_committed"
) -> Iterator[tuple[Consumer, list[int]]]:
    """A consumer assigned to every partition of ``topic`` from the beginning; closed after."""
    partitions = _partitions(bootstrap, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("twopc-reader"),
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        yield consumer, partitions
    finally:
        consumer.close()


def read_messages(
    bootstrap: str, topic: str, isolation: str = "read_committed", timeout: float = 60.0
) -> list[Message]:
    """Every record a consumer with this isolation level can see, up to each partition's end
    (for ``read_committed``: the last stable offset)."""
    with reader(bootstrap, topic, isolation) as (consumer, partitions):
        seen: list[Message] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err, partition, offset = msg.error(), msg.partition(), msg.offset()
            assert partition is not None and offset is not None
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                    if at_end >= set(partitions):
                        return seen
                    continue
                raise KafkaException(err)
            at_end.discard(partition)
            seen.append(Message(partition, offset, msg.key(), msg.value()))
        raise AssertionError(f"did not reach the end of {topic} within {timeout}s")


def committed_keys(bootstrap: str, topic: str) -> Counter[str]:
    """How often each key is visible to a ``read_committed`` consumer."""
    return Counter(m.text_key for m in read_messages(bootstrap, topic, "read_committed"))


def uncommitted_keys(bootstrap: str, topic: str) -> Counter[str]:
    """How often each key is in the log at all (``read_uncommitted``, aborted data too)."""
    return Counter(m.text_key for m in read_messages(bootstrap, topic, "read_uncommitted"))


def end_offset(
    bootstrap: str, topic: str, partition: int = 0, isolation: str = "read_committed"
) -> int:
    """The end offset a consumer with this isolation level sees: for ``read_committed`` the
    last stable offset, for ``read_uncommitted`` the high watermark."""
    with reader(bootstrap, topic, isolation) as (consumer, _):
        _, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=TIMEOUT, cached=False
        )
        return int(high)


def stable_end(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The end offset a ``read_committed`` consumer sees (the last stable offset)."""
    return end_offset(bootstrap, topic, partition)


def wait_until_stable(bootstrap: str, topic: str, within: float) -> float:
    """Seconds until the last stable offset reaches the high watermark; fails after
    ``within`` seconds (a transaction holding read_committed readers back)."""
    started = time.monotonic()
    while True:
        try:
            stable = end_offset(bootstrap, topic, 0, "read_committed")
            high = end_offset(bootstrap, topic, 0, "read_uncommitted")
        except KafkaException as exc:
            # right after a stalled broker resumes, it may answer "not leader" or time out
            # for a moment while it re-elects itself; only a lasting error fails the wait
            if not _is_retriable(exc) or time.monotonic() - started >= within:
                raise
            time.sleep(0.5)
            continue
        if stable == high:
            return time.monotonic() - started
        assert time.monotonic() - started < within, (
            f"last stable offset {stable} still below the high watermark {high} after "
            f"{within}s: read_committed readers are stuck behind a transaction"
        )
        time.sleep(0.2)


def _is_retriable(exc: KafkaException) -> bool:
    """Whether a client error is one a recovering broker gives for a moment."""
    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError):
        return False
    transient = {
        KafkaError._UNKNOWN_PARTITION,  # metadata not refreshed yet after the broker resumed
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
    }
    return bool(error.retriable()) or error.code() in transient


# -- kcat ------------------------------------------------------------------------------------


def ensure_kcat() -> str | None:
    """Path of ``kcat``, installed with apt-get when missing; None if that is impossible."""
    found = shutil.which("kcat")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None:
        return None
    for command in (
        [apt, "install", "-y", "kcat"],
        [apt, "update"],
        [apt, "install", "-y", "kcat"],
    ):
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=300,
                check=False,
                env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            )
        found = shutil.which("kcat")
        if found:
            return found
    return None


def kcat_keys(kcat: str, bootstrap: str, topic: str) -> Counter[str]:
    """Keys a ``read_committed`` kcat consumer prints, reading to the end and exiting."""
    proc = subprocess.run(
        [
            kcat,
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-X",
            "isolation.level=read_committed",
            "-f",
            "%k\\n",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"kcat failed ({proc.returncode}): {proc.stderr}"
    return Counter(line for line in proc.stdout.splitlines() if line)


# -- consumer groups -------------------------------------------------------------------------


def group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The offsets a consumer group has committed, as the broker reports them."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    request = ConsumerGroupTopicPartitions(group)
    client = admin(bootstrap)  # kept alive until the answer arrives
    futures = client.list_consumer_group_offsets([request], request_timeout=TIMEOUT)
    result = futures[group].result(TIMEOUT)
    return {
        (str(tp.topic), int(tp.partition)): int(tp.offset)
        for tp in result.topic_partitions or []
        if tp.offset >= 0
    }


@dataclass(frozen=True)
class GroupRow:
    """One partition row of ``kafka-consumer-groups.sh --describe``."""

    topic: str
    partition: int
    current: int | None
    log_end: int
    lag: int | None


def describe_group_with_kafka_tool(bootstrap: str, group: str) -> list[GroupRow]:
    """``kafka-consumer-groups.sh --describe --group`` from the broker's own jars
    (``scripts/services kafka-consumer-groups``), parsed."""
    from tests.harness.processes import REPO

    done = subprocess.run(
        [
            str(REPO / "scripts" / "services"),
            "kafka-consumer-groups",
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--group",
            group,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows: list[GroupRow] = []
    header: list[str] | None = None
    for line in done.stdout.splitlines():
        cells = line.split()
        if cells[:2] == ["GROUP", "TOPIC"]:
            header = cells
            continue
        if header is None or len(cells) < len(header) or cells[0] != group:
            continue
        row = dict(zip(header, cells, strict=False))

        def number(text: str) -> int | None:
            return None if text == "-" else int(text)

        rows.append(
            GroupRow(
                row["TOPIC"],
                int(row["PARTITION"]),
                number(row["CURRENT-OFFSET"]),
                int(row["LOG-END-OFFSET"]),
                number(row["LAG"]),
            )
        )
    assert rows, f"no partition rows for group {group}:\n{done.stdout}\n{done.stderr[-2000:]}"
    return rows


def uncommitted_count(bootstrap: str, topic: str) -> int:
    """Records a read_uncommitted reader sees (aborted ones included)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"probe-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_uncommitted",
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=TIMEOUT).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        seen = 0
        idle = 0
        while idle < 6:
            msg = consumer.poll(0.5)
            if msg is None:
                idle += 1
                continue
            if msg.error() is None and msg.topic() == topic:
                seen += 1
                idle = 0
        return seen
    finally:
        consumer.close()
