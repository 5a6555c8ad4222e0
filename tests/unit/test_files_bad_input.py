"""Bad input to the files sink on a local disk: refused with a message that names the sink,
the option, column or row, and what to do; nothing of a refused batch becomes visible.

* option values the signature cannot rule out (ranges, element types, contradictions),
  also when the sink is built directly;
* a path whose fsspec filesystem package is missing (the package's import made to fail in
  a child Python, as on a machine without it);
* NaN and infinities in ``format="json"`` (refused, or ``null`` with ``json_non_finite``);
* batches whose columns readers could not merge: partitions of one batch that disagree,
  and a batch that disagrees with what the output already holds (on the Python path and
  on Spark's, whose files are laid out here as Spark's writer leaves them).

What readers make of the output is read back with ``pyarrow`` (and, for schemas, with Spark
in ``tests/integration/test_files_bad_input.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import twopc
from twopc import CommitLog, ConfigurationError, TaskContext
from twopc._coordination.coordinator import Coordinator
from twopc.local import LocalEngine
from twopc_files import FilesSink

pytestmark = pytest.mark.unit

SINK, QUERY = "orders", "q-1"


def _visible(out: Path) -> list[str]:
    """Files a reader lists: no path component starts with ``_`` or ``.``."""
    if not out.exists():
        return []
    return sorted(
        str(p.relative_to(out))
        for p in out.rglob("*")
        if p.is_file() and not any(part.startswith(("_", ".")) for part in p.relative_to(out).parts)
    )


def _run(sink: FilesSink, log: Path, batch: int, *partitions: pa.Table) -> Any:
    coordinator = Coordinator(sink, SINK, CommitLog(str(log)))
    return coordinator.run_batch(QUERY, batch, LocalEngine(list(partitions), processes=False))


def _refused(sink: FilesSink, log: Path, batch: int, *partitions: pa.Table) -> str:
    with pytest.raises(twopc.BatchFailedError) as failed:
        _run(sink, log, batch, *partitions)
    return str(failed.value)


# -- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"target_file_size": "big"},
            "files sink: target_file_size must be a whole number of bytes, at least 1024, "
            "not 'big'",
        ),
        (
            {"target_file_size": 512},
            "files sink: target_file_size must be a whole number of bytes, at least 1024, not 512",
        ),
        (
            {"target_file_size": True},
            "files sink: target_file_size must be a whole number of bytes, at least 1024, not True",
        ),
        (
            {"partition_by": ["day", "day"]},
            "files sink: partition_by names ['day'] more than once",
        ),
        (
            {"partition_by": 5},
            "files sink: partition_by must be a list of column names, not 5",
        ),
        (
            {"storage_options": "key=abc"},
            "files sink: storage_options must be a dict with string keys, not str",
        ),
        (
            {"write_options": {1: "zstd"}},
            "files sink: write_options must be a dict with string keys, not dict",
        ),
        ({"batch_log": "yes"}, "files sink: batch_log must be True or False, not 'yes'"),
        ({"check_schemas": 0}, "files sink: check_schemas must be True or False, not 0"),
        (
            {"commit_by": ["move"]},
            "files sink: unknown commit_by ['move']; use one of auto, move, complete_upload",
        ),
        (
            {"json_non_finite": "zero", "format": "json"},
            "files sink: unknown json_non_finite 'zero'; use one of error, null",
        ),
        (
            {"json_non_finite": "null"},
            "files sink: json_non_finite='null' applies to format='json' only, not 'parquet'",
        ),
        (
            {"format": "json", "write_options": {"compression": "gzip"}},
            "files sink: write_options do nothing with format='json' (twopc's JSON lines "
            "writer and Spark's take none); remove them",
        ),
        (
            {"write_options": {"compresion": "zstd"}},
            "files sink: write_options ['compresion']: the parquet writer refuses them "
            "(TypeError: __cinit__() got an unexpected keyword argument 'compresion')",
        ),
        (
            {"write_options": {"compression": "zip"}},
            "files sink: write_options ['compression']: the parquet writer refuses them "
            "(ArrowException: Unsupported compression: zip)",
        ),
        (
            {"format": "csv", "write_options": {"delim": ";"}},
            "files sink: write_options ['delim']: the csv writer refuses them (TypeError: "
            "__init__() got an unexpected keyword argument 'delim')",
        ),
        (
            {"commit_by": "complete_upload"},
            "files sink: commit_by='complete_upload' completes S3 multipart uploads: it needs "
            "an s3:// path (s3fs), not file://",
        ),
        (
            {"json_non_finite": "null", "format": "json", "write_path": "spark"},
            "files sink: write_path='spark' needs Spark's own writer, which cannot write this "
            "output: json_non_finite='null': Spark's writer writes NaN and infinities as the "
            'strings "NaN", "Infinity" and "-Infinity"',
        ),
    ],
)
def test_bad_option_values_name_the_option(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        FilesSink(str(tmp_path / "out"), **options)
    assert str(refused.value) == message


def test_range_and_contradictions_are_checked_through_create_sink_too(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="target_file_size must be a whole number"):
        twopc.create_sink("files", path=str(tmp_path), target_file_size=100)
    with pytest.raises(ConfigurationError, match="applies to format='json' only"):
        twopc.create_sink("files", path=str(tmp_path), format="csv", json_non_finite="null")


def test_storage_options_are_never_shown_in_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as refused:
        FilesSink(str(tmp_path), storage_options=[("secret", "S3CRET-KEY")])  # type: ignore[arg-type]
    assert "S3CRET" not in str(refused.value)


def test_json_non_finite_null_keeps_auto_on_the_python_path(tmp_path: Path) -> None:
    sink = FilesSink(str(tmp_path / "out"), format="json", json_non_finite="null")
    assert "json_non_finite='null'" in str(sink.spark_write_refusal())
    assert FilesSink(str(tmp_path / "out"), format="json").spark_write_refusal() is None


# -- a filesystem package that is missing ----------------------------------------------------


def _create_without(package: str, path: str) -> subprocess.CompletedProcess[str]:
    """Create a files sink in a child Python in which ``import <package>`` fails."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules[{package!r}] = None  # as if the package were not installed
        import twopc
        try:
            twopc.create_sink("files", path={path!r})
        except twopc.ExtraNotInstalledError as exc:
            print(type(exc).__name__, exc, sep="|")
        """
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )


@pytest.mark.parametrize(
    ("package", "path", "message"),
    [
        (
            "s3fs",
            "s3://lake/orders",
            "files sink: s3:// paths need s3fs, fsspec's filesystem for s3://, which is not "
            'installed: pip install "twopc[s3]"',
        ),
        (
            "s3fs",
            "simplecache::s3://lake/orders",
            "files sink: s3:// paths need s3fs, fsspec's filesystem for s3://, which is not "
            'installed: pip install "twopc[s3]"',
        ),
        (
            "gcsfs",
            "gs://lake/orders",
            "files sink: gs:// paths need gcsfs, fsspec's filesystem for gs://, which is not "
            "installed: pip install gcsfs",
        ),
    ],
    ids=["s3", "chained-s3", "gcs"],
)
def test_a_missing_filesystem_package_fails_when_the_sink_is_created(
    package: str, path: str, message: str
) -> None:
    done = _create_without(package, path)
    assert done.stdout.strip() == f"ExtraNotInstalledError|{message}", done.stderr


def test_an_unknown_protocol_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as refused:
        FilesSink("s4://lake/orders")
    assert str(refused.value) == (
        "files sink: path: fsspec knows no filesystem for s4:// (a typo in the path's scheme, "
        "or a filesystem package that registers it is not installed)"
    )


# -- NaN and infinity in JSON lines ----------------------------------------------------------


def _readings() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([0, 1, 2], pa.int64()),
            "day": ["a", "b", "a"],
            "reading": pa.array([1.5, float("nan"), 2.5]),
            "limits": pa.array([[0.0], [1.0], [float("-inf")]]),
        }
    )


def test_nan_in_json_fails_the_batch_and_nothing_is_visible(tmp_path: Path) -> None:
    sink = FilesSink(str(tmp_path / "out"), format="json", partition_by=["day"])
    good = pa.table(
        {"id": [7, 8], "day": ["a", "b"], "reading": [0.5, 0.5], "limits": [[0.5], [0.5]]}
    )
    message = _refused(sink, tmp_path / "log", 0, good, pa.concat_tables([good, _readings()]))
    # partition 1's rows: the two good ones, then the readings (row 2 + 1 holds the NaN)
    assert message.startswith(
        "sink 'orders', batch 0, partition 1: format='json': column 'reading' of row 3 holds "
        "NaN, which JSON cannot represent (strict JSON readers refuse it); clean or filter "
        "the data, or pass json_non_finite='null' to write null instead"
    )
    assert _visible(tmp_path / "out") == []


def test_json_non_finite_null_writes_null(tmp_path: Path) -> None:
    sink = FilesSink(str(tmp_path / "out"), format="json", json_non_finite="null")
    assert _run(sink, tmp_path / "log", 0, _readings()).status == "committed"

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    [name] = _visible(tmp_path / "out")
    lines = (tmp_path / "out" / name).read_text().splitlines()
    assert [json.loads(line, parse_constant=refuse) for line in lines] == [
        {"id": 0, "day": "a", "reading": 1.5, "limits": [0.0]},
        {"id": 1, "day": "b", "reading": None, "limits": [1.0]},
        {"id": 2, "day": "a", "reading": 2.5, "limits": [None]},
    ]
    table = ds.dataset(str(tmp_path / "out"), format="json").to_table()
    assert table.column("reading").to_pylist() == [1.5, None, 2.5]


# -- schemas readers can merge ---------------------------------------------------------------


def _orders(ids: range, **extra: pa.Array) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), **extra})


def _read_unified(out: Path) -> pa.Table:
    files = ds.dataset(str(out), format="parquet").files
    schema = pa.unify_schemas([pq.read_schema(f) for f in files])
    return ds.dataset(str(out), format="parquet", schema=schema).to_table().sort_by("id")


def test_partitions_of_a_batch_whose_columns_disagree_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = FilesSink(str(out))
    message = _refused(
        sink,
        tmp_path / "log",
        0,
        _orders(range(2), note=pa.array(["a", "b"])),
        _orders(range(2, 4), note=pa.array([1, 2])),
    )
    assert message.startswith(
        "sink 'orders', batch 0, partition 1: column 'note' is int64 in this partition but "
        "string in partition 0 of the same batch; readers cannot merge the two types: give "
        "every partition the same column types (cast in the query)"
    )
    assert _visible(out) == []
    assert not (out / "_twopc_schema").exists()

    # columns that merge: one partition lacks a column, another has it all null
    merged = [
        _orders(range(2), note=pa.array(["a", "b"])),
        _orders(range(2, 4)),
        _orders(range(4, 6), note=pa.array([None, None])),
    ]
    assert _run(sink, tmp_path / "rerun-log", 0, *merged).status == "committed"
    notes = _read_unified(out).column("note").to_pylist()
    assert notes == ["a", "b", None, None, None, None]


def test_a_batch_that_changes_a_columns_type_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = FilesSink(str(out), partition_by=["day"])
    first = _orders(range(2), day=pa.array(["x", "y"]), extra=pa.array([30, 40], pa.int64()))
    assert _run(sink, tmp_path / "log", 0, first).status == "committed"
    before = _visible(out)

    changed = _orders(range(2, 4), day=pa.array(["x", "y"]), extra=pa.array(["c", "d"]))
    message = _refused(FilesSink(str(out), partition_by=["day"]), tmp_path / "log", 1, changed)
    assert message.startswith(
        "sink 'orders', batch 1, partition 0: column 'extra' is string in this batch but "
        "int64 in what the output already holds (_twopc_schema); readers (pyarrow.dataset, "
        "Spark's mergeSchema) cannot merge the two types: cast the column to int64 in the "
        "query, write to a new path, or pass check_schemas=False if every reader converts it"
    )
    assert _visible(out) == before

    widened = _orders(range(2, 4), day=pa.array(["x", "y"]), extra=pa.array([5, 6], pa.int32()))
    assert "is int32 in this batch but int64" in _refused(sink, tmp_path / "log", 1, widened)

    # an added column (and a partition column of another type) merge: committed
    added = _orders(range(2, 4), day=pa.array([1, 2]), more=pa.array([True, False]))
    assert _run(sink, tmp_path / "log", 1, added).status == "committed"
    table = _read_unified(out)
    assert table.column("id").to_pylist() == [0, 1, 2, 3]
    assert table.column("extra").to_pylist() == [30, 40, None, None]
    assert table.column("more").to_pylist() == [None, None, True, False]
    record = pa.ipc.read_schema(pa.py_buffer((out / "_twopc_schema").read_bytes()))
    assert record.names == ["id", "extra", "more"]


def test_check_schemas_false_writes_a_changed_type_anyway(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _orders(range(2), extra=pa.array([30, 40], pa.int64()))
    assert _run(FilesSink(str(out)), tmp_path / "log", 0, first).status == "committed"
    changed = _orders(range(2, 4), extra=pa.array(["c", "d"]))
    unchecked = FilesSink(str(out), check_schemas=False)
    assert _run(unchecked, tmp_path / "log", 1, changed).status == "committed"
    schemas = [pq.read_schema(f) for f in ds.dataset(str(out), format="parquet").files]
    with pytest.raises(pa.ArrowTypeError, match="incompatible types: int64 vs string"):
        pa.unify_schemas(schemas)


def test_the_schema_record_is_widened_before_the_files_become_visible(tmp_path: Path) -> None:
    """A crash after the decision: the restart's commit widens the record first."""
    out = tmp_path / "out"
    log = tmp_path / "log"
    sink = FilesSink(str(out))
    stopped = Coordinator(
        sink,
        SINK,
        CommitLog(str(log)),
        faults=twopc.FaultPlan.parse("after_decision:raise@batch=0"),
    )
    with pytest.raises(twopc.TwoPCError):
        stopped.run_batch(QUERY, 0, LocalEngine([_orders(range(3))], processes=False))
    assert _visible(out) == [] and not (out / "_twopc_schema").exists()

    restarted = Coordinator(FilesSink(str(out)), SINK, CommitLog(str(log)))
    restarted.recover()
    assert len(_visible(out)) == 1
    record = pa.ipc.read_schema(pa.py_buffer((out / "_twopc_schema").read_bytes()))
    assert record == pa.schema([("id", pa.int64())])
    staging = out / "_twopc_staging"
    assert not staging.exists() or [p for p in staging.rglob("*") if p.is_file()] == []


def test_a_damaged_schema_record_never_blocks_a_decided_commit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out, log = tmp_path / "out", tmp_path / "log"
    stopped = Coordinator(
        FilesSink(str(out)),
        SINK,
        CommitLog(str(log)),
        faults=twopc.FaultPlan.parse("after_decision:raise@batch=0"),
    )
    with pytest.raises(twopc.TwoPCError):
        stopped.run_batch(QUERY, 0, LocalEngine([_orders(range(3))], processes=False))
    out.mkdir(exist_ok=True)
    (out / "_twopc_schema").write_bytes(b"not a schema")

    Coordinator(FilesSink(str(out)), SINK, CommitLog(str(log))).recover()
    assert len(_visible(out)) == 1
    assert "the output's schema record _twopc_schema is left as it is" in caplog.text

    message = _refused(FilesSink(str(out)), log, 1, _orders(range(3, 5)))
    assert message.startswith(
        "sink 'orders', batch 1, partition 0: the output's schema record _twopc_schema "
        "cannot be read ("
    )
    assert "delete it (the next commit writes it again, from its batch)" in message
    assert len(_visible(out)) == 1


def _spark_job(sink: FilesSink, batch: int, table: pa.Table) -> tuple[TaskContext, Any]:
    """A batch's Spark write job, planned, and its output laid out as Spark's writer
    leaves it."""
    context = TaskContext(SINK, QUERY, batch, 0, 7, run_id="run-1")
    write = sink.plan_spark_write(context, table.column_names)
    job = Path(write.path.removeprefix("file://"))
    job.mkdir(parents=True)
    pq.write_table(table, job / f"part-00000-{uuid.uuid4()}-c000.snappy.parquet")
    (job / "_SUCCESS").write_bytes(b"")
    return context, write


def test_the_spark_path_checks_the_jobs_files_against_what_the_output_holds(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    sink = FilesSink(str(out), write_path="spark")
    context, write = _spark_job(sink, 0, _orders(range(3), extra=pa.array([1, 2, 3])))
    [output] = sink.spark_written(context, write)
    assert output.committable.payload["schema"]
    sink.commit([output.committable])
    assert _read_unified(out).num_rows == 3

    context, write = _spark_job(sink, 1, _orders(range(3, 5), extra=pa.array(["x", "y"])))
    with pytest.raises(twopc.PermanentSinkError) as refused:
        sink.spark_written(context, write)
    assert str(refused.value).startswith(
        "column 'extra' is string in this batch but int64 in what the output already holds"
    )
    assert sink.recover(SINK) == []  # nothing of the refused job was prepared
    assert _read_unified(out).num_rows == 3
