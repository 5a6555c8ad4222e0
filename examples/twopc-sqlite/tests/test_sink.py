"""The sqlite sink's own tests: what the conformance kit does not cover."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pyarrow as pa
import pytest
import twopc
from twopc import CommitOutcome, ConfigurationError, PermanentSinkError, TaskContext

from twopc_sqlite.sink import SqliteSink
from twopc_sqlite.testing import read_ids


def _batch(ids: list[int]) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "payload": [f"p{i}" for i in ids]})


def test_the_entry_point_registers_the_backend() -> None:
    names = {b.name: b for b in twopc.list_backends()}
    assert "sqlite" in names, names
    assert names["sqlite"].usable, names["sqlite"]
    assert names["sqlite"].distribution == "twopc-sqlite"


def test_create_sink_by_name(tmp_path: Path) -> None:
    sink = twopc.create_sink("sqlite", path=str(tmp_path / "db"), table="events")
    assert isinstance(sink, SqliteSink)
    assert sink.table == "events"


@pytest.mark.parametrize("table", ["", "a b", 'x"; DROP TABLE rows; --', "twopc_markers"])
def test_table_must_be_a_plain_identifier(tmp_path: Path, table: str) -> None:
    with pytest.raises(ConfigurationError, match="plain identifier"):
        SqliteSink(str(tmp_path / "db"), table=table)


def test_staged_rows_wait_in_the_staging_table(tmp_path: Path) -> None:
    path = str(tmp_path / "db")
    sink = SqliteSink(path)
    txn = sink.begin_transaction(TaskContext("s", "q", 0, 0))
    sink.invoke(txn, _batch([1, 2, 3]))
    committable = sink.pre_commit(txn)
    with closing(sqlite3.connect(path)) as connection:
        staged = connection.execute("SELECT count(*) FROM twopc_staging").fetchone()[0]
    assert staged == 3
    assert read_ids(path) == []
    assert sink.commit([committable]) == [CommitOutcome.COMMITTED]
    assert sink.commit([committable]) == [CommitOutcome.ALREADY_COMMITTED]
    with closing(sqlite3.connect(path)) as connection:
        staged = connection.execute("SELECT count(*) FROM twopc_staging").fetchone()[0]
        markers = connection.execute("SELECT count(*) FROM twopc_markers").fetchone()[0]
        mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
    assert (staged, markers, mode) == (0, 1, "wal")
    assert sorted(read_ids(path)) == [1, 2, 3]


def test_missing_id_column_is_a_permanent_error(tmp_path: Path) -> None:
    sink = SqliteSink(str(tmp_path / "db"))
    txn = sink.begin_transaction(TaskContext("s", "q", 4, 2))
    with pytest.raises(PermanentSinkError, match=r"no id column"):
        sink.invoke(txn, pa.record_batch({"payload": ["x"]}))


def test_a_newer_payload_version_is_refused(tmp_path: Path) -> None:
    sink = SqliteSink(str(tmp_path / "db"))
    committable = sink.pre_commit(sink.begin_transaction(TaskContext("s", "q", 0, 0)))
    newer = twopc.Committable.from_json({**committable.to_json(), "version": 99})
    with pytest.raises(twopc.UnsupportedFormatError, match="SqlitePayload version 99"):
        sink.commit([newer])


def test_the_task_payload_reads_version_1() -> None:
    from twopc_sqlite.task_sink import SqliteTaskPayload

    old = twopc.Committable("s", "q", 0, 0, 0, payload={"rows": 0, "skipped": True}, version=1)
    assert SqliteTaskPayload.of(old) == SqliteTaskPayload(0)
