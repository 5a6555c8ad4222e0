"""The Delta sink's Spark write path (``write_path="spark"``, what ``auto`` chooses for a
table that exists and Spark's writer can write): Spark's own Parquet writer runs phase 1
in one job, the driver moves each Spark partition's files into its attempt's directory,
describes them from their footers, and commits the batch in one Delta commit.

Every check reads the table back with deltalake's reader: the same table as the Python
path writes from the same batch (every type, partition values with characters Spark
escapes, an empty string read as null as Delta defines it), statistics per file, nothing
unreferenced left. The driver's crash points on this path are in
``tests/crash/test_delta_crash_matrix.py``.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from tests.harness.backend_cases import add_input
from tests.harness.entry_runs import command, kill_when, run
from tests.harness.exactly_once import assert_exactly_once
from tests.harness.sink_recipe import SinkRecipe, build_sink
from tests.harness.targets import DeltaTarget

pytest.importorskip("deltalake")

from deltalake import DeltaTable, write_deltalake

from twopc_delta import DeltaSink

pytestmark = [pytest.mark.e2e]

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


def _table(uri: Path, schema: pa.Schema = SCHEMA, **options: Any) -> DeltaSink:
    """Create the table (the Spark path writes tables that exist) and return a sink."""
    write_deltalake(str(uri), schema.empty_table(), **options)
    return DeltaSink(str(uri), write_path="spark")


def _batch(spark: Any, rows: int) -> Any:
    """Rows of every type the Spark path casts; ``region`` holds an empty string, a null
    and a value with characters Spark escapes in directory names; ``small`` comes as a
    long (cast to the table's int)."""
    return spark.sql(
        f"""
        SELECT id,
               CASE id % 5 WHEN 0 THEN 'eu' WHEN 1 THEN '' WHEN 2 THEN NULL
                 WHEN 3 THEN 'a/b=c%d é' ELSE 'us' END AS region,
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


def _left(uri: str) -> list[str]:
    """Every file of the table no version references, and every attempt record."""
    from tests.harness.delta import records_left, unreferenced_data_files

    return unreferenced_data_files(uri) + records_left(uri)


def _stats(uri: str) -> list[dict[str, Any]]:
    """The statistics of each file the log's commit of version 1 adds."""
    lines = (Path(uri) / "_delta_log" / f"{1:020d}.json").read_text().splitlines()
    adds = [json.loads(line)["add"] for line in lines if '"add"' in line]
    return [json.loads(add["stats"]) for add in adds]


def test_the_table_reads_back_as_the_python_path_writes_it(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same batch through both paths into two tables partitioned by a string and a
    date: deltalake returns the same rows with the same types, every file's statistics
    count its rows, and a second write of the same id writes nothing."""
    frame = _batch(spark, 400)
    read: dict[str, pa.Table] = {}
    for path in ("python", "spark"):
        uri = tmp_path / path
        write_deltalake(str(uri), SCHEMA.empty_table(), partition_by=["region", "day"])
        sink = DeltaSink(str(uri), write_path=path)
        caplog.clear()
        caplog.set_level(logging.INFO, logger="twopc")
        metrics = twopc.write_batch(
            frame, sink, "spark-ev", write_id="w1", commit_log=str(tmp_path / f"log-{path}")
        )
        assert metrics.status == "committed" and metrics.rows == 400
        assert ("one Spark write job per batch" in caplog.text) == (path == "spark")
        table = DeltaTable(str(uri))
        assert table.version() == 1  # one commit for the batch
        read[path] = pa.table(table.to_pyarrow_table()).sort_by("id")
        assert sum(s["numRecords"] for s in _stats(str(uri))) == 400
        assert _left(str(uri)) == []
    assert read["spark"].schema == read["python"].schema == SCHEMA
    for name in SCHEMA.names:
        assert read["spark"].column(name).to_pylist() == read["python"].column(name).to_pylist()
    regions = set(read["spark"].column("region").to_pylist())
    assert regions == {"eu", None, "a/b=c%d é", "us"}  # an empty partition value is null
    spark_ids = [s["minValues"]["id"] for s in _stats(str(tmp_path / "spark"))]
    assert min(spark_ids) == 0

    sink = DeltaSink(str(tmp_path / "spark"), write_path="spark")
    again = twopc.write_batch(
        frame, sink, "spark-ev", write_id="w1", commit_log=str(tmp_path / "log-spark")
    )
    assert again.status == "skipped"
    assert DeltaTable(str(tmp_path / "spark")).version() == 1


@pytest.mark.parametrize(
    ("query", "cause"),
    [
        ("SELECT id, CAST(id AS STRING) || 'x' AS small FROM range(20)", "CAST_INVALID_INPUT"),
        ("SELECT id, id * 10000000000 AS small FROM range(20)", "CAST_OVERFLOW"),
        ("SELECT id, 1 AS other FROM range(20)", "the data has column(s) 'other'"),
    ],
    ids=["malformed", "overflow", "unknown-column"],
)
def test_data_the_table_cannot_take_fails_the_batch_and_leaves_nothing(
    spark: Any, tmp_path: Path, query: str, cause: str
) -> None:
    """A value the table's type cannot hold (ANSI casts: never a silent null) or a column
    the table lacks: the batch fails with an error naming the sink, the batch and the
    cause; the table shows nothing of it and no file of the job is left."""
    uri = tmp_path / "t"
    sink = _table(uri)
    with pytest.raises(twopc.BatchFailedError) as failure:
        twopc.write_batch(
            spark.sql(query), sink, "spark-bad", write_id="w1", commit_log=str(tmp_path / "log")
        )
    message = str(failure.value)
    assert "sink 'spark-bad', batch 0" in message and cause in message, message
    table = DeltaTable(str(uri))
    assert table.version() == 0 and pa.table(table.to_pyarrow_table()).num_rows == 0
    assert _left(str(uri)) == []


def test_an_empty_batch_commits_and_adds_no_file(spark: Any, tmp_path: Path) -> None:
    uri = tmp_path / "t"
    sink = _table(uri, partition_by=["region"])
    metrics = twopc.write_batch(
        _batch(spark, 10).where("id < 0"),
        sink,
        "spark-empty",
        write_id="w1",
        commit_log=str(tmp_path / "log"),
    )
    assert metrics.status == "committed" and metrics.rows == 0
    assert pa.table(DeltaTable(str(uri)).get_add_actions()).num_rows == 0
    assert _left(str(uri)) == []


def test_what_the_spark_path_cannot_write_goes_to_python_tasks(tmp_path: Path) -> None:
    """``auto`` names why it keeps the Python path; ``write_path="spark"`` refuses the same
    cases with a ConfigurationError saying why."""
    uri = str(tmp_path / "t")
    missing = DeltaSink(uri, create_table=True)
    assert "does not exist yet" in str(missing.spark_write_refusal())
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("tags", pa.list_(pa.string())),
            ("at", pa.timestamp("us", tz="UTC")),
        ]
    )
    write_deltalake(uri, schema.empty_table(), partition_by=["at"])
    refusal = str(DeltaSink(uri).spark_write_refusal())
    assert "column 'id' is not null" in refusal, refusal
    assert "column 'tags' is list<" in refusal, refusal
    assert "partition column 'at'" in refusal, refusal
    cases = {
        "mode='upsert'": DeltaSink(uri, mode="upsert", key_columns=["id"]),
        "add_columns": DeltaSink(uri, schema_evolution="add_columns"),
    }
    for reason, sink in cases.items():
        assert reason in str(sink.spark_write_refusal()), reason
    assert DeltaSink(uri, write_path="python").spark_write_refusal() == "write_path='python'"
    forced = DeltaSink(uri, write_path="spark")
    with pytest.raises(twopc.ConfigurationError, match=r"write_path='spark'.*column 'id'"):
        forced.spark_write_refusal()
    assert forced.spark_write_required()
    with pytest.raises(twopc.ConfigurationError, match="write_path must be one of"):
        DeltaSink(uri, write_path="jvm")


# -- a streaming query, its driver SIGKILLed in the middle of Spark's write job -------------


def spark_path_recipe(tmp_path: Path) -> SinkRecipe:
    """A Delta table with the test query's columns, created now (the Spark path writes
    tables that exist), and a recipe whose sink writes it through Spark's writer."""
    uri = tmp_path / "delta-table"
    schema = pa.schema([("id", pa.int64()), ("payload", pa.string()), ("slowed", pa.string())])
    write_deltalake(str(uri), schema.empty_table())
    return SinkRecipe(
        "delta",
        "append",
        f"dsw-{uuid.uuid4().hex[:8]}",
        str(uri),
        options=json.dumps({"write_path": "spark"}),
    )


def _in_job(uri: Path, batch: int) -> bool:
    """Whether a task of ``batch``'s Spark write job has opened its file (under the job's
    ``_temporary`` directory, where Spark's committer keeps task output until it commits)."""
    pattern = f"twopc-data/*/*/{batch}/0-*/_spark_job/_temporary/**/part-*"
    return any(path.is_file() for path in uri.glob(pattern))


@pytest.mark.slow
def test_driver_sigkilled_in_the_middle_of_the_spark_write_job(tmp_path: Path) -> None:
    """The driver (and its local executors) is SIGKILLed while batch 1's write job runs:
    the table shows batch 0 only, the job's output stays in the run's directory, which no
    version references. The restart's recovery removes it, Spark writes the batch again,
    and deltalake shows every id once, with nothing unreferenced left."""
    spec = spark_path_recipe(tmp_path)
    source = tmp_path / "in"
    expected = set().union(*(add_input(source, b) for b in range(3)))
    target = DeltaTarget()
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
    assert isinstance(sink, DeltaSink) and sink.write_path == "spark"


@pytest.mark.slow
@pytest.mark.extended
def test_a_query_from_a_spark_connect_client(connect: Any, tmp_path: Path) -> None:
    """Over Spark Connect the ``foreachBatch`` function, next to the server, runs Spark's
    writer with the session settings it needs; a second run, with
    ``background_commit=True``, adds a batch, each id once."""
    spec = spark_path_recipe(tmp_path)
    source = tmp_path / "in"
    expected = add_input(source, 0) | add_input(source, 1)
    target = DeltaTarget()
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
    assert "/_spark_job" not in (first.stderr + second.stderr)


def test_a_group_member_writes_through_spark_s_writer(spark: Any, tmp_path: Path) -> None:
    """In a ``SinkGroup`` each member chooses its own phase 1: the Delta member's table
    exists, so Spark's writer writes it; the files member runs Python tasks. One decision,
    both targets hold every row once."""
    import pyarrow.dataset as ds

    uri = tmp_path / "t"
    sink = _table(uri)
    audit = twopc.create_sink(
        "files", path=str(tmp_path / "audit"), format="parquet", write_path="python"
    )
    group = twopc.SinkGroup({"lake": sink, "audit": audit})
    metrics = twopc.write_batch(
        _batch(spark, 50), group, "spark-group", write_id="w1", commit_log=str(tmp_path / "log")
    )
    assert metrics.status == "committed"
    table = DeltaTable(str(uri))
    assert sorted(pa.table(table.to_pyarrow_table()).column("id").to_pylist()) == list(range(50))
    assert _stats(str(uri))  # the batch's commit (version 1) added Spark's files
    audited = ds.dataset(str(tmp_path / "audit"), format="parquet").to_table()
    assert sorted(audited.column("id").to_pylist()) == list(range(50))
    assert _left(str(uri)) == []
