"""The corners of the backends through real Spark (issue 30, item 5): streaming queries with
a checkpoint, written through ``twopc.foreach_batch``, checked on what the target shows.

* Kafka tombstones (docs/backends/kafka.md, "Spark's Kafka columns": a null ``value`` gives
  a record without a value; the sink has no delete-column option): read back by a
  ``read_committed`` consumer, every record once, keys intact, in the key's partition.
* SQL ``delete_column`` (docs/backends/postgres.md and mysql.md, ``upsert`` and ``append``
  with ``key_columns``): batches that insert, update and delete keys; the table read back
  after each run; a batch decided before a SIGKILL of the driver (or a raised fault) is
  replayed without changing anything twice.
* The files sink's CSV, JSON lines and Arrow IPC formats, on both write paths where the
  format has two: read back by Spark and by ``pyarrow.dataset``, each id once, with the
  types each reader gets.
* ``storage_options`` given to the files sink only (docs/quickstart.md,
  docs/backends/files.md): a query on the S3 API server, read back with pyarrow through
  s3fs, the commit log next to the data on S3.

Each of these queries runs over three micro-batches and fails once after the decision of
batch 1 (raised in the shared session, or a SIGKILL of the driver of a process of its own);
the restart, in the shared session over the same checkpoint, replays batch 1, which writes
nothing, and writes batch 2. The last test reproduces a known bug (strict xfail).
CI runs a subset; tests/extended.txt lists the other cases.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import twopc
from tests.e2e.corners_sql_query import run_query as run_sql_query
from tests.harness.databases import Database
from tests.harness.kafka_topics import admin, create_topic, read_messages
from tests.harness.processes import run_process
from tests.harness.service_fixtures import S3Store
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import S3FilesTarget, SqlTarget

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

CRASH = "after_decision:{action}@batch=1"
"""The fault of every first run: batch 1 is decided, then the driver fails (``raise``) or
dies (``kill``) before it finishes the batch."""


def _write_input(directory: Path, batches: Sequence[Sequence[dict[str, Any]]]) -> None:
    """One JSON file per micro-batch; Spark's file source takes new files in the order of
    their modification times, so those are set one second apart."""
    directory.mkdir(parents=True, exist_ok=True)
    for index, rows in enumerate(batches):
        path = directory / f"batch-{index:04d}.json"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        moment = 1_700_000_000 + index
        os.utime(path, (moment, moment))


def _run(query: Any, writer: twopc.SparkBatchWriter) -> Exception | None:
    """Wait for an ``availableNow`` query; the exception it failed with, if any."""
    try:
        query.awaitTermination()
    except Exception as exc:  # Spark's StreamingQueryException
        return exc
    finally:
        writer.close()
    return None


def _statuses(metrics: list[twopc.BatchMetrics]) -> dict[int, str]:
    return {m.batch_id: str(m.status) for m in metrics}


# -- 1. Kafka tombstones ---------------------------------------------------------------------

KAFKA_BATCHES = [
    [(1, False), (2, False), (3, False), (4, True)],
    [(1, True), (2, False), (5, False), (6, True)],
    [(3, True), (7, False), (5, True)],
]
"""(id, gone) per batch: a gone id is written as a tombstone of its key."""


@pytest.fixture
def topic(kafka_bootstrap: str) -> Iterator[str]:
    name = create_topic(kafka_bootstrap, f"corners-{uuid.uuid4().hex[:10]}", partitions=2)
    yield name
    client = admin(kafka_bootstrap)  # kept alive until the futures resolve
    for future in client.delete_topics([name]).values():
        future.result(30)


def _kafka_value(record_id: int, batch: int) -> bytes:
    """The value Spark's ``to_json(struct(id, batch))`` gives a row."""
    return json.dumps({"id": record_id, "batch": batch}, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    "case",
    [
        "spark-columns-string-per_partition",
        "spark-columns-binary-atomic",
        "value_format-string-per_partition",
    ],
)
def test_kafka_tombstones_reach_a_read_committed_consumer_once(
    spark: Any, kafka_bootstrap: str, topic: str, tmp_path: Path, case: str
) -> None:
    """``spark-columns-*``: the documented way, a frame of Spark's Kafka columns (``key``,
    ``value``) whose ``value`` is null, as a string or as binary. ``value_format-string``:
    a frame of another shape, ``value_format="string"`` with a ``key_column`` and a null in
    the one value column; docs/backends/kafka.md does not say what a null becomes there
    (the code sends a record without a value, as for Spark's columns)."""
    from pyspark.sql import functions as F

    shape, _, mode = case.rpartition("-")
    rows = [
        [{"id": i, "batch": b, "gone": gone} for i, gone in batch]
        for b, batch in enumerate(KAFKA_BATCHES)
    ]
    _write_input(tmp_path / "in", rows)
    options: dict[str, Any] = {}
    if shape == "value_format-string":
        options = {"key_column": "k", "value_format": "string"}

    def start(faults: str | None, metrics: list[twopc.BatchMetrics]) -> Exception | None:
        frame = (
            spark.readStream.schema("id long, batch long, gone boolean")
            .option("maxFilesPerTrigger", 1)
            .json(str(tmp_path / "in"))
            .repartition(2, "id")
        )
        key = F.col("id").cast("string")
        value = F.when(F.col("gone"), F.lit(None)).otherwise(F.to_json(F.struct("id", "batch")))
        if shape == "spark-columns-string":
            frame = frame.select(key.alias("key"), value.cast("string").alias("value"))
        elif shape == "spark-columns-binary":
            frame = frame.select(
                key.cast("binary").alias("key"), value.cast("binary").alias("value")
            )
        else:
            frame = frame.select(key.alias("k"), value.cast("string").alias("body"))
        sink = twopc.create_sink(
            "kafka", bootstrap_servers=kafka_bootstrap, topic=topic, mode=mode, **options
        )
        writer = twopc.foreach_batch(
            sink,
            sink_id="corners-kafka",
            faults=twopc.FaultPlan.parse(faults) if faults else twopc.FaultPlan(),
            on_metrics=metrics.append,
        )
        query = (
            frame.writeStream.option("checkpointLocation", str(tmp_path / "chk"))
            .foreachBatch(writer)
            .trigger(availableNow=True)
            .start()
        )
        return _run(query, writer)

    first: list[twopc.BatchMetrics] = []
    failure = start(CRASH.format(action="raise"), first)
    assert failure is not None and "InjectedFault" in str(failure), failure
    second: list[twopc.BatchMetrics] = []
    assert start(None, second) is None
    # the restart replays batch 1 (decided, committed in its tasks) without writing
    assert _statuses(second) == {1: "skipped", 2: "committed"}

    expected = Counter(
        (str(i).encode(), None if gone else _kafka_value(i, b))
        for b, batch in enumerate(KAFKA_BATCHES)
        for i, gone in batch
    )
    messages = read_messages(kafka_bootstrap, topic, "read_committed")
    assert Counter((m.key, m.value) for m in messages) == expected
    assert sum(1 for m in messages if m.value is None) == 5
    # a tombstone is only of use in its key's partition, after the key's earlier values
    by_key: dict[bytes | None, list[Any]] = {}
    for m in sorted(messages, key=lambda m: (m.partition, m.offset)):
        by_key.setdefault(m.key, []).append(m)
    for key, records in by_key.items():
        assert len({m.partition for m in records}) == 1, (key, records)
        in_order = [
            None if gone else _kafka_value(i, b)
            for b, batch in enumerate(KAFKA_BATCHES)
            for i, gone in batch
            if str(i).encode() == key
        ]
        assert [m.value for m in records] == in_order, key


# -- 2. SQL delete_column --------------------------------------------------------------------

Row = tuple[int, str | None, int, bool]
"""(id, val, seq, gone) of one input row."""

UPSERT_BATCHES: list[list[Row]] = [
    [(i, f"a{i}", i, False) for i in range(1, 7)],
    [
        (1, "b1", 11, False),  # update
        (2, "b2", 12, False),  # update
        (3, None, 13, True),  # delete
        (4, None, 14, True),  # delete
        (7, "b7", 15, False),  # insert
        (8, "b8", 16, False),  # inserted, then deleted in the same batch: never there
        (8, None, 17, True),
        (5, None, 18, True),  # deleted, then written again in the same batch: updated
        (5, "b5", 19, False),
        (9, "b9x", 20, False),  # written twice: the larger seq wins
        (9, "b9", 21, False),
        (99, None, 22, True),  # a delete of a key the table never had
    ],
    [
        (3, "c3", 31, False),  # a deleted key inserted again
        (7, None, 32, True),
        (2, "c2", 33, False),
        (1, None, 34, True),
        (10, "c10", 35, False),
    ],
]

APPEND_BATCHES: list[list[Row]] = [
    [(i, f"a{i}", i, False) for i in range(1, 7)],
    [
        (3, None, 13, True),
        (4, None, 14, True),
        (7, "b7", 15, False),
        (8, "b8", 16, False),
        (8, None, 17, True),
        (9, "b9x", 20, False),
        (9, "b9", 21, False),
        (99, None, 22, True),
    ],
    [(3, "c3", 31, False), (7, None, 32, True), (1, None, 34, True), (10, "c10", 35, False)],
]
"""``append`` with a ``delete_column`` inserts and deletes, never updates: a kept row whose
key is in the table fails on the primary key (docs/backends/postgres.md). A batch applied
twice would fail that way."""


def _expected(batches: Sequence[Sequence[Row]], runs: Sequence[str]) -> dict[int, tuple[Any, ...]]:
    """The table after ``batches``, batch ``b`` written by run ``runs[b]``: per key the row
    with the largest seq wins; a winner that is gone deletes the key."""
    table: dict[int, tuple[Any, ...]] = {}
    for rows, run in zip(batches, runs, strict=True):
        winners: dict[int, Row] = {}
        for row in rows:
            if row[0] not in winners or row[2] > winners[row[0]][2]:
                winners[row[0]] = row
        for key, (_, val, seq, gone) in winners.items():
            if gone:
                table.pop(key, None)
            else:
                table[key] = (val, seq, run)
    return table


@pytest.mark.parametrize(
    "case",
    [
        "postgres-upsert-two_phase-kill",
        "mysql-upsert-transaction-raise",
        "mysql-append-transaction-kill",
        "postgres-append-two_phase-raise",
        # MariaDB in two_phase mode: see test_mariadb_two_phase_delete_column_over_two_partitions
    ],
)
def test_sql_delete_column_replays_change_nothing_twice(
    request: pytest.FixtureRequest, tmp_path: Path, case: str
) -> None:
    """Run A writes batches 0 and 1 and fails after batch 1's decision: SIGKILLed
    (``kill``: the query in a process of its own, its driver killed) or raised (in the
    shared session). Run B, in the shared session over the same checkpoint, replays batch 1
    and writes batch 2. Every row carries the run that wrote it, so a batch written again
    by run B would show."""
    backend, mode, transaction_mode, action = case.split("-")
    kill = action == "kill"
    dsn = request.getfixturevalue("postgres_dsn" if backend == "postgres" else "mysql_dsn")
    db = Database(backend, dsn)
    target = SqlTarget(backend, dsn)
    table = f"corners_{uuid.uuid4().hex[:10]}"
    sink_id = f"corners-{table[-10:]}"
    db.query(
        f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, val VARCHAR(20), seq BIGINT, "
        "run VARCHAR(20))"
    )
    spec = SinkRecipe(backend, transaction_mode, sink_id, dsn, table)
    batches = UPSERT_BATCHES if mode == "upsert" else APPEND_BATCHES
    _write_input(
        tmp_path / "in",
        [[dict(zip(("id", "val", "seq", "gone"), r, strict=True)) for r in b] for b in batches],
    )
    options = {
        "backend": backend,
        "dsn": dsn,
        "table": table,
        "mode": mode,
        "transaction_mode": transaction_mode,
        "source": str(tmp_path / "in"),
        "checkpoint": str(tmp_path / "chk"),
        "sink_id": sink_id,
    }

    def in_process(run: str, faults: str | None) -> dict[int, str]:
        metrics: list[twopc.BatchMetrics] = []
        spark = request.getfixturevalue("spark")
        if faults:
            with pytest.raises(Exception, match="InjectedFault"):
                run_sql_query(
                    spark, run=run, faults=twopc.FaultPlan.parse(faults),
                    on_metrics=metrics.append, **options,
                )  # fmt: skip
        else:
            run_sql_query(
                spark, run=run, faults=twopc.FaultPlan(), on_metrics=metrics.append, **options
            )
        return _statuses(metrics)

    def as_process(run: str, faults: str) -> dict[int, str]:
        argv = ["tests/e2e/corners_sql_query.py", "--run", run]
        for name, value in options.items():
            argv += [f"--{name.replace('_', '-')}", value]
        result = run_process(argv, faults=faults)
        assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
        return {e["batch"]: e["status"] for e in result.of("batch")}

    def table_rows() -> dict[int, tuple[Any, ...]]:
        rows = db.query(f"SELECT id, val, seq, run FROM {table}")
        return {int(r[0]): (r[1], int(r[2]), r[3]) for r in rows}

    try:
        first = (as_process if kill else in_process)("A", CRASH.format(action=action))
        # a raised fault fails the batch (after its decision); a killed driver reports nothing
        assert first == ({0: "committed"} if kill else {0: "committed", 1: "failed"})
        if transaction_mode == "two_phase":
            # batch 1 is decided and prepared: invisible until the restart commits it
            assert table_rows() == _expected(batches[:1], "A")
            assert target.prepared(sink_id) != []
        else:  # its tasks committed it before the decision
            assert table_rows() == _expected(batches[:2], "AA")
        second = in_process("B", None)  # the shared session: never the killed driver
        assert second == {1: "skipped", 2: "committed"}
        assert table_rows() == _expected(batches, "AAB")
        assert target.leftovers(spec) == []
    finally:
        for gid in target.prepared(sink_id):  # prepared branches would block DROP TABLE
            if backend == "postgres":
                db.query(f"ROLLBACK PREPARED '{gid}'")
            else:
                gtrid, _, bqual = gid.partition(":")
                db.query("XA ROLLBACK %s, %s", (gtrid, bqual))
        target.cleanup(spec)  # the table and the sink's marker rows


# -- 3. CSV, JSON lines and Arrow IPC --------------------------------------------------------

FILES_SCHEMA = "id long, customer string, amount double, flag boolean, day date, at timestamp"


def _files_rows(batch: int) -> list[dict[str, Any]]:
    """Amounts are never whole numbers: pyarrow's CSV writer writes 1.0 as ``1``, and a
    reader that infers types from the first file of a directory would then take the
    column for integers."""
    return [
        {
            "id": batch * 100 + i,
            "customer": f"c{i}",
            "amount": i + 0.25,
            "flag": i % 2 == 0,
            "day": f"2024-05-0{batch + 1}",
            "at": f"2024-05-0{batch + 1}T10:00:0{i}",
        }
        for i in range(5)
    ]


SPARK_TYPES = {
    # spark.read.csv(header=True, inferSchema=True): small ids are inferred as int
    "csv": {
        "id": "int",
        "customer": "string",
        "amount": "double",
        "flag": "boolean",
        "day": "date",
        "at": "timestamp",
    },
    # spark.read.json: dates and timestamps stay strings (no inferTimestamp)
    "json": {
        "id": "bigint",
        "customer": "string",
        "amount": "double",
        "flag": "boolean",
        "day": "string",
        "at": "string",
    },
    # Spark has no Arrow IPC source: the table read by pyarrow, given to createDataFrame
    "arrow": {
        "id": "bigint",
        "customer": "string",
        "amount": "double",
        "flag": "boolean",
        "day": "date",
        "at": "timestamp",
    },
}

PYARROW_TYPES = {
    ("csv", "spark"): "timestamp[ns, tz=UTC]",
    ("csv", "python"): "timestamp[ns, tz=UTC]",
    # Spark writes "2024-05-01T10:00:00.000Z", which pyarrow's JSON reader leaves a string;
    # the Python path writes "2024-05-01T10:00:00+00:00", read as a naive timestamp (UTC)
    ("json", "spark"): "string",
    ("json", "python"): "timestamp[s]",
    ("arrow", "python"): "timestamp[us, tz=Etc/UTC]",
}
"""The type of ``at`` as ``pyarrow.dataset`` infers it (the session time zone is UTC)."""


def _pyarrow_types(fmt: str, path: str) -> dict[str, str]:
    day = {"csv": "date32[day]", "json": "timestamp[s]", "arrow": "date32[day]"}[fmt]
    return {
        "id": "int64",
        "customer": "string",
        "amount": "double",
        "flag": "bool",
        "day": day,
        "at": PYARROW_TYPES[(fmt, path)],
    }


@pytest.mark.parametrize(
    ("fmt", "write_path"),
    [
        ("csv", "spark"),
        ("csv", "python"),
        ("json", "spark"),
        ("json", "python"),
        ("arrow", "python"),
    ],
)
def test_files_formats_are_read_back_by_spark_and_pyarrow(
    spark: Any, tmp_path: Path, fmt: str, write_path: str
) -> None:
    """``write_path="spark"`` is what ``auto`` picks for CSV and JSON on a local disk;
    Arrow IPC is written by Python tasks only."""
    _write_input(tmp_path / "in", [_files_rows(b) for b in range(3)])
    out = tmp_path / "out"
    expected = {row["id"] for b in range(3) for row in _files_rows(b)}

    def start(faults: str | None, metrics: list[twopc.BatchMetrics]) -> Exception | None:
        sink = twopc.create_sink("files", path=str(out), format=fmt, write_path=write_path)
        writer = twopc.foreach_batch(
            sink,
            sink_id=f"corners-{fmt}",
            faults=twopc.FaultPlan.parse(faults) if faults else twopc.FaultPlan(),
            on_metrics=metrics.append,
        )
        query = (
            spark.readStream.schema(FILES_SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .json(str(tmp_path / "in"))
            .repartition(2, "id")
            .writeStream.option("checkpointLocation", str(tmp_path / "chk"))
            .foreachBatch(writer)
            .trigger(availableNow=True)
            .start()
        )
        return _run(query, writer)

    failure = start(CRASH.format(action="raise"), [])
    assert failure is not None and "InjectedFault" in str(failure), failure
    second: list[twopc.BatchMetrics] = []
    assert start(None, second) is None
    assert _statuses(second) == {1: "skipped", 2: "committed"}  # recovery promoted batch 1

    data = sorted(p.name for p in out.iterdir() if not p.name.startswith("_"))
    assert data and all(name.endswith(f".{fmt}") for name in data), data

    if fmt == "arrow":
        with pytest.raises(Exception, match="DATA_SOURCE_NOT_FOUND"):
            spark.read.format("arrow").load(str(out))
        frame = spark.createDataFrame(ds.dataset(str(out), format="arrow").to_table())
    elif fmt == "csv":
        frame = spark.read.options(header=True, inferSchema=True).csv(str(out))
    else:
        frame = spark.read.json(str(out))
    assert dict(frame.dtypes) == SPARK_TYPES[fmt]
    spark_ids = Counter(r["id"] for r in frame.select("id").collect())
    assert spark_ids == Counter(expected)
    # the values survive the round trip (the first row of batch 2)
    first = frame.where("id = 200").collect()[0].asDict()
    assert (first["customer"], first["amount"], first["flag"]) == ("c0", 0.25, True)
    assert str(first["day"]).startswith("2024-05-03") and "10:00:00" in str(first["at"])

    table = ds.dataset(str(out), format=fmt).to_table()
    assert {f.name: str(f.type) for f in table.schema} == _pyarrow_types(fmt, write_path)
    assert Counter(table["id"].to_pylist()) == Counter(expected)
    assert table.num_rows == len(expected)


# -- 4. storage_options, given to the sink only ----------------------------------------------


def test_storage_options_given_to_the_sink_only_reach_the_executors_and_the_commit_log(
    spark: Any, s3_store: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The way docs/quickstart.md and docs/backends/files.md's options table give them:
    ``create_sink("files", path="s3://...", storage_options=...)`` and
    ``foreach_batch(sink, sink_id)`` with neither ``storage_options`` nor ``commit_log``.
    No credentials or endpoint in the environment: the executors' writes, the driver's
    commit log and its recovery can only have reached S3Proxy through the sink's options."""
    import s3fs

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    rows = [[{"id": b * 100 + i, "payload": f"p{b}-{i}"} for i in range(20)] for b in range(3)]
    _write_input(tmp_path / "in", rows)
    prefix = f"corners-{uuid.uuid4().hex[:10]}"
    path = s3_store.url(prefix)
    sink_id = "corners-s3"
    expected = [row["id"] for batch in rows for row in batch]

    def start(faults: str | None, metrics: list[twopc.BatchMetrics]) -> Exception | None:
        sink = twopc.create_sink(
            "files", path=path, format="parquet", storage_options=s3_store.storage_options()
        )
        writer = twopc.foreach_batch(
            sink,
            sink_id=sink_id,
            faults=twopc.FaultPlan.parse(faults) if faults else twopc.FaultPlan(),
            on_metrics=metrics.append,
        )
        query = (
            spark.readStream.schema("id long, payload string")
            .option("maxFilesPerTrigger", 1)
            .json(str(tmp_path / "in"))
            .repartition(2, "id")
            .writeStream.option("checkpointLocation", str(tmp_path / "chk"))
            .foreachBatch(writer)
            .trigger(availableNow=True)
            .start()
        )
        return _run(query, writer)

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3_store.storage_options())
    root = f"{s3_store.bucket}/{prefix}"
    try:
        failure = start(CRASH.format(action="raise"), [])
        assert failure is not None and "InjectedFault" in str(failure), failure
        second: list[twopc.BatchMetrics] = []
        assert start(None, second) is None
        assert _statuses(second) == {1: "skipped", 2: "committed"}

        fs.invalidate_cache()
        table = ds.dataset(root, filesystem=fs, format="parquet").to_table()
        assert Counter(table["id"].to_pylist()) == Counter(expected)
        assert table.schema.field("payload").type == pa.string()
        # the commit log is on S3 next to the data, every batch decided and done
        log = sorted(fs.find(f"{root}/_twopc/{sink_id}"))
        decided = {Path(p).name.split(".")[0] for p in log if p.endswith(".decision.json")}
        done = {Path(p).name.split(".")[0] for p in log if p.endswith(".done")}
        assert decided == done == {f"{b:020d}" for b in range(3)}, log
        assert not (tmp_path / "chk" / "twopc").exists()  # nothing of it in the checkpoint
        spec = SinkRecipe("files", "parquet", sink_id, f"s3://{root}")
        assert S3FilesTarget(s3_store.env()).leftovers(spec) == []  # no staged object or upload
    finally:
        if fs.exists(root):
            fs.rm(root, recursive=True)


def test_mariadb_two_phase_delete_column_over_two_partitions(
    spark: Any, mysql_dsn: str, tmp_path: Path
) -> None:
    """A regression test. The first batch of ``UPSERT_BATCHES`` into an empty MariaDB
    table, ``two_phase``, two partitions; partition 1 starts 2 s after partition 0 (a
    ``sleep`` fault), so partition 0 has written and prepared its keys when partition 1
    merges. Partition 1's delete used to be planned as a full scan of the (small) target,
    locking every row it read, and so waited for partition 0's prepared branch, which only
    commits after every partition prepared: error 1205 after ``lock_timeout_seconds``, on
    every retry, and the batch failed. The delete now reads the batch's rows first and the
    target by key (``STRAIGHT_JOIN``), and the batch commits."""
    db = Database("mysql", mysql_dsn)
    target = SqlTarget("mysql", mysql_dsn)
    table = f"corners_{uuid.uuid4().hex[:10]}"
    sink_id = f"corners-{table[-10:]}"
    db.query(
        f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, val VARCHAR(20), seq BIGINT, "
        "run VARCHAR(20))"
    )
    rows = [dict(zip(("id", "val", "seq", "gone"), r, strict=True)) for r in UPSERT_BATCHES[0]]
    _write_input(tmp_path / "in", [rows])
    try:
        run_sql_query(
            spark,
            backend="mysql",
            dsn=mysql_dsn,
            table=table,
            mode="upsert",
            transaction_mode="two_phase",
            source=str(tmp_path / "in"),
            checkpoint=str(tmp_path / "chk"),
            run="A",
            sink_id=sink_id,
            faults=twopc.FaultPlan.parse("before_begin:sleep=2@batch=0,partition=1"),
            sink_options={"lock_timeout_seconds": 2},
        )
        found = {
            r[0]: (r[1], r[2], r[3]) for r in db.query(f"SELECT id, val, seq, run FROM {table}")
        }
        assert found == _expected(UPSERT_BATCHES[:1], "A")
    finally:
        for gid in target.prepared(sink_id):
            gtrid, _, bqual = gid.partition(":")
            db.query("XA ROLLBACK %s, %s", (gtrid, bqual))
        target.cleanup(SinkRecipe("mysql", "two_phase", sink_id, mysql_dsn, table))
