"""The files sink's Spark write path without Spark: the options Spark's writer gets, and what
the driver makes of a write job's output, laid out on disk the way Spark's file writers lay
it out (``part-<split>-<uuid>-c<counter>.<ext>`` files, ``_SUCCESS``, ``.crc`` checksums,
a ``_temporary`` directory). Real Spark runs these steps in ``tests/e2e``.

Every assertion is about files on disk and rows read back with pyarrow.
"""

from __future__ import annotations

import logging
import re
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import twopc
from twopc import ConfigurationError, PermanentSinkError, SparkWrite, TaskContext, WorkKind
from twopc._engines.spark import choose_spark_write, spark_write_of
from twopc_files import FilesSink
from twopc_files._batch_log import SparkBatchLog
from twopc_files._layout import name_token
from twopc_files._spark_write import parse_spark_file, translate_write_options

pytestmark = pytest.mark.unit

SINK, QUERY, BATCH, RUN = "orders", "q-1", 3, 1234567


def run_ctx() -> TaskContext:
    return TaskContext(SINK, QUERY, BATCH, 0, RUN, run_id="run-1")


def job_dir(write: SparkWrite) -> Path:
    assert write.path.startswith("file://")
    return Path(write.path.removeprefix("file://"))


def spark_file(job: Path, relative: str, ids: range) -> None:
    """A Parquet file where Spark's writer would have left it, with its checksum."""
    path = job / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(list(ids), pa.int64())}), path)
    (path.parent / f".{path.name}.crc").write_bytes(b"crc")


def spark_output(job: Path) -> None:
    """Spark's output of a two-way ``partitionBy("day")`` job whose split 1 wrote nothing,
    split 0 rolled a file in ``day=a`` (``maxRecordsPerFile``), and a killed task attempt
    left its file under ``_temporary``."""
    uid = str(uuid.uuid4())
    spark_file(job, f"day=a/part-00000-{uid}.c000.snappy.parquet", range(10))
    spark_file(job, f"day=a/part-00000-{uid}.c001.snappy.parquet", range(10, 15))
    spark_file(job, f"day=b/part-00000-{uid}.c000.snappy.parquet", range(15, 20))
    spark_file(job, f"day=a/part-00002-{uid}.c000.snappy.parquet", range(20, 30))
    killed = "_temporary/0/_temporary/attempt_1_m_000002_9"
    spark_file(job, f"{killed}/part-00002-{uid}.c000.snappy.parquet", range(20, 30))
    (job / "_SUCCESS").write_bytes(b"")


def visible(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file()
        and not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts)
    )


def read_ids(root: Path) -> list[int]:
    if not visible(root):
        return []
    table = ds.dataset(str(root), format="parquet", partitioning="hive").to_table()
    return sorted(table["id"].to_pylist())


# -- the plan -------------------------------------------------------------------------------


def test_the_plan_names_a_hidden_directory_of_the_run(tmp_path: Path) -> None:
    sink = FilesSink(str(tmp_path / "out"), partition_by=["day"])
    stale = tmp_path / "out/_twopc_staging/orders/q-1" / f"{BATCH:020d}" / f"spark-{RUN}"
    stale.mkdir(parents=True)
    (stale / "part-00000-x-c000.parquet").write_bytes(b"left by a process that died")

    write = sink.plan_spark_write(run_ctx(), ["id", "day"])

    assert write == SparkWrite(
        "parquet",
        f"file://{stale}",
        {"partitionOverwriteMode": "static"},
        ("day",),
    )
    assert not stale.exists()


def test_a_missing_partition_column_is_bad_input(tmp_path: Path) -> None:
    sink = FilesSink(str(tmp_path / "out"), partition_by=["region"])
    with pytest.raises(PermanentSinkError, match=r"\['region'\] not in the data"):
        sink.plan_spark_write(run_ctx(), ["id", "day"])


@pytest.mark.parametrize(
    ("fmt", "write_options", "spark_options", "expected"),
    [
        ("csv", {}, {}, {"header": "true"}),
        ("csv", {"include_header": False, "delimiter": ";"}, {}, {"header": "false", "sep": ";"}),
        ("parquet", {"compression": "ZSTD"}, {}, {"compression": "zstd"}),
        (
            "parquet",
            {},
            {"maxRecordsPerFile": 1000, "x": True},
            {"maxRecordsPerFile": "1000", "x": "true"},
        ),
        ("orc", {"compression": "uncompressed"}, {}, {"compression": "none"}),
    ],
)
def test_options_for_sparks_writer(
    tmp_path: Path,
    fmt: str,
    write_options: dict[str, Any],
    spark_options: dict[str, Any],
    expected: dict[str, str],
) -> None:
    sink = FilesSink(
        str(tmp_path), format=fmt, write_options=write_options, spark_options=spark_options
    )
    assert sink.spark_write_refusal() is None
    write = sink.plan_spark_write(run_ctx(), ["id"])
    assert write.format == fmt
    assert dict(write.options) == {"partitionOverwriteMode": "static", **expected}


def test_run_locations_get_the_committer_settings_and_local_ones_the_raw_filesystem() -> None:
    from twopc._engines.run_location import run_location_options

    committer = {
        "mapreduce.fileoutputcommitter.algorithm.version": "2",
        "mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    }
    assert run_location_options("hdfs://nn/out/_spark/run") == committer
    assert run_location_options("s3a://bucket/out/_spark/run") == committer
    assert run_location_options("file:///data/out/_spark/run") == {
        **committer,
        "fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
        "fs.file.impl.disable.cache": "true",
    }


def test_write_options_without_a_counterpart_stay_on_the_python_path() -> None:
    assert translate_write_options("parquet", {"compression": "lz4", "row_group_size": 5}) == (
        {},
        ["compression", "row_group_size"],
    )


# -- which path ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "options", "reason"),
    [
        ("{tmp}", {"format": "arrow"}, "format 'arrow' is not one Spark's writer writes"),
        ("{tmp}", {"write_path": "python"}, "write_path='python'"),
        ("{tmp}", {"target_file_size": 4096}, "does not roll files by size"),
        ("{tmp}", {"write_options": {"use_dictionary": False}}, "['use_dictionary']"),
        ("memory://x/out", {}, "memory:// is a filesystem Spark (Hadoop) does not reach"),
        ("s3://bucket/out", {"commit_by": "move"}, "every rename is a copy"),
        ("s3://bucket/out", {}, "every rename is a copy"),
    ],
)
def test_auto_chooses_python_tasks_and_says_why(
    tmp_path: Path, path: str, options: dict[str, Any], reason: str
) -> None:
    sink = FilesSink(path.format(tmp=tmp_path), **options)
    role, why = spark_write_of(sink)
    assert role is None
    assert reason in why


def test_auto_chooses_sparks_writer_on_a_local_disk(tmp_path: Path) -> None:
    sink = FilesSink(str(tmp_path), format="csv", write_options={"include_header": False})
    assert spark_write_of(sink) == (sink, "")
    assert not sink.spark_write_required()


def test_the_choice_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="twopc")
    assert choose_spark_write(FilesSink(str(tmp_path)), "a") is not None
    assert choose_spark_write(FilesSink(str(tmp_path), format="arrow"), "b") is None
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        f"twopc sink=a: phase 1 runs as one Spark write job per batch (files parquet at "
        f"{tmp_path}): no Python worker touches the rows",
        "twopc sink=b: phase 1 runs in Python tasks (mapInArrow): format 'arrow' is not one "
        "Spark's writer writes",
    ]


@pytest.mark.parametrize(
    ("path", "options", "message"),
    [
        ("memory://x/out", {"write_path": "spark"}, "memory://"),
        ("memory://x/out", {"format": "orc"}, "format 'orc' needs Spark's own writer"),
        ("{tmp}", {"format": "arrow", "write_path": "spark"}, "'arrow'"),
    ],
)
def test_insisting_on_sparks_writer_where_it_cannot_write_is_refused(
    tmp_path: Path, path: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        FilesSink(path.format(tmp=tmp_path), **options)


def test_spark_options_where_sparks_writer_cannot_write_are_refused() -> None:
    sink = FilesSink("s3://bucket/out", commit_by="move", spark_options={"x": "1"})
    with pytest.raises(ConfigurationError, match="spark_options are for Spark's writer"):
        spark_write_of(sink)


def test_orc_and_forced_spark_are_refused_by_python_tasks(tmp_path: Path) -> None:
    assert FilesSink(str(tmp_path), format="orc").spark_write_required()
    assert FilesSink(str(tmp_path), write_path="spark").spark_write_required()
    with pytest.raises(PermanentSinkError, match="Spark's own writer only"):
        FilesSink(str(tmp_path), format="orc").begin_transaction(run_ctx())


@pytest.mark.parametrize("streaming", [True, False])
@pytest.mark.parametrize("option", [("write_path", "spark"), ("format", "orc")])
def test_format_twopc_refuses_a_sink_that_insists_on_sparks_writer(
    tmp_path: Path, streaming: bool, option: tuple[str, str]
) -> None:
    try:
        from twopc._engines.datasource import _Setup
    except ImportError as exc:  # PySpark 4.0 (scripts/lowest-versions): no Arrow stream writers
        pytest.skip(f'format("twopc") needs PySpark 4.1 or newer: {exc}')

    options = {"sink": "files", "sink_id": "o", "path": str(tmp_path), option[0]: option[1]}
    with pytest.raises(ConfigurationError, match=re.escape('format("twopc") writes in Python')):
        _Setup.from_options(options, streaming=streaming)


# -- what the driver makes of the job's output --------------------------------------------


def test_sparks_output_becomes_one_committable_per_partition(tmp_path: Path) -> None:
    root = tmp_path / "out"
    sink = FilesSink(str(root), partition_by=["day"], batch_log=True)
    write = sink.plan_spark_write(run_ctx(), ["id", "day"])
    spark_output(job_dir(write))

    outputs = sink.spark_written(run_ctx(), write)

    assert [(o.committable.partition, o.committable.attempt, o.rows) for o in outputs] == [
        (0, RUN, 20),
        (1, RUN, 0),  # wrote nothing
        (2, RUN, 10),
    ]
    assert not job_dir(write).exists()  # _SUCCESS, checksums, the killed attempt's file
    assert read_ids(root) == []  # staged, hidden from readers
    recovered = sorted((c.partition, c.attempt) for c in sink.recover(SINK))
    assert recovered == [(0, RUN), (2, RUN)]  # durable: a fresh driver finds them

    sink.commit([o.committable for o in outputs])
    sink.batch_committed([o.committable for o in outputs])

    token = name_token(SINK, QUERY)
    names = [
        f"part-{token}-b{BATCH:08d}-p{p:05d}-{s:04d}.snappy.parquet"
        for p, s in ((0, 0), (0, 1), (2, 0))
    ]
    assert visible(root) == sorted(
        [f"day=a/{names[0]}", f"day=a/{names[1]}", f"day=b/{names[0]}", f"day=a/{names[2]}"]
    )
    assert read_ids(root) == list(range(30))
    logged = {entry["path"] for entry in SparkBatchLog(sink.fs, str(root)).read(0)}
    assert logged == {f"file://{root}/{name}" for name in visible(root)}
    assert sink.recover(SINK) == []
    assert (
        sink.commit([o.committable for o in outputs]) == [twopc.CommitOutcome.ALREADY_COMMITTED] * 3
    )


def test_a_job_with_no_output_gives_one_empty_committable(tmp_path: Path) -> None:
    sink = FilesSink(str(tmp_path / "out"))
    write = sink.plan_spark_write(run_ctx(), ["id"])
    job_dir(write).mkdir(parents=True)
    (job_dir(write) / "_SUCCESS").write_bytes(b"")

    [output] = sink.spark_written(run_ctx(), write)

    assert (output.committable.partition, output.rows, output.bytes) == (0, 0, 0)
    assert output.committable.payload["files"] == []
    assert sink.commit([output.committable]) == [twopc.CommitOutcome.ALREADY_COMMITTED]
    assert visible(tmp_path / "out") == []


def test_a_file_spark_did_not_name_is_refused(tmp_path: Path) -> None:
    sink = FilesSink(str(tmp_path / "out"))
    write = sink.plan_spark_write(run_ctx(), ["id"])
    spark_file(job_dir(write), "data.parquet", range(3))
    with pytest.raises(twopc.SinkError, match=r"data\.parquet"):
        sink.spark_written(run_ctx(), write)
    assert read_ids(tmp_path / "out") == []


def test_a_job_that_never_prepared_is_seen_and_swept(tmp_path: Path) -> None:
    """The driver died during the job (or the job failed): its directory holds Spark's
    files but no committable. ``twopc status`` shows it, the sweep removes it."""
    root = tmp_path / "out"
    sink = FilesSink(str(root), partition_by=["day"])
    write = sink.plan_spark_write(run_ctx(), ["id", "day"])
    spark_output(job_dir(write))

    [pending] = sink.inspect(SINK).pending
    assert (pending.kind, pending.batch_id, pending.attempt) == (WorkKind.UNPREPARED, BATCH, RUN)
    assert "Spark write job" in pending.detail
    assert sink.recover(SINK) == []
    assert sink.sweep(SINK) == 1
    assert not job_dir(write).exists()
    assert read_ids(root) == []


def test_a_crash_while_staging_leaves_what_recovery_resolves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver dies while recording the second of the two partitions with files (they
    are staged side by side, in either order): the first is prepared (recovery aborts it:
    no decision names it), the other's directory and what is left of the job's have no
    committable (the sweep removes them)."""
    root = tmp_path / "out"
    sink = FilesSink(str(root), partition_by=["day"])
    write = sink.plan_spark_write(run_ctx(), ["id", "day"])
    spark_output(job_dir(write))
    record = sink._record_prepared
    calls: list[str] = []

    def dies_on_the_second(staging: str, data: bytes) -> None:
        calls.append(staging)
        if len(calls) == 2:
            raise KeyboardInterrupt("the driver dies")
        record(staging, data)

    monkeypatch.setattr(sink, "_record_prepared", dies_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        sink.spark_written(run_ctx(), write)
    monkeypatch.undo()

    prepared = sink.recover(SINK)
    assert len(prepared) == 1 and prepared[0].partition in {0, 2}
    assert calls[0].endswith(f"/{prepared[0].partition:05d}-{prepared[0].attempt}")
    sink.abort_prepared(prepared)
    assert sink.sweep(SINK) == 2  # partition 2's staging, the job's directory
    assert [p for p in (root / "_twopc_staging").rglob("*") if p.is_file()] == []
    assert read_ids(root) == []


def test_parse_spark_file_names() -> None:
    uid = "8f79f198-89ab-4297-9282-2d1143dc93b0"
    parsed = parse_spark_file("/j/x", f"a=1/b=2/part-00011-{uid}-c003.zstd.orc", 7)
    assert parsed is not None
    assert (parsed.directory, parsed.split, parsed.counter, parsed.extension, parsed.size) == (
        "a=1/b=2",
        11,
        3,
        "zstd.orc",
        7,
    )
    assert parse_spark_file("/j/x", "_SUCCESS", 0) is None
    assert parse_spark_file("/j/x", "part-x.parquet", 0) is None
