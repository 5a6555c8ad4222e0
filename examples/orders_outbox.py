"""Orders from Kafka into a PostgreSQL table and a Kafka outbox topic, with one decision.

The transactional outbox without an outbox table: every micro-batch of orders is written to
the table ``orders`` (PostgreSQL, ``transaction_mode="two_phase"``) and, as
``order_placed`` events, to the topic ``order-events`` (Kafka, ``mode="atomic"``), by one
:class:`twopc.SinkGroup`. Either both targets get a batch or neither does, whatever dies
when: PostgreSQL prepares, then the Kafka transaction (the events and its marker) commits
and is the batch's decision, then PostgreSQL commits. After a crash, the restart fences the
Kafka transaction, reads its marker, and commits or rolls back PostgreSQL to match.

Input: topic ``orders``, one JSON order per record, e.g.
``{"order_id": 17, "customer": "c3", "amount": 12.5}``, read with Spark's Kafka source
(``startingOffsets=earliest``, ``kafka.isolation.level=read_committed``). Outputs:

* table ``orders (order_id bigint, customer text, amount double precision)``, created by the
  sink on the first batch. It **appends**: an order written twice shows up as two rows, so
  the verdict sees any duplicate. (An upsert keyed by ``order_id`` would hide them; use one
  in production if the input itself may repeat an order.)
* topic ``order-events``: key ``order_id``, value ``{"type": "order_placed", "order_id":
  17, "amount": 12.5}``, other columns than the table's: each member has its projection.

Run from the repository with the services of ``scripts/services``; the defaults are their
addresses (``--bootstrap 127.0.0.1:19092``, and ``--dsn`` the database
``postgresql://twopc:twopc@127.0.0.1:15432/twopc``)::

    python examples/orders_outbox.py --produce 1000   # create the topics, send 1000 orders
    python examples/orders_outbox.py                  # run until caught up, print the verdict
    python examples/orders_outbox.py --verify         # the verdict alone

The verdict reads what a reader sees: the table with ``SELECT``, both topics with a
``read_committed`` consumer. It ends with ``exactly-once: OK`` when every order of the input
is in the table once and in the outbox once, ``exactly-once: FAILED (...)`` otherwise (exit
code 1). To watch a crash, kill the driver of a new query in its batch 1, right after Kafka
committed and before PostgreSQL did, then run it again (names of its own, so that batch 1
is still to come)::

    A="--input orders-2 --outbox order-events-2 --table orders_2"
    A="$A --checkpoint /tmp/twopc-orders-outbox-2 --sink-id orders-outbox-2"
    python examples/orders_outbox.py $A --produce 1000
    TWOPC_FAULTS="after_last_resource:kill@batch=1" python examples/orders_outbox.py $A
    python examples/orders_outbox.py $A --verify   # FAILED: the outbox is a batch ahead
    python examples/orders_outbox.py $A            # recovery commits batch 1: OK

Keep ``--checkpoint`` and ``--sink-id`` across restarts; a new checkpoint is a new query
and writes everything again. Spark's Kafka source is not part of pyspark: it comes from
``--packages`` (default ``org.apache.spark:spark-sql-kafka-0-10_2.13:<pyspark version>``,
resolved from Maven).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import twopc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

BOOTSTRAP = "127.0.0.1:19092"
DSN = "postgresql://twopc:twopc@127.0.0.1:15432/twopc"
ORDER_SCHEMA = "order_id long, customer string, amount double"
EVENT_TYPE = "order_placed"
TIMEOUT = 30.0


# -- the query ------------------------------------------------------------------------------


def orders_stream(
    spark: SparkSession, bootstrap: str, topic: str, max_offsets_per_trigger: int
) -> DataFrame:
    """The input topic as a stream of orders ``(order_id, customer, amount)``; records that
    are no order (not JSON, no ``order_id``) are dropped."""
    from pyspark.sql import functions as F

    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
        # never read records of an aborted producer transaction
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    parsed = raw.select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
    return parsed.select("o.*").where(F.col("order_id").isNotNull())


def outbox_group(
    *, bootstrap: str, dsn: str, table: str, outbox: str, transactional_id_prefix: str = "twopc"
) -> twopc.SinkGroup:
    """The two targets of every batch: the table, and the outbox topic as the last resource
    (its Kafka transaction is the group's decision)."""
    orders_table = twopc.create_sink(
        "postgres", dsn=dsn, table=table, create_table=True, transaction_mode="two_phase"
    )
    order_events = twopc.create_sink(
        "kafka",
        bootstrap_servers=bootstrap,
        topic=outbox,
        mode="atomic",
        key_column="order_id",
        transactional_id_prefix=transactional_id_prefix,
    )
    group = twopc.SinkGroup(
        {
            "orders": twopc.Member(
                orders_table, project=lambda df: df.select("order_id", "customer", "amount")
            ),
            "events": twopc.Member(
                order_events,
                project=lambda df: df.selectExpr("'order_placed' AS type", "order_id", "amount"),
            ),
        }
    )
    return group


def start_query(
    spark: SparkSession,
    *,
    bootstrap: str,
    dsn: str,
    input_topic: str,
    outbox: str,
    table: str,
    checkpoint: str,
    sink_id: str = "orders-outbox",
    transactional_id_prefix: str = "twopc",
    max_offsets_per_trigger: int = 250,
    available_now: bool = True,
    on_metrics: Callable[[twopc.BatchMetrics], None] | None = None,
) -> tuple[StreamingQuery, twopc.SparkBatchWriter]:
    """Start the query; the caller awaits it, then closes the writer (which removes its
    liveness record). Keep ``checkpoint`` and ``sink_id`` stable across restarts: together
    they are what makes a restart exactly-once. The members write under the sink ids
    ``<sink_id>.orders`` and ``<sink_id>.events``."""
    orders = orders_stream(spark, bootstrap, input_topic, max_offsets_per_trigger)
    group = outbox_group(
        bootstrap=bootstrap,
        dsn=dsn,
        table=table,
        outbox=outbox,
        transactional_id_prefix=transactional_id_prefix,
    )
    writer = twopc.foreach_batch(group, sink_id=sink_id, on_metrics=on_metrics)
    stream = orders.writeStream.option("checkpointLocation", checkpoint).foreachBatch(writer)
    if available_now:
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime="5 seconds")
    return stream.start(), writer


def print_metrics(metrics: twopc.BatchMetrics) -> None:
    """One JSON line per micro-batch on stdout (``rows`` counts every member's rows)."""
    event = {
        "event": "batch",
        "batch": metrics.batch_id,
        "status": str(metrics.status),
        "rows": metrics.rows,
        "recovered_committed": metrics.recovered_committed,
        "recovered_aborted": metrics.recovered_aborted,
    }
    print(json.dumps(event), flush=True)


# -- the input ------------------------------------------------------------------------------


def order(order_id: int) -> dict[str, Any]:
    """The order with this id (the customer and amount follow from it)."""
    return {"order_id": order_id, "customer": f"c{order_id % 7}", "amount": 5 + order_id % 40 / 4}


def create_topics(bootstrap: str, topics: Sequence[str], partitions: int = 2) -> list[str]:
    """Create the topics that do not exist yet (the Kafka sink never creates its topic);
    the names of those created."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=TIMEOUT).topics
    new = [NewTopic(t, num_partitions=partitions) for t in topics if t not in existing]
    for future in admin.create_topics(new, operation_timeout=TIMEOUT).values() if new else []:
        future.result(TIMEOUT)
    return [t.topic for t in new]


def produce_orders(bootstrap: str, topic: str, count: int) -> range:
    """Send ``count`` new orders (ids after the highest already in the topic), keyed by id."""
    from confluent_kafka import Producer

    first = max(input_orders(bootstrap, topic), default=-1) + 1
    ids = range(first, first + count)
    failed: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for order_id in ids:
        value = json.dumps(order(order_id)).encode()
        while True:
            try:
                producer.produce(topic, value, str(order_id).encode(), on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.5)
        producer.poll(0)
    unsent = producer.flush(TIMEOUT)
    if unsent or failed:
        raise RuntimeError(f"{unsent} orders unsent, {len(failed)} failed: {failed[:3]}")
    return ids


# -- the verdict ----------------------------------------------------------------------------


def read_committed(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """``(key, value)`` of every record a ``read_committed`` consumer sees, from the start of
    each partition to its end (the last stable offset)."""
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException
    from confluent_kafka import TopicPartition as TP

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "orders-outbox-verdict",  # assigned, never joined nor committed
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=TIMEOUT).topics[topic]
        if metadata.error is not None:
            raise KafkaException(metadata.error)
        partitions = set(metadata.partitions)
        consumer.assign([TP(topic, p, OFFSET_BEGINNING) for p in sorted(partitions)])
        records: list[tuple[bytes | None, bytes | None]] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + 2 * TIMEOUT
        while at_end != partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"did not reach the end of {topic} in {2 * TIMEOUT:.0f} s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None and err.code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition() or 0)
            elif err is not None:
                raise KafkaException(err)
            else:
                at_end.discard(msg.partition() or 0)
                records.append((msg.key(), msg.value()))
        return records
    finally:
        consumer.close()


def input_orders(bootstrap: str, topic: str) -> Counter[int]:
    """How often each order id is in the input topic (records that are no order skipped,
    as the query skips them)."""
    found: Counter[int] = Counter()
    for _, value in read_committed(bootstrap, topic):
        try:
            order_id = json.loads(value or b"")["order_id"]
        except (ValueError, TypeError, KeyError):
            continue
        if isinstance(order_id, int):
            found[order_id] += 1
    return found


def table_orders(dsn: str, table: str) -> Counter[int]:
    """How often each order id is a row of the table (none before the first batch made it)."""
    import psycopg
    from psycopg import sql

    query = sql.SQL("SELECT order_id FROM {}").format(sql.Identifier(*table.split(".")))
    with psycopg.connect(dsn, autocommit=True, connect_timeout=int(TIMEOUT)) as conn:
        try:
            return Counter(int(row[0]) for row in conn.execute(query))
        except psycopg.errors.UndefinedTable:
            return Counter()


def outbox_events(bootstrap: str, topic: str) -> tuple[Counter[int], int]:
    """How often each order id has an ``order_placed`` event in the outbox, and how many
    records are not such an event of the order named by their key."""
    found: Counter[int] = Counter()
    malformed = 0
    for key, value in read_committed(bootstrap, topic):
        try:
            event = json.loads(value or b"")
            order_id = int(key or b"")
            if event["type"] != EVENT_TYPE or event["order_id"] != order_id:
                raise ValueError(event)
        except (ValueError, TypeError, KeyError):
            malformed += 1
            continue
        found[order_id] += 1
    return found, malformed


@dataclass(frozen=True)
class Tally:
    """One target against the input: ``missing`` orders it lacks, ``duplicates`` it shows
    more often than the input has them, ``unexpected`` ids the input does not have."""

    target: str
    records: int
    missing: int
    duplicates: int
    unexpected: int
    malformed: int = 0

    @classmethod
    def of(cls, target: str, sent: Counter[int], shown: Counter[int], malformed: int = 0) -> Tally:
        surplus = shown - sent
        return cls(
            target,
            shown.total() + malformed,
            (sent - shown).total(),
            sum(n for i, n in surplus.items() if i in sent),
            sum(n for i, n in surplus.items() if i not in sent),
            malformed,
        )

    @property
    def ok(self) -> bool:
        return self.missing == self.duplicates == self.unexpected == self.malformed == 0

    def line(self) -> str:
        text = (
            f"{self.target}: {self.records} records, missing={self.missing} "
            f"duplicates={self.duplicates} unexpected={self.unexpected}"
        )
        return text + (f" malformed={self.malformed}" if self.malformed else "")


@dataclass(frozen=True)
class Verdict:
    """What the table and the outbox show of the input's orders."""

    orders: int
    table: Tally
    outbox: Tally

    @property
    def ok(self) -> bool:
        return self.orders > 0 and self.table.ok and self.outbox.ok

    def lines(self) -> list[str]:
        if self.ok:
            last = "exactly-once: OK (every order once in the table and once in the outbox)"
        elif self.orders == 0:
            last = "exactly-once: FAILED (the input holds no orders: run --produce N first)"
        else:
            wrong = [t.target for t in (self.table, self.outbox) if not t.ok]
            last = f"exactly-once: FAILED ({' and '.join(wrong)} do not match the input)"
        return [f"input: {self.orders} orders", self.table.line(), self.outbox.line(), last]


def verify(*, bootstrap: str, dsn: str, input_topic: str, outbox: str, table: str) -> Verdict:
    """Read the input, the table and the outbox back, as their readers see them."""
    sent = input_orders(bootstrap, input_topic)
    events, malformed = outbox_events(bootstrap, outbox)
    return Verdict(
        len(sent),
        Tally.of(f"table {table}", sent, table_orders(dsn, table)),
        Tally.of(f"outbox topic {outbox}", sent, events, malformed),
    )


def report(verdict: Verdict) -> int:
    """Print the verdict; the exit code: 0 when it is OK, 1 otherwise."""
    for line in verdict.lines():
        print(line, flush=True)
    return 0 if verdict.ok else 1


# -- the command line -----------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    import pyspark

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--bootstrap", default=BOOTSTRAP, help="Kafka bootstrap servers")
    parser.add_argument("--dsn", default=DSN, help="the PostgreSQL database")
    parser.add_argument("--input", default="orders", help="topic with the orders")
    parser.add_argument("--outbox", default="order-events", help="topic for the events")
    parser.add_argument("--table", default="orders", help="table for the orders")
    parser.add_argument("--checkpoint", default="/tmp/twopc-orders-outbox")
    parser.add_argument("--sink-id", default="orders-outbox")
    parser.add_argument("--transactional-id-prefix", default="twopc")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=250)
    what = parser.add_mutually_exclusive_group()
    what.add_argument(
        "--produce", type=int, metavar="N", help="create the topics, send N new orders, exit"
    )
    what.add_argument("--verify", action="store_true", help="print the verdict only")
    what.add_argument(
        "--continuous",
        action="store_true",
        help="keep running (a batch every 5 s) instead of stopping once caught up",
    )
    parser.add_argument(
        "--packages",
        default=f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}",
        help="Maven coordinates of Spark's Kafka source",
    )
    return parser.parse_args(argv)


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    """Run the query until it has read everything (or forever with ``--continuous``), then
    print the verdict; the exit code: 0 OK, 1 a bad verdict, 2 the query failed."""
    query, writer = start_query(
        spark,
        bootstrap=args.bootstrap,
        dsn=args.dsn,
        input_topic=args.input,
        outbox=args.outbox,
        table=args.table,
        checkpoint=args.checkpoint,
        sink_id=args.sink_id,
        transactional_id_prefix=args.transactional_id_prefix,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        available_now=not args.continuous,
        on_metrics=print_metrics,
    )
    try:
        query.awaitTermination()
    except Exception as exc:  # StreamingQueryException: the batch's error, with its cause
        print(f"the query failed: {exc}", file=sys.stderr, flush=True)
        return 2
    finally:
        writer.close()
    return verdict(args)


def verdict(args: argparse.Namespace) -> int:
    """Read both targets back and print the verdict; the exit code says whether it holds."""
    return report(
        verify(
            bootstrap=args.bootstrap,
            dsn=args.dsn,
            input_topic=args.input,
            outbox=args.outbox,
            table=args.table,
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.produce is not None:
        created = create_topics(args.bootstrap, [args.input, args.outbox])
        if created:
            print(f"created topics {', '.join(created)}")
        ids = produce_orders(args.bootstrap, args.input, args.produce)
        sent = f" (order_id {ids[0]}..{ids[-1]})" if ids else ""
        print(f"sent {len(ids)} orders{sent} to {args.input}")
        return 0
    if args.verify:
        return verdict(args)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("twopc-orders-outbox")
        .config("spark.jars.packages", args.packages)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        return run(spark, args)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
