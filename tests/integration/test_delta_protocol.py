"""Delta tables whose protocol (reader and writer features) the Delta sink cannot write
(issue 48, item 7): the batch fails with an error naming the table, the batch and the
feature, and nothing is committed: the table's version does not move and no data file or
attempt record is left. The protocols are written into ``_delta_log`` by hand, as a newer
writer would: a feature that neither deltalake nor the sink knows, as a writer feature
and as a reader feature, and a table whose protocol changes between phase 1 and the
commit. Deletion vectors (a feature Spark's Delta turns on with ``ALTER TABLE ... SET
TBLPROPERTIES ('delta.enableDeletionVectors' = true)``) only ask a writer not to rewrite a
file that has one: appends go through (``tests/e2e/delta_spark_reader.py`` has Spark's
Delta turn them on and delete a row)."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from tests.harness.delta import (
    duckdb_parquet_ids,
    ids,
    load,
    records_left,
    unreferenced_data_files,
)
from twopc import TaskContext, local

pytest.importorskip("deltalake")

from deltalake import write_deltalake

from twopc_delta import DeltaSink

pytestmark = pytest.mark.integration


def rows(start: int, stop: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, stop), pa.int64()), "v": ["a"] * (stop - start)})


def run(sink: DeltaSink, tmp_path: Path, batches: list[list[pa.Table]], name: str = "q") -> None:
    stream = local.LocalStream(str(tmp_path / f"checkpoint-{name}"), batches)
    writer = local.foreach_batch(
        sink, "ev", commit_log=str(tmp_path / f"log-{name}"), processes=False
    )
    stream.run(writer)


def table_of_five(tmp_path: Path) -> Path:
    uri = tmp_path / "t"
    write_deltalake(str(uri), rows(0, 5))
    return uri


def commit_by_hand(uri: Path, *actions: dict[str, Any]) -> int:
    """A new version of the table holding ``actions``, as another writer would commit it."""
    version = load(uri).version() + 1
    info = {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "SET TBLPROPERTIES"}}
    lines = [json.dumps(a) for a in (info, *actions)]
    (uri / "_delta_log" / f"{version:020d}.json").write_text("\n".join(lines) + "\n")
    return version


def protocol(reader: list[str] | None, writer: list[str]) -> dict[str, Any]:
    action: dict[str, Any] = {"minReaderVersion": 3 if reader else 1, "minWriterVersion": 7}
    if reader:
        action["readerFeatures"] = reader
    action["writerFeatures"] = writer
    return {"protocol": action}


def log_version(uri: Path) -> int:
    """The table's newest version, from its log's file names (deltalake refuses to load a
    table with a reader feature it lacks)."""
    return max(int(p.stem) for p in (uri / "_delta_log").glob("*.json"))


def assert_nothing_committed(uri: Path, version: int, *, readable: bool = True) -> None:
    assert log_version(uri) == version
    if readable:
        assert ids(uri) == Counter(range(5))
    assert unreferenced_data_files(uri) == [] and records_left(uri) == []


def test_an_unknown_writer_feature_fails_the_batch_before_any_file_is_written(
    tmp_path: Path,
) -> None:
    uri = table_of_five(tmp_path)
    version = commit_by_hand(uri, protocol(None, ["appendOnly", "futureWriterFeature"]))
    with pytest.raises(twopc.BatchFailedError) as failed:
        run(DeltaSink(str(uri)), tmp_path, [[rows(5, 10)]])
    text = str(failed.value)
    assert f"Delta table {uri} uses what the twopc delta sink cannot write" in text
    assert "writer feature(s) futureWriterFeature" in text and "batch 0" in text
    assert_nothing_committed(uri, version)


def test_an_unknown_reader_feature_fails_the_batch_before_any_file_is_written(
    tmp_path: Path,
) -> None:
    uri = tmp_path / "t"
    write_deltalake(str(uri), rows(0, 5))
    version = commit_by_hand(
        uri, protocol(["futureReaderFeature"], ["appendOnly", "futureReaderFeature"])
    )
    # deltalake refuses to load the table: before phase 1, when the driver reads the app
    # transaction, a permanent error (no retry can help)
    with pytest.raises(twopc.PermanentSinkError) as failed:
        run(DeltaSink(str(uri)), tmp_path, [[rows(5, 10)]])
    text = str(failed.value)
    assert str(uri) in text and "futureReaderFeature" in text and "batch 0" in text
    assert "a feature deltalake does not support" in text
    assert_nothing_committed(uri, version, readable=False)


def test_a_protocol_raised_between_phase_1_and_the_commit_refuses_the_commit(
    tmp_path: Path,
) -> None:
    uri = table_of_five(tmp_path)
    sink = DeltaSink(str(uri))
    txn = sink.begin_transaction(TaskContext("ev", "q1", 4, 0, 0))
    sink.invoke(txn, rows(5, 10).to_batches()[0])
    committable = sink.pre_commit(txn)  # the files are written and prepared
    version = commit_by_hand(uri, protocol(None, ["appendOnly", "futureWriterFeature"]))
    with pytest.raises(twopc.PermanentSinkError) as refused:
        sink.commit([committable])
    text = str(refused.value)
    assert str(uri) in text and "writer feature(s) futureWriterFeature" in text
    assert load(uri).version() == version and ids(uri) == Counter(range(5))
    sink.abort_prepared([committable])  # what recovery does with it once told to give up
    assert_nothing_committed(uri, version)


def test_a_table_with_deletion_vectors_takes_appends(
    tmp_path: Path,
) -> None:
    uri = table_of_five(tmp_path)
    dv = protocol(["deletionVectors"], ["appendOnly", "invariants", "deletionVectors"])
    version = commit_by_hand(uri, dv)
    run(DeltaSink(str(uri)), tmp_path, [[rows(5, 10)]], name="a")
    assert log_version(uri) == version + 1
    # deltalake 1.6.6 writes such a table but does not read it ("reader features
    # {'deletionVectors'} ... not yet supported"): read the files the log references
    assert duckdb_parquet_ids(uri) == Counter(range(10))
    assert unreferenced_data_files(uri) == [] and records_left(uri) == []
