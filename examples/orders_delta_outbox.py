"""Order events into a Delta table and its outbox topic, with one decision, exactly once.

Every order event (``{"order_id": 17, "status": "paid", "amount": 12.5, "day": ...}``) is
upserted by ``order_id`` into the Delta table ``--table`` (partitioned by ``day``; the
table keeps each order's latest event), and published, as it arrived, to the Kafka topic
``--outbox``. Both are members of one :class:`twopc.SinkGroup`: the Delta table's files are
prepared first, the outbox's Kafka transaction (``atomic`` mode, the last resource) is the
group's decision, and the Delta commit (with the batch's app transaction) follows. A
crash anywhere leaves both with the batch or neither::

    python examples/orders_delta_outbox.py --produce 1500   # write 1500 events as files
    python examples/orders_delta_outbox.py                  # run until caught up, verdict
    python examples/orders_delta_outbox.py --verify         # the verdict alone

Kafka at ``KAFKA_BOOTSTRAP_SERVERS`` (default ``127.0.0.1:9092``). The verdict reads the
table with deltalake and the topic with a ``read_committed`` consumer: every order once in
the table with its last status, every event once in the topic. It ends with
``exactly-once: OK`` or ``exactly-once: FAILED (...)`` (exit code 1). To watch a crash,
kill the driver after the outbox's transaction of batch 1 committed and before the Delta
commit, then run it again::

    TWOPC_FAULTS="after_last_resource:kill@batch=1" python examples/orders_delta_outbox.py
    python examples/orders_delta_outbox.py                  # recovery commits batch 1: OK

Keep ``--checkpoint`` and ``--sink-id`` across restarts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import twopc

STATUSES = ("placed", "paid", "shipped")
SCHEMA = "order_id long, status string, amount double, day string"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", default="/tmp/twopc-orders-delta/in")
    parser.add_argument("--table", default="/tmp/twopc-orders-delta/orders")
    parser.add_argument("--checkpoint", default="/tmp/twopc-orders-delta/checkpoint")
    parser.add_argument("--outbox", default="orders-delta-outbox")
    parser.add_argument("--sink-id", default="orders-delta")
    parser.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    parser.add_argument("--produce", type=int, default=0, help="write this many events, exit")
    parser.add_argument("--verify", action="store_true", help="print the verdict, exit")
    return parser.parse_args(argv)


def produce(directory: Path, events: int, per_file: int = 250) -> None:
    """``events`` order events in files of ``per_file``; each order gets up to three events,
    spread over the files, so that batches update orders earlier batches wrote."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "order_id": n // len(STATUSES),
            "status": STATUSES[n % len(STATUSES)],
            "amount": round(10 + (n // len(STATUSES)) * 0.5, 2),
            "day": f"2026-11-{1 + (n // len(STATUSES)) % 3:02d}",
        }
        for n in range(events)
    ]
    existing = len(list(directory.glob("events-*.json")))
    for index in range(0, len(rows), per_file):
        path = directory / f"events-{existing + index // per_file:05d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows[index : index + per_file]))
        time.sleep(0.01)  # Spark's file source orders files by modification time


def expected(directory: Path) -> tuple[dict[int, str], Counter[tuple[int, str]]]:
    """Each order's last status, and every event, from the input files in order."""
    last: dict[int, str] = {}
    events: Counter[tuple[int, str]] = Counter()
    for path in sorted(directory.glob("events-*.json")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            last[int(event["order_id"])] = str(event["status"])
            events[(int(event["order_id"]), str(event["status"]))] += 1
    return last, events


def group(args: argparse.Namespace) -> twopc.SinkGroup:
    """The table (upsert by order) and the outbox topic, its Kafka transaction the decision."""
    table = twopc.create_sink(
        "delta",
        table_uri=args.table,
        mode="upsert",
        key_columns=["order_id"],
        create_table=True,
        partition_by=["day"],
    )
    outbox = twopc.create_sink(
        "kafka",
        bootstrap_servers=args.bootstrap,
        topic=args.outbox,
        mode="atomic",
        key_column="key",
        transactional_id_prefix=f"twopc-{args.sink_id}",
    )
    return twopc.SinkGroup(
        {
            "orders": twopc.Member(table),
            "outbox": twopc.Member(
                outbox,
                project=lambda df: df.selectExpr(
                    "CAST(order_id AS STRING) AS key", "order_id", "status"
                ),
            ),
        }
    )


def create_topic(bootstrap: str, topic: str, partitions: int = 2) -> None:
    """The outbox topic, created when missing (the Kafka sink writes to topics that exist)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=15).topics:
        return
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise


def outbox_events(bootstrap: str, topic: str) -> Counter[tuple[int, str]]:
    """Every event a ``read_committed`` consumer sees in the topic, start to end."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "orders-delta-verdict",  # assigned, never joined nor committed
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    seen: Counter[tuple[int, str]] = Counter()
    try:
        topics = consumer.list_topics(topic, timeout=15).topics
        if topic not in topics or topics[topic].error is not None:
            return seen
        partitions = set(topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while at_end != partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition() or 0)
                continue
            at_end.discard(msg.partition() or 0)
            event = json.loads(msg.value())
            seen[(int(event["order_id"]), str(event["status"]))] += 1
    finally:
        consumer.close()
    return seen


def table_rows(uri: str) -> list[dict[str, Any]]:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return list(DeltaTable(uri).to_pyarrow_table().to_pylist())
    except TableNotFoundError:
        return []


def verdict(args: argparse.Namespace) -> int:
    want, events = expected(Path(args.input))
    rows = table_rows(args.table)
    seen: dict[int, list[str]] = {}
    for row in rows:
        seen.setdefault(int(row["order_id"]), []).append(str(row["status"]))
    duplicates = sum(1 for statuses in seen.values() if len(statuses) > 1)
    missing = len(set(want) - set(seen))
    stale = sum(1 for order, status in want.items() if seen.get(order, [status])[-1] != status)
    published = outbox_events(args.bootstrap, args.outbox)
    outbox_off = sum(((published - events) + (events - published)).values())
    summary = (
        f"orders={len(want)} rows={len(rows)} duplicates={duplicates} missing={missing} "
        f"stale={stale} events={sum(events.values())} outbox_off={outbox_off}"
    )
    if duplicates or missing or stale or outbox_off or len(seen) != len(want):
        print(f"exactly-once: FAILED ({summary})")
        return 1
    print(f"exactly-once: OK ({summary})")
    return 0


def run(spark: Any, args: argparse.Namespace) -> int:
    """The query over every file of ``--input``, until it has nothing left; then the verdict."""
    create_topic(args.bootstrap, args.outbox)
    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)
    writer = twopc.foreach_batch(group(args), sink_id=args.sink_id)
    query = (
        events.writeStream.option("checkpointLocation", args.checkpoint)
        .foreachBatch(writer)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        writer.close()
    return verdict(args)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.produce:
        produce(Path(args.input), args.produce)
        return 0
    if args.verify:
        return verdict(args)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("orders-delta-outbox")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        return run(spark, args)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
