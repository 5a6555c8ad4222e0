"""The documentation's snippets that need Spark or the services, run for real.

Which snippets these are, and the rule that every snippet is run, checked or listed with a
reason, live in ``tests/unit/test_doc_snippets.py`` (``CHECKED`` names the tests of this
module). Each test runs a page's code as printed, with its paths, DSNs, brokers, tables,
topics and sink ids replaced by the test's own (``replaced`` fails when a replaced text is
gone from the snippet: a changed snippet is looked at again), and reads the target back. A
query that waits for termination is run to the end of its input instead (:data:`STOP`).
Sink ids are fresh per run: the SQL and Kafka markers outlive a test's commit log.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import twopc
from tests.harness.doc_snippets import Block, commands_of, find, replaced, run
from tests.harness.processes import REPO
from tests.harness.services import parse_mysql_dsn

# -- the services -------------------------------------------------------------------------


def _pg(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


def _maria(dsn: str) -> Any:
    import pymysql

    return pymysql.connect(**parse_mysql_dsn(dsn).connect_kwargs(), autocommit=True)


@pytest.mark.integration
def test_sql_snippets_run(postgres_dsn: str, mysql_dsn: str) -> None:
    """The SQL the pages give, run on the test PostgreSQL and MariaDB (the marker table's
    DDL under a name of its own, dropped afterwards)."""
    name = f"doc_markers_{uuid.uuid4().hex[:8]}"
    with _pg(postgres_dsn) as conn:
        ddl = find("docs/backends/postgres.md", "CREATE TABLE IF NOT EXISTS twopc_markers").code
        conn.execute(replaced(ddl, {"twopc_markers": name}))
        conn.execute(f"DROP TABLE {name}")
        ddl = find("docs/backends/postgres.md", "CREATE TABLE twopc_markers_writers").code
        conn.execute(replaced(ddl, {"twopc_markers_writers": f"{name}_writers"}))
        conn.execute(f"DROP TABLE {name}_writers")
        for page in ("docs/backends/postgres.md", "docs/troubleshooting.md"):
            rows = conn.execute(find(page, "FROM pg_prepared_xacts").code).fetchall()
            assert all(row[0].startswith("twopc-") for row in rows)
    conn = _maria(mysql_dsn)
    try:
        with conn.cursor() as cursor:
            ddl = find("docs/backends/mysql.md", "CREATE TABLE IF NOT EXISTS twopc_markers").code
            cursor.execute(replaced(ddl, {"twopc_markers": name}))
            cursor.execute(f"DROP TABLE {name}")
            ddl = find("docs/backends/mysql.md", "CREATE TABLE twopc_markers_writers").code
            cursor.execute(replaced(ddl, {"twopc_markers_writers": f"{name}_writers"}))
            cursor.execute(f"DROP TABLE {name}_writers")
            cursor.execute(find("docs/troubleshooting.md", "XA RECOVER FORMAT='SQL';").code)
            assert [d[0] for d in cursor.description][-1] == "data"
    finally:
        conn.close()


def _kafka_tool_classpath() -> str:
    """The test broker's jars, as ``scripts/services`` resolved them."""
    cached = sorted(Path.home().glob(".cache/twopc/kafka-*/classpath-*.txt"))
    if not cached:
        pytest.skip("the broker's jars are not resolved yet (scripts/services start kafka)")
    return cached[-1].read_text().strip()


@pytest.mark.integration
def test_kafka_transactions_snippet(kafka_bootstrap: str) -> None:
    """The broker's ``kafka-transactions.sh`` commands the page gives, run from the test
    broker's jars against a transactional id that exists."""
    from confluent_kafka import Producer

    transactional_id = f"doc-snippet-{uuid.uuid4().hex[:6]}-0"
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": transactional_id}
    )
    producer.init_transactions(30)
    block = find(
        "docs/troubleshooting.md", "kafka-transactions.sh --bootstrap-server broker:9092 list"
    )
    code = replaced(
        block.code,
        {"broker:9092": kafka_bootstrap, "twopc-clicks-0": transactional_id, "<id>": "1"},
    )
    classpath = _kafka_tool_classpath()
    outputs = []
    for command in commands_of(Block(block.page, block.line, block.lang, code)):
        assert command[0] == "kafka-transactions.sh"
        done = subprocess.run(
            [
                "java",
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-cp",
                classpath,
                "org.apache.kafka.tools.TransactionsCommand",
                *command[1:],
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"{shlex.join(command)}: {done.stdout}{done.stderr}"
        outputs.append(done.stdout)
    assert transactional_id in outputs[0] and transactional_id in outputs[1]


@pytest.mark.integration
def test_services_env_snippet() -> None:
    """What the page shows of ``scripts/services env`` is what it prints (with the
    default ports)."""
    ports = ("TWOPC_KAFKA_PORT", "TWOPC_POSTGRES_PORT", "TWOPC_MYSQL_PORT", "TWOPC_REGISTRY_PORT")
    if any(os.environ.get(port) for port in ports):
        pytest.skip("other ports than the defaults")
    printed = subprocess.run(
        [str(REPO / "scripts" / "services"), "env"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    shown = find("docs/development.md", "$ scripts/services env").code.splitlines()[1:]
    assert shown and set(shown) <= set(printed)


# -- through real Spark -------------------------------------------------------------------

ROWS = 40


def write_orders(directory: Path, rows: int = ROWS, files: int = 2) -> set[int]:
    """JSON orders (``id``, ``amount``, ``day``, ``user_id``, ``url``, ``ts``)."""
    directory.mkdir(parents=True, exist_ok=True)
    per_file = rows // files
    for f in range(files):
        lines = [
            json.dumps(
                {
                    "id": i,
                    "amount": i * 0.5,
                    "day": f"2026-11-2{4 + i % 2}",
                    "user_id": i % 5,
                    "url": f"/p/{i}",
                    "ts": "2026-11-25T10:00:00Z",
                }
            )
            for i in range(f * per_file, (f + 1) * per_file)
        ]
        (directory / f"orders-{f}.json").write_text("\n".join(lines) + "\n")
    return set(range(rows))


def parquet_ids(path: Path) -> Counter[int]:
    table = ds.dataset(str(path), format="parquet", partitioning="hive").to_table(columns=["id"])
    return Counter(table["id"].to_pylist())


def finish(query: Any) -> None:
    query.processAllAvailable()
    query.stop()


STOP = "query.processAllAvailable(); query.stop()"
"""What runs instead of ``query.awaitTermination()``: the query to the end of its input."""


@pytest.mark.e2e
def test_files_query_snippets(spark: Any, tmp_path: Path) -> None:
    """The one line of the README, the quick start and the home page, on local files."""
    readme = find("README.md", 'twopc.create_sink("files", path="/data/orders", format="parquet")')
    quick = find("docs/quickstart.md", 'sink = twopc.create_sink("files", path="/data/orders"')
    same = [[line for line in b.code.splitlines() if line.strip()] for b in (quick, readme)]
    assert same[0] == same[1]  # the same snippet (but for blank lines): run once
    home = find("docs/index.md", 'path="s3://lake/orders"')
    for block, subs in (
        (readme, {"/data/orders": "OUT", "/chk/orders": "CHK"}),
        # S3 is run by the files backend's own tests; Spark's checkpoint there needs S3A
        (home, {"s3://lake/orders": "OUT", "s3://lake/_chk/orders": "CHK", "df.": "orders."}),
    ):
        work = tmp_path / block.page.replace("/", "_")
        expected = write_orders(work / "in")
        paths = {
            k: v.replace("OUT", str(work / "out")).replace("CHK", str(work / "chk"))
            for k, v in subs.items()
        }
        orders = spark.readStream.schema("id long, amount double").json(str(work / "in"))
        namespace = run(replaced(block.code, paths), {"orders": orders}, str(block))
        finish(namespace["query"])
        assert parquet_ids(work / "out") == Counter(expected), block


@pytest.mark.e2e
def test_complete_foreach_batch_query(spark: Any, tmp_path: Path) -> None:
    block = find("docs/entry-points.md", "writer.close()  # removes the liveness record")
    expected = write_orders(tmp_path / "in")
    code = replaced(
        block.code,
        {
            "/data/incoming": str(tmp_path / "in"),
            "/data/orders": str(tmp_path / "out"),
            "/chk/orders": str(tmp_path / "chk"),
            "query.awaitTermination()": STOP,
        },
    )
    run(code, {}, str(block))
    assert parquet_ids(tmp_path / "out") == Counter(expected)
    assert not list((tmp_path / "out" / "_twopc").rglob(".heartbeat.json"))  # writer.close()


@pytest.mark.e2e
def test_background_commit_snippet(spark: Any, tmp_path: Path) -> None:
    """The query committing in the background: after ``writer.close()`` every order is
    in the output once (close waits for the last batch's commit)."""
    block = find("docs/entry-points.md", "background_commit=True)")
    expected = write_orders(tmp_path / "in")
    orders = spark.readStream.schema("id long, amount double, day string").json(
        str(tmp_path / "in")
    )
    sink = twopc.create_sink("files", path=str(tmp_path / "out"), format="parquet")
    code = replaced(
        block.code, {"/chk/orders": str(tmp_path / "chk"), "query.awaitTermination()": STOP}
    )
    run(code, {"twopc": twopc, "sink": sink, "orders": orders}, str(block))
    assert parquet_ids(tmp_path / "out") == Counter(expected)
    assert not list((tmp_path / "out" / "_twopc").rglob(".heartbeat.json"))  # writer.close()


@pytest.mark.e2e
def test_format_files_snippets(spark: Any, tmp_path: Path) -> None:
    """``twopc.register``, then the files query through ``format("twopc")`` of the README
    and of the entry points page."""
    register = find("docs/entry-points.md", "twopc.register(spark)")
    run(register.code, {"twopc": twopc, "spark": spark}, str(register))
    readme = find("README.md", '.option("sink", "files")')
    entry = find("docs/entry-points.md", '.option("partition_by", "day")')
    for block in (readme, entry):
        work = tmp_path / block.page.replace("/", "_")
        expected = write_orders(work / "in")
        subs = {"/data/orders": str(work / "out"), "/chk/orders": str(work / "chk")}
        if block is entry:
            subs.update({"/data/incoming": str(work / "in"), "query.awaitTermination()": STOP})
        orders = spark.readStream.schema("id long, amount double").json(str(work / "in"))
        namespace = run(replaced(block.code, subs), {"orders": orders}, str(block))
        if namespace["query"].isActive:
            finish(namespace["query"])
        assert parquet_ids(work / "out") == Counter(expected), block


@pytest.fixture
def pg_table(postgres_dsn: str) -> Iterator[str]:
    """A fresh table name in the test database, dropped afterwards."""
    name = f"doc_{uuid.uuid4().hex[:10]}"
    yield name
    with _pg(postgres_dsn) as conn:
        conn.execute(f"DROP TABLE IF EXISTS public.{name}")


def pg_rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with _pg(dsn) as conn:
        return list(conn.execute(query).fetchall())


@pytest.mark.e2e
@pytest.mark.integration
def test_format_postgres_snippet(
    spark: Any, tmp_path: Path, postgres_dsn: str, pg_table: str
) -> None:
    block = find("docs/entry-points.md", '.option("table", "public.orders")')
    with _pg(postgres_dsn) as conn:
        conn.execute(f"CREATE TABLE public.{pg_table} (id bigint, amount double precision)")
    expected = write_orders(tmp_path / "in")
    code = replaced(
        block.code,
        {
            "/data/incoming": str(tmp_path / "in"),
            "postgresql://etl@db.internal:5432/shop": postgres_dsn,
            "public.orders": f"public.{pg_table}",
            "/chk/orders-pg": str(tmp_path / "chk"),
            '.option("sink_id", "orders-pg")': f'.option("sink_id", "{pg_table}")',
            "query.awaitTermination()": STOP,
        },
    )
    run(code, {}, str(block))
    ids = Counter(row[0] for row in pg_rows(postgres_dsn, f"SELECT id FROM public.{pg_table}"))
    assert ids == Counter(expected)


@pytest.mark.e2e
@pytest.mark.integration
def test_format_kafka_snippet(spark: Any, tmp_path: Path, kafka_bootstrap: str) -> None:
    from tests.harness.kafka_topics import create_topic, read_messages, unique

    block = find("docs/entry-points.md", '.option("sink", "kafka")')
    topic = create_topic(kafka_bootstrap, unique("doc-clicks"), partitions=2)
    write_orders(tmp_path / "in")
    code = replaced(
        block.code,
        {
            "/data/clicks": str(tmp_path / "in"),
            "broker-1:9092,broker-2:9092": kafka_bootstrap,
            '.option("topic", "clicks")': f'.option("topic", "{topic}")',
            '.option("sink_id", "clicks")': f'.option("sink_id", "{topic}")',
            "/chk/clicks": str(tmp_path / "chk"),
            "query.awaitTermination()": STOP,
        },
    )
    run(code, {}, str(block))
    messages = read_messages(kafka_bootstrap, topic)
    assert Counter(m.text_key for m in messages) == Counter(str(i % 5) for i in range(ROWS))


@pytest.mark.e2e
@pytest.mark.integration
def test_batch_write_snippets(
    spark: Any, tmp_path: Path, postgres_dsn: str, kafka_bootstrap: str, pg_table: str
) -> None:
    """The batch writes of the entry points page in the page's order, in one namespace:
    ``write_batch`` to PostgreSQL (and again: skipped), to Kafka ``atomic``,
    ``df.write.format("twopc")`` to files, and to PostgreSQL with the key ``write_batch``
    wrote already: skipped too."""
    import pyarrow.parquet as pq

    from tests.harness.kafka_topics import create_topic, read_messages, unique

    (tmp_path / "orders").mkdir()
    days = ["2026-11-25", "2026-11-25", "2026-11-24"]
    pq.write_table(
        pa.table({"id": [1, 2, 3], "amount": [1.5, 2.5, 9.0], "day": days}),
        tmp_path / "orders" / "part-0.parquet",
    )
    with _pg(postgres_dsn) as conn:
        conn.execute(f"CREATE TABLE public.{pg_table} (day text, amount double precision)")
    topic = create_topic(kafka_bootstrap, unique("doc-daily"))
    log = str(tmp_path / "log")
    subs = {
        "/data/orders": str(tmp_path / "orders"),
        "postgresql://etl@db.internal:5432/shop": postgres_dsn,
        "public.daily_totals": f"public.{pg_table}",
        '"/durable/twopc/daily-totals"': repr(log),
        # the markers in the target outlive a test's commit log: a sink id of its own
        '"daily-totals"': repr(pg_table),
    }
    namespace: dict[str, Any] = {}
    first = find("docs/entry-points.md", 'table="public.daily_totals",')
    run(replaced(first.code, subs), namespace, str(first))
    assert namespace["metrics"].status == "committed", namespace["metrics"].summary()
    rows = pg_rows(postgres_dsn, f"SELECT day, amount FROM public.{pg_table}")
    assert rows == [("2026-11-25", 4.0)], namespace["metrics"].summary()
    run(replaced(first.code, subs), namespace, str(first))  # the same write_id again
    assert namespace["metrics"].status == "skipped"

    to_kafka = find("docs/entry-points.md", '"daily-totals-kafka",')
    kafka_subs = {
        "broker-1:9092": kafka_bootstrap,
        'topic="daily-totals"': f'topic="{topic}"',
        '"daily-totals-kafka",': f'"{topic}",',
        "/durable/twopc/daily-totals-kafka": str(tmp_path / "log-kafka"),
    }
    run(replaced(to_kafka.code, kafka_subs), namespace, str(to_kafka))
    assert [m.text_key for m in read_messages(kafka_bootstrap, topic)] == ["2026-11-25"]

    files = find("docs/entry-points.md", '.option("sink_id", "daily-totals-files")')
    out = tmp_path / "daily_totals"
    run(replaced(files.code, {"/data/daily_totals": str(out)}), namespace, str(files))
    assert ds.dataset(str(out), format="parquet").to_table().to_pylist() == [
        {"day": "2026-11-25", "amount": 4.0}
    ]

    again = find("docs/entry-points.md", '.option("table", "public.daily_totals")')
    del subs["/data/orders"]  # the rest names the same sink, commit log and key
    run(replaced(again.code, subs), namespace, str(again))
    rows = pg_rows(postgres_dsn, f"SELECT day, amount FROM public.{pg_table}")
    assert rows == [("2026-11-25", 4.0)]  # the key write_batch wrote: skipped


class Gauges:
    """Stands in for the pages' metrics client."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def set(self, name: str, value: float) -> None:
        self.values[name] = value


def _stream_into(spark: Any, work: Path, writer: Any) -> None:
    write_orders(work / "in")
    orders = spark.readStream.schema("id long, amount double").json(str(work / "in"))
    finish(
        orders.writeStream.option("checkpointLocation", str(work / "chk"))
        .foreachBatch(writer)
        .start()
    )


@pytest.mark.e2e
def test_quickstart_metrics_snippet(spark: Any, tmp_path: Path) -> None:
    """The quick start's metrics: the callback, and the writer's metrics after a batch
    (the ``...`` of the snippet is a query that runs the writer)."""
    block = find("docs/quickstart.md", "def report(m: twopc.BatchMetrics)")
    gauges = Gauges()
    namespace = {
        "twopc": twopc,
        "gauges": gauges,
        "sink": twopc.create_sink("files", path=str(tmp_path / "out")),
        "_run": lambda writer: _stream_into(spark, tmp_path, writer),
    }
    run(replaced(block.code, {"\n...\n": "\n_run(writer)\n"}), namespace, str(block))
    writer = namespace["writer"]
    assert writer.last_metrics.status == "committed"
    assert json.loads(writer.last_metrics.to_json())["rows"] == ROWS
    assert "orders_commit_seconds" in gauges.values


@pytest.mark.e2e
def test_metrics_listener_snippet(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``MetricsJoin`` of ``examples/metrics_listener.py`` as the quick start wires it:
    the joined record reaches ``emit`` once Spark reports the batch."""
    from examples.metrics_listener import MetricsJoin
    from pyspark.sql.streaming import StreamingQueryManager

    added: list[Any] = []
    add = StreamingQueryManager.addListener

    def recording(self: Any, listener: Any) -> None:
        added.append(listener)
        add(self, listener)

    monkeypatch.setattr(StreamingQueryManager, "addListener", recording)
    block = find("docs/quickstart.md", "join = MetricsJoin(")
    gauges = Gauges()
    namespace = {
        "twopc": twopc,
        "MetricsJoin": MetricsJoin,
        "gauges": gauges,
        "spark": spark,
        "sink": twopc.create_sink("files", path=str(tmp_path / "out")),
    }
    try:
        run(block.code, namespace, str(block))
        _stream_into(spark, tmp_path, namespace["writer"])
        deadline = time.monotonic() + 30
        while "orders_commit_seconds" not in gauges.values and time.monotonic() < deadline:
            time.sleep(0.2)  # Spark reports progress to listeners asynchronously
        assert "orders_commit_seconds" in gauges.values
    finally:
        for listener in added:
            spark.streams.removeListener(listener)


@pytest.mark.e2e
@pytest.mark.integration
def test_wordcount_snippets(spark: Any, tmp_path: Path, mysql_dsn: str) -> None:
    """The MariaDB word count: the page's table, then its query, upserting the counts."""
    from pyspark.sql import functions as F

    table = f"doc_wc_{uuid.uuid4().hex[:8]}"
    ddl = find("docs/backends/mysql.md", "CREATE TABLE wc")
    conn = _maria(mysql_dsn)
    try:
        with conn.cursor() as cursor:
            cursor.execute(replaced(ddl.code, {"CREATE TABLE wc ": f"CREATE TABLE {table} "}))
        (tmp_path / "in").mkdir()
        (tmp_path / "in" / "words.txt").write_text("a b a\nc\n")
        block = find("docs/backends/mysql.md", 'key_columns=["word"],')
        code = replaced(
            block.code,
            {
                'dsn="mysql://user:secret@db:3306/app"': f'dsn="{mysql_dsn}"',
                'table="wc"': f'table="{table}"',
                'sink_id="wordcount"': f'sink_id="{table}"',
            },
        )
        before = {q.id for q in spark.streams.active}
        namespace = {
            "twopc": twopc,
            "F": F,
            "spark": spark,
            "input_dir": str(tmp_path / "in"),
            "checkpoint": str(tmp_path / "chk"),
        }
        run(code, namespace, str(block))
        (query,) = [q for q in spark.streams.active if q.id not in before]
        finish(query)
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT word, num FROM {table}")
            assert dict(cursor.fetchall()) == {"a": 2, "b": 1, "c": 1}
    finally:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {table}")
        conn.close()
