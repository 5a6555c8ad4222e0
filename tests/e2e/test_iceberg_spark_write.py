"""The Iceberg sink's Spark write path (``write_path="spark"``, what ``auto`` chooses for a
table Spark's writer can write): Spark's own Parquet writer runs phase 1 in one job, the
driver moves each Spark partition's files into its attempt's directory, describes them
from their footers, and commits the batch in one snapshot.

Every check reads the table back with a pyiceberg scan: values and types as the Python
path writes them (timestamps, decimals, dates, an empty string apart from a null in an
identity partition), each file in one partition, the name mapping that readers of files
without field ids need, nothing unreferenced left. The driver's crash points on this path
are in ``tests/crash/test_iceberg_crash_matrix.py``.
"""

from __future__ import annotations

import datetime
import decimal
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import twopc
from tests.harness.backend_cases import add_input
from tests.harness.entry_runs import command, kill_executors_when, kill_when, run
from tests.harness.exactly_once import assert_exactly_once
from tests.harness.iceberg import records_left, unreferenced_data_files
from tests.harness.sink_recipe import SinkRecipe, build_sink
from tests.harness.targets import IcebergTarget

pytest.importorskip("pyiceberg")

from twopc_iceberg import IcebergSink

pytestmark = [pytest.mark.e2e]

TABLE = "db.events"
CRASH_BATCH = 1
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("region", pa.string()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("local_ts", pa.timestamp("us")),
        ("amount", pa.decimal128(12, 2)),
        ("ratio", pa.float64()),
        ("small", pa.int32()),
        ("flag", pa.bool_()),
        ("blob", pa.binary()),
        ("note", pa.string()),
    ]
)


def _table(warehouse: Path, schema: pa.Schema = SCHEMA, **options: Any) -> IcebergSink:
    """Create the table (the Spark path writes tables that exist) and return a sink."""
    creator = IcebergSink(TABLE, warehouse=str(warehouse), create_table=True, **options)
    creator.access.for_data(schema)
    return IcebergSink(TABLE, warehouse=str(warehouse), write_path="spark")


def _batch(spark: Any, rows: int) -> Any:
    """Rows of every type the Spark path casts; ``region`` holds an empty string and a
    null besides names, ``small`` comes as a long (cast to the table's int)."""
    return spark.sql(
        f"""
        SELECT id,
               CASE id % 4 WHEN 0 THEN 'eu' WHEN 1 THEN '' WHEN 2 THEN NULL ELSE 'us' END
                 AS region,
               date'2026-11-01' + CAST(id % 3 AS INT) AS day,
               timestamp'2026-11-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS ts,
               CAST('2026-11-01 00:00:00' AS TIMESTAMP_NTZ)
                 + make_interval(0, 0, 0, 0, 0, CAST(id AS INT), 0) AS local_ts,
               CAST(id / 7 AS DECIMAL(12, 2)) AS amount,
               CASE WHEN id % 5 = 0 THEN NULL ELSE id / 3.0D END AS ratio,
               id * 2 AS small,
               id % 2 = 0 AS flag,
               CAST(CAST(id AS STRING) AS BINARY) AS blob
        FROM range({rows})
        """
    ).repartition(3)


def _unreferenced(sink: IcebergSink) -> list[str]:
    """Every file under the table's data path that no snapshot references, and every
    attempt record: empty when nothing was left."""
    warehouse = sink.access.properties["warehouse"].removeprefix("file://")
    return unreferenced_data_files(warehouse, TABLE) + records_left(warehouse, TABLE)


def test_values_types_and_identity_partitions_read_back_exactly(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A table partitioned by a string and a date: a pyiceberg scan returns every row with
    the values Spark had (cast to the table's types), each data file in one partition
    whose value is exact (an empty string is not a null), the name mapping set, and a
    second write of the same id writes nothing."""
    sink = _table(tmp_path / "wh", partition_by=["region", "day"])
    frame = _batch(spark, 400)
    caplog.set_level(logging.INFO, logger="twopc")
    metrics = twopc.write_batch(
        frame, sink, "spark-ev", write_id="w1", commit_log=str(tmp_path / "log")
    )
    assert metrics.status == "committed" and metrics.rows == 400
    assert "one Spark write job per batch" in caplog.text

    table = sink.load_table()
    assert table is not None
    got = table.scan().to_arrow().sort_by("id")
    expected = frame.toArrow().sort_by("id")
    assert got.num_rows == 400
    for name in expected.column_names:
        wanted = expected.column(name).cast(SCHEMA.field(name).type)
        assert got.column(name).to_pylist() == wanted.to_pylist(), name
    assert got.column("note").null_count == 400  # a column the data lacks reads as null
    assert got.column("small").to_pylist()[:3] == [0, 2, 4]
    assert got.filter(pc.equal(got["region"], "")).num_rows == 100
    assert got.column("region").null_count == 100
    assert got.column("amount").to_pylist()[7] == decimal.Decimal("1.00")
    assert got.column("local_ts").to_pylist()[1] == datetime.datetime(2026, 11, 1, 0, 1)
    assert "schema.name-mapping.default" in table.properties

    files = table.inspect.files().to_pylist()
    assert len(table.snapshots()) == 1
    for entry in files:
        path = entry["file_path"]
        assert "/data/twopc/spark-ev/" in path and path.endswith(".parquet"), path
        one = pq.read_table(path.removeprefix("file://"), columns=["region", "day"])
        assert len(set(one.column("region").to_pylist())) == 1, path
        assert [entry["partition"]["region"]] == one.column("region").unique().to_pylist()
        day = one.column("day").unique().to_pylist()
        assert [entry["partition"]["day"]] == day
    assert {(e["partition"]["region"]) for e in files} == {"eu", "", None, "us"}
    assert _unreferenced(sink) == []

    again = twopc.write_batch(
        frame, sink, "spark-ev", write_id="w1", commit_log=str(tmp_path / "log")
    )
    assert again.status == "skipped"
    assert table.refresh().scan().to_arrow().num_rows == 400


@pytest.mark.parametrize(
    ("query", "cause"),
    [
        ("SELECT id, CAST(id AS STRING) || 'x' AS small FROM range(20)", "CAST_INVALID_INPUT"),
        ("SELECT id, id * 10000000000 AS small FROM range(20)", "CAST_OVERFLOW"),
        ("SELECT id, 1 AS other FROM range(20)", "the data has column(s) ['other']"),
    ],
    ids=["malformed", "overflow", "unknown-column"],
)
def test_data_the_table_cannot_take_fails_the_batch_and_leaves_nothing(
    spark: Any, tmp_path: Path, query: str, cause: str
) -> None:
    """A value the table's type cannot hold (ANSI casts: never a silent null) or a column
    the table lacks: the batch fails with an error naming the sink, the batch and the
    cause; the table shows nothing of it and no file of the job is left."""
    sink = _table(tmp_path / "wh")
    with pytest.raises(twopc.BatchFailedError) as failure:
        twopc.write_batch(
            spark.sql(query), sink, "spark-bad", write_id="w1", commit_log=str(tmp_path / "log")
        )
    message = str(failure.value)
    assert "sink 'spark-bad', batch 0" in message and cause in message, message
    assert isinstance(failure.value.__cause__, twopc.PermanentSinkError)
    table = sink.load_table()
    assert table is not None and table.scan().to_arrow().num_rows == 0
    assert _unreferenced(sink) == []


def test_a_session_without_ansi_casts_still_refuses_a_value_the_table_cannot_take(
    spark: Any, tmp_path: Path
) -> None:
    """The write's casts are analysed under its own settings: a session with ANSI mode
    off gets no silent null for a value that overflows the table's type, and keeps its
    own setting afterwards."""
    sink = _table(tmp_path / "wh")
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        batch = spark.sql("SELECT id, id * 10000000000 AS small FROM range(20)")
        with pytest.raises(twopc.BatchFailedError, match="CAST_OVERFLOW"):
            twopc.write_batch(
                batch, sink, "spark-lenient", write_id="w1", commit_log=str(tmp_path / "log")
            )
        assert spark.conf.get("spark.sql.ansi.enabled") == "false"
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)
    table = sink.load_table()
    assert table is not None and table.scan().to_arrow().num_rows == 0
    assert _unreferenced(sink) == []


def test_what_the_spark_path_cannot_write_goes_to_python_tasks(tmp_path: Path) -> None:
    """``auto`` names why it keeps the Python path; ``write_path="spark"`` refuses the same
    cases with a ConfigurationError saying why."""
    warehouse = str(tmp_path / "wh")
    missing = IcebergSink(TABLE, warehouse=warehouse, create_table=True)
    assert "does not exist yet" in str(missing.spark_write_refusal())
    _table(
        tmp_path / "wh",
        pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us"))]),
        partition_by=["bucket(4, id)"],
    )
    cases = {
        "bucket[4](id)": IcebergSink(TABLE, warehouse=warehouse),
        "mode='upsert'": IcebergSink(TABLE, warehouse=warehouse, mode="upsert", key_columns=["id"]),
        "add_columns": IcebergSink(TABLE, warehouse=warehouse, schema_evolution="add_columns"),
        "target_file_size": IcebergSink(TABLE, warehouse=warehouse, target_file_size=1 << 20),
    }
    for reason, sink in cases.items():
        assert reason in str(sink.spark_write_refusal()), reason
    assert (
        IcebergSink(TABLE, warehouse=warehouse, write_path="python").spark_write_refusal()
        == "write_path='python'"
    )
    forced = IcebergSink(TABLE, warehouse=warehouse, write_path="spark")
    with pytest.raises(twopc.ConfigurationError, match=r"write_path='spark'.*bucket\[4\]\(id\)"):
        forced.spark_write_refusal()
    assert forced.spark_write_required()


def test_nested_and_required_columns_keep_the_python_path(tmp_path: Path) -> None:
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("tags", pa.list_(pa.string()))]
    )
    _table(tmp_path / "wh", schema)
    refusal = str(IcebergSink(TABLE, warehouse=str(tmp_path / "wh")).spark_write_refusal())
    assert "column 'id' is required" in refusal and "column 'tags' is list" in refusal


# -- a streaming query, its driver SIGKILLed in the middle of Spark's write job -------------


def _spec(tmp_path: Path) -> SinkRecipe:
    warehouse = tmp_path / "wh"
    spec = SinkRecipe(
        "iceberg",
        "",
        f"isw-{uuid.uuid4().hex[:8]}",
        str(warehouse),
        TABLE,
        options=json.dumps({"write_path": "spark"}),
    )
    # the query's columns (``slowed``: the JVM's delay of some rows, entry_query.slowed)
    schema = pa.schema([("id", pa.int64()), ("payload", pa.string()), ("slowed", pa.string())])
    IcebergSink(TABLE, warehouse=str(warehouse), create_table=True).access.for_data(schema)
    return spec


def _in_job(warehouse: Path, batch: int) -> bool:
    """Whether a task of ``batch``'s Spark write job has opened its file (under the job's
    ``_temporary`` directory, where Spark's committer keeps task output until it commits)."""
    pattern = f"db/events/data/twopc/*/*/{batch}/0-*/_spark_job/_temporary/**/part-*"
    return any(path.is_file() for path in warehouse.glob(pattern))


@pytest.mark.slow
def test_driver_sigkilled_in_the_middle_of_the_spark_write_job(tmp_path: Path) -> None:
    """The driver (and its local executors) is SIGKILLed while batch 1's write job runs:
    the table shows batch 0 only, the job's output stays in the run's directory, which no
    snapshot references. The restart's recovery removes it, Spark writes the batch again,
    and a scan shows every id once, with nothing unreferenced left."""
    spec = _spec(tmp_path)
    source = tmp_path / "in"
    expected = set().union(*(add_input(source, b) for b in range(3)))
    target = IcebergTarget({})
    slow = ["--slow-ids", f"{40 * CRASH_BATCH}:{40 * CRASH_BATCH + 40}", "--slow-ms", "150"]
    args = command("foreach", spec, source, tmp_path / "chk") + slow
    kill_when(args, tmp_path, lambda: _in_job(Path(spec.address), CRASH_BATCH), "the job ran")
    assert set(target.committed(spec)) == set(range(40))  # batch 0, nothing of batch 1
    assert target.leftovers(spec) != []  # the killed job's files, until recovery

    rerun = run(command("foreach", spec, source, tmp_path / "chk"))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_exactly_once(target.committed(spec), expected)
    assert target.leftovers(spec) == []
    sink = build_sink(spec)
    assert isinstance(sink, IcebergSink) and sink.write_path == "spark"


@pytest.mark.slow
@pytest.mark.extended
def test_an_executor_sigkilled_mid_job_is_retried_by_spark(tmp_path: Path) -> None:
    """``local-cluster``: both executor JVMs are SIGKILLed while batch 1's write job runs;
    Spark runs the job's tasks again on new executors inside the same job, its committer
    keeping one attempt per partition. The batch commits once, in the same query run, and
    nothing is left unreferenced."""
    spec = _spec(tmp_path)
    source = tmp_path / "in"
    expected = set().union(*(add_input(source, b) for b in range(3)))
    target = IcebergTarget({})
    args = [
        *command("foreach", spec, source, tmp_path / "chk", master="local-cluster[2,1,1024]"),
        *["--slow-ids", f"{40 * CRASH_BATCH}:{40 * CRASH_BATCH + 40}", "--slow-ms", "150"],
    ]
    returncode, output = kill_executors_when(
        args,
        tmp_path / "query.log",
        lambda: _in_job(Path(spec.address), CRASH_BATCH),
        "batch 1's write job started",
    )
    assert returncode == 0, output[-3000:]
    assert_exactly_once(target.committed(spec), expected)
    assert target.leftovers(spec) == []


@pytest.mark.slow
@pytest.mark.extended
def test_a_query_from_a_spark_connect_client(connect: Any, tmp_path: Path) -> None:
    """Over Spark Connect the ``foreachBatch`` function, next to the server, runs Spark's
    writer with the session settings it needs (set on the server's session and put back);
    a second run, with ``background_commit=True`` (which commits inside ``foreachBatch``
    over Connect), adds a batch, each id once."""
    spec = _spec(tmp_path)
    source = tmp_path / "in"
    expected = add_input(source, 0) | add_input(source, 1)
    target = IcebergTarget({})
    first = run(command("foreach", spec, source, tmp_path / "chk", remote=connect.url))
    assert first.returncode == 0, first.stderr[-3000:]
    assert_exactly_once(target.committed(spec), expected)
    expected |= add_input(source, 2)
    second = run(
        [
            *command("foreach", spec, source, tmp_path / "chk", remote=connect.url),
            "--background-commit",
        ]
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert_exactly_once(target.committed(spec), expected)
    assert target.leftovers(spec) == []
    table = build_sink(spec).load_table()
    assert "schema.name-mapping.default" in table.properties  # Spark's files were committed


def _files_hold_their_partitions(table: Any) -> set[tuple[str, Any]]:
    """Assert that every row of each data file has the file's partition value under
    pyiceberg's own transform; the (partition field, value) pairs the files hold."""
    spec, schema = table.spec(), table.schema()
    seen = set()
    for entry in table.inspect.files().to_pylist():
        rows = pq.read_table(entry["file_path"].removeprefix("file://"))
        for spec_field in spec.fields:
            source = schema.find_field(spec_field.source_id)
            transform = spec_field.transform.pyarrow_transform(source.field_type)
            values = transform(rows.column(source.name)).to_pylist()
            wanted = entry["partition"][spec_field.name]
            if isinstance(wanted, datetime.date):  # a day partition reads back as a date
                wanted = (wanted - datetime.date(1970, 1, 1)).days
            assert set(values) == {wanted}, (entry["file_path"], spec_field.name, values)
            seen.add((spec_field.name, wanted))
    return seen


@pytest.mark.parametrize(
    "partition_by",
    [
        pytest.param(["day(ts)", "month(day)"], id="day(ts)+month(day)"),
        pytest.param(["hour(local_ts)"], id="hour(local_ts)", marks=pytest.mark.extended),
        pytest.param(["year(ts)", "day(day)"], id="year(ts)+day(day)", marks=pytest.mark.extended),
        pytest.param(
            ["hour(ts)", "year(local_ts)"], id="hour(ts)+year(local_ts)", marks=pytest.mark.extended
        ),
    ],
)
def test_time_partitions_hold_the_rows_iceberg_puts_there(
    spark: Any, tmp_path: Path, partition_by: list[str]
) -> None:
    """``year``/``month``/``day``/``hour`` partitions computed in Spark SQL: every row of each
    data file has the file's partition value under pyiceberg's own transform, timestamps
    before 1970 and nulls included, in a session whose time zone is not UTC."""
    sink = _table(tmp_path / "wh", partition_by=partition_by)
    frame = spark.sql(
        """
        SELECT id, CAST(NULL AS STRING) AS region,
               CASE WHEN id = 7 THEN NULL ELSE date'1969-12-30' + CAST(id % 5 AS INT) END AS day,
               CASE WHEN id = 3 THEN NULL
                    ELSE timestamp'1969-12-31 22:30:00+00:00'
                      + make_interval(0, 0, 0, 0, 0, CAST(id * 37 AS INT), 0)
               END AS ts,
               CAST('1969-12-31 23:10:00' AS TIMESTAMP_NTZ)
                 + make_interval(0, 0, 0, 0, 0, CAST(id * 29 AS INT), 0) AS local_ts
        FROM range(120)
        """
    ).repartition(2)
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        metrics = twopc.write_batch(
            frame, sink, "spark-time", write_id="w1", commit_log=str(tmp_path / "log")
        )
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    assert metrics.status == "committed" and metrics.rows == 120
    table = sink.load_table()
    assert table is not None
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(120))
    assert len(table.inspect.files()) > 2
    _files_hold_their_partitions(table)
    assert _unreferenced(sink) == []


def test_truncate_partitions_of_numbers_hold_the_rows_iceberg_puts_there(
    spark: Any, tmp_path: Path
) -> None:
    """``truncate`` of a long and an int column computed in Spark SQL: every row of each
    data file has the file's partition value under pyiceberg's own transform, negative
    values (-1 truncates to -width) and nulls included."""
    sink = _table(tmp_path / "wh", partition_by=["truncate(10, id)", "truncate(3, small)"])
    assert sink.spark_write_refusal() is None
    frame = spark.sql(
        """
        SELECT id - 60 AS id,
               CASE WHEN id % 9 = 0 THEN NULL ELSE CAST(id * 7 - 400 AS INT) END AS small
        FROM range(120)
        """
    ).repartition(2)
    metrics = twopc.write_batch(
        frame, sink, "spark-truncate", write_id="w1", commit_log=str(tmp_path / "log")
    )
    assert metrics.status == "committed" and metrics.rows == 120
    table = sink.load_table()
    assert table is not None
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(-60, 60))
    assert len(table.inspect.files()) >= 12
    seen = _files_hold_their_partitions(table)
    assert ("id_truncate_10", -60) in seen and ("id_truncate_10", -10) in seen
    assert ("small_truncate_3", None) in seen
    assert _unreferenced(sink) == []


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.integration
@pytest.mark.parametrize("write_path", ["spark", "python"])
def test_a_spark_query_through_the_rest_catalog_survives_its_driver_killed(
    iceberg_rest_uri: str, tmp_path: Path, write_path: str
) -> None:
    """A streaming query on real Spark whose table lives in the REST catalog (the
    ``iceberg-rest`` service), on each write path: its driver SIGKILLed after batch 1's
    decision, the query started again; a scan through the catalog shows every id once."""
    import signal

    spec = SinkRecipe(
        "iceberg",
        "rest",
        f"isr-{uuid.uuid4().hex[:8]}",
        str(tmp_path / "wh"),
        f"r{uuid.uuid4().hex[:8]}.events",
        options=json.dumps(
            {
                "catalog_properties": {"type": "rest", "uri": iceberg_rest_uri},
                "write_path": write_path,
            }
        ),
    )
    sink = build_sink(spec)
    assert isinstance(sink, IcebergSink)
    sink.access.for_data(pa.schema([("id", pa.int64()), ("payload", pa.string())]))
    target = IcebergTarget({"ICEBERG_REST_URI": iceberg_rest_uri}, "rest")
    source = tmp_path / "in"
    expected = set().union(*(add_input(source, b) for b in range(3)))
    faults = f"after_decision:kill@batch={CRASH_BATCH}"
    crashed = run(command("foreach", spec, source, tmp_path / "chk", faults=faults))
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    finished = run(command("foreach", spec, source, tmp_path / "chk"))
    assert finished.returncode == 0, finished.stderr[-3000:]
    try:
        assert_exactly_once(target.committed(spec), expected)
        assert target.leftovers(spec) == []
        table = sink.load_table()
        assert table is not None
        named = "schema.name-mapping.default" in table.properties
        assert named == (write_path == "spark")  # only Spark's files lack field ids
    finally:
        target.cleanup(spec)


def test_an_empty_batch_commits_and_shows_nothing(spark: Any, tmp_path: Path) -> None:
    """A batch without rows (Spark may still write an empty file per task): the batch is
    committed (its marker moves), no data file is added, nothing is left."""
    sink = _table(tmp_path / "wh", partition_by=["region"])
    empty = _batch(spark, 10).where("id < 0")
    metrics = twopc.write_batch(
        empty, sink, "spark-empty", write_id="w1", commit_log=str(tmp_path / "log")
    )
    assert metrics.status == "committed" and metrics.rows == 0
    table = sink.load_table()
    assert table is not None
    assert table.scan().to_arrow().num_rows == 0
    assert table.inspect.files().num_rows == 0
    assert any(key.startswith("twopc.committed.spark-empty.") for key in table.properties)
    assert _unreferenced(sink) == []


def test_a_batch_of_the_table_s_own_types_is_written_as_it_is(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch whose columns are the table's, in its order and of its types, into an
    unpartitioned table: Spark's job writes the batch without the casting projection (no
    ``selectExpr``), and the table holds every value exactly."""
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("ts", pa.timestamp("us")),
            ("name", pa.string()),
            ("score", pa.float64()),
        ]
    )
    sink = _table(tmp_path / "wh", schema)
    frame = spark.sql(
        """
        SELECT id,
               CAST('2026-11-01 00:00:00' AS TIMESTAMP_NTZ)
                 + make_interval(0, 0, 0, 0, 0, 0, id) AS ts,
               concat('customer-', CAST(id AS STRING)) AS name,
               id * 0.5D AS score
        FROM range(200)
        """
    ).repartition(2)
    projected: list[tuple[str, ...]] = []
    select_expr = type(frame).selectExpr

    def counting(self: Any, *expressions: str) -> Any:
        projected.append(expressions)
        return select_expr(self, *expressions)

    monkeypatch.setattr(type(frame), "selectExpr", counting)
    metrics = twopc.write_batch(
        frame, sink, "spark-identity", write_id="w1", commit_log=str(tmp_path / "log")
    )
    assert metrics.status == "committed" and metrics.rows == 200
    assert projected == []
    table = sink.load_table()
    assert table is not None
    got = table.scan().to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == list(range(200))
    assert got.column("name").to_pylist() == [f"customer-{i}" for i in range(200)]
    assert got.column("score").to_pylist() == [i * 0.5 for i in range(200)]
    start = datetime.datetime(2026, 11, 1)
    assert got.column("ts").to_pylist() == [
        start + datetime.timedelta(seconds=i) for i in range(200)
    ]
    assert _unreferenced(sink) == []


def test_a_group_member_writes_through_spark_s_writer(spark: Any, tmp_path: Path) -> None:
    """In a ``SinkGroup`` each member chooses its own phase 1: the Iceberg member's table
    exists, so Spark's writer writes it; the files member runs Python tasks. One decision,
    both targets hold every row once."""
    import pyarrow.dataset as ds

    sink = _table(tmp_path / "wh")
    audit = twopc.create_sink(
        "files", path=str(tmp_path / "audit"), format="parquet", write_path="python"
    )
    group = twopc.SinkGroup({"lake": sink, "audit": audit})
    frame = _batch(spark, 50)
    metrics = twopc.write_batch(
        frame, group, "spark-group", write_id="w1", commit_log=str(tmp_path / "log")
    )
    assert metrics.status == "committed"
    table = sink.load_table()
    assert table is not None
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(50))
    assert "schema.name-mapping.default" in table.properties  # Spark's writer wrote it
    audited = ds.dataset(str(tmp_path / "audit"), format="parquet").to_table()
    assert sorted(audited.column("id").to_pylist()) == list(range(50))
