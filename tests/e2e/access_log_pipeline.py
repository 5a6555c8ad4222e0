"""The access-log pipeline of the Kafka-to-Kafka tests (``test_kafka_spark.py``,
``test_kafka_progress.py``): its input lines and their expected window counts, producing
them in transactions (one aborted), reading the output windows back, and the command line
of ``tests.e2e.kafka_pipeline``."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from confluent_kafka import Producer

from tests.harness.kafka_topics import TIMEOUT, read_messages, unique

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
LINES = 300  # over 30 seconds of event time
IPS = [f"10.0.0.{n}" for n in (3, 7, 11, 19, 23)]
ABORTED_IP = "6.6.6.6"  # only in an aborted transaction: must never be counted
FLUSH_IP = "0.0.0.0"  # a late-enough line that moves the watermark past every window
MAX_OFFSETS = 40  # offsets per micro-batch: about 9 batches
CRASH_BATCH = 5  # a middle batch that emits finished windows (batches 3, 5, 6, 7, 9 do)


def _iso(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def access_lines() -> list[tuple[dt.datetime, str]]:
    """Deterministic (time, ip) pairs, in time order, 100 ms apart with some jitter."""
    lines = []
    for i in range(LINES):
        moment = START + dt.timedelta(milliseconds=100 * i + (i * 37) % 90)
        lines.append((moment, IPS[(3 * i * i + i // 7) % len(IPS)]))
    return lines


def expected_counts(lines: list[tuple[dt.datetime, str]]) -> Counter[tuple[str, str]]:
    """Requests per (window start, ip) for 5-second tumbling windows."""
    counts: Counter[tuple[str, str]] = Counter()
    for moment, ip in lines:
        seconds = int((moment - START).total_seconds()) // 5 * 5
        start = START + dt.timedelta(seconds=seconds)
        counts[(start.strftime("%Y-%m-%dT%H:%M:%SZ"), ip)] += 1
    return counts


def produce_input(bootstrap: str, topic: str, lines: list[tuple[dt.datetime, str]]) -> None:
    """The lines in transactions of 50; an aborted transaction in the middle; then a line
    far in the future so that the watermark finishes every real window."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": unique("access-log-writer")}
    )
    producer.init_transactions(TIMEOUT)
    for chunk_start in range(0, len(lines), 50):
        if chunk_start == 150:
            producer.begin_transaction()
            for moment, _ in lines[chunk_start : chunk_start + 20]:
                producer.produce(topic, value=f"{_iso(moment)} {ABORTED_IP}".encode())
            producer.flush(TIMEOUT)
            producer.abort_transaction(TIMEOUT)
        producer.begin_transaction()
        for moment, ip in lines[chunk_start : chunk_start + 50]:
            producer.produce(topic, key=ip.encode(), value=f"{_iso(moment)} {ip}".encode())
        producer.commit_transaction(TIMEOUT)
    producer.begin_transaction()
    late = START + dt.timedelta(seconds=120)
    producer.produce(topic, value=f"{_iso(late)} {FLUSH_IP}".encode())
    producer.commit_transaction(TIMEOUT)
    assert producer.flush(TIMEOUT) == 0


def committed_windows(bootstrap: str, topic: str) -> list[dict[str, object]]:
    """The output records a read_committed consumer sees, decoded."""
    out = []
    for message in read_messages(bootstrap, topic, "read_committed"):
        assert message.value is not None
        record = json.loads(message.value)
        assert message.key == str(record["ip"]).encode(), message
        out.append(record)
    return out


def assert_each_window_once(
    windows: Iterable[tuple[str, str, int]], lines: list[tuple[dt.datetime, str]]
) -> None:
    """``(window_start, ip, count)`` as a reader of the output sees them: every window of
    ``lines`` exactly once, with its count."""
    windows = [(str(start), str(ip), int(count)) for start, ip, count in windows]
    seen = Counter((start, ip) for start, ip, _ in windows)
    duplicates = {k: n for k, n in seen.items() if n > 1}
    assert not duplicates, f"windows written more than once: {sorted(duplicates)[:10]}"
    assert {(start, ip): count for start, ip, count in windows} == dict(expected_counts(lines))


def kafka_windows(bootstrap: str, topic: str) -> list[tuple[str, str, int]]:
    """The output topic's windows as a ``read_committed`` consumer sees them."""
    return [
        (str(r["window_start"]), str(r["ip"]), int(str(r["count"])))
        for r in committed_windows(bootstrap, topic)
    ]


def pipeline_args(bootstrap: str, source: str, tmp_path: Path, *extra: str) -> list[str]:
    """``tests.e2e.kafka_pipeline`` reading ``source``, checkpoint under ``tmp_path``."""
    return [
        "-m",
        "tests.e2e.kafka_pipeline",
        "--bootstrap",
        bootstrap,
        "--input",
        source,
        "--checkpoint",
        str(tmp_path / "checkpoint"),
        "--sink-id",
        "access-counts",
        "--prefix",
        unique("access"),
        "--max-offsets-per-trigger",
        str(MAX_OFFSETS),
        *extra,
    ]
