"""``twopc.table_formats``, what the Delta and Iceberg backends share: the records of task
attempts on a local filesystem, committing batch by batch, and the upsert key checks."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest
from fsspec.implementations.local import LocalFileSystem

from twopc import CommitOutcome, Committable, PermanentSinkError, TaskContext, WorkKind
from twopc.table_formats import (
    AttemptId,
    AttemptRecords,
    GaveWay,
    RecordEntry,
    check_keys,
    commit_by_batch,
    key_mask,
    parse_record_name,
)
from twopc.testing._memory import MemoryPayload

pytestmark = pytest.mark.unit


def records(tmp_path: Path, **options: bool) -> AttemptRecords:
    return AttemptRecords(LocalFileSystem(), f"{tmp_path}/_twopc", "s", "delta", **options)


def committable(batch: int, partition: int, attempt: int = 0, key: str = "k") -> Committable:
    ctx = TaskContext("s", "q", batch, partition, attempt)
    return Committable.for_task(ctx, MemoryPayload(key, 1))


def test_an_attempt_is_started_then_prepared_then_forgotten(tmp_path: Path) -> None:
    kept = records(tmp_path)
    done = committable(3, 1)
    attempt = AttemptId.of(done)
    kept.mark_started(attempt)
    assert [e.name for e in kept.listing()] == ["1-0.started"]
    kept.mark_prepared(attempt, done)
    (entry,) = kept.listing()
    assert (entry.path, entry.prepared, entry.attempt) == (
        f"{tmp_path}/_twopc/s/q/3/1-0.json",
        True,
        attempt,
    )
    assert kept.prepared() == [done]
    kept.mark_prepared(attempt, done)  # the same committable again: nothing to give way to
    with pytest.raises(GaveWay):
        kept.mark_prepared(attempt, committable(3, 1, key="other"))
    kept.forget_committed([done])
    assert kept.listing() == []


class CountingFileSystem(LocalFileSystem):
    """A local filesystem that counts ``makedirs`` calls (a local ``create_exclusive``
    makes the directory itself, so a missing one cannot show whether prepare made it)."""

    cachable = False  # a new instance (and count) each time

    def __init__(self) -> None:
        super().__init__()
        self.made: list[str] = []

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        self.made.append(path)
        super().makedirs(path, exist_ok=exist_ok)


def test_prepare_makes_the_directory_unless_told_not_to(tmp_path: Path) -> None:
    done = committable(0, 0)
    for makes_dir, made in ((True, [f"{tmp_path}/_twopc/s/q/0"]), (False, [])):
        fs = CountingFileSystem()
        kept = AttemptRecords(fs, f"{tmp_path}/_twopc", "s", "delta", prepare_makes_dir=makes_dir)
        kept.mark_prepared(AttemptId.of(done), done)
        assert fs.made == made
        assert kept.prepared() == [done]
        fs.rm(f"{tmp_path}/_twopc", recursive=True)


def test_sweep_hands_over_unprepared_attempts_and_rewrites(tmp_path: Path) -> None:
    kept = records(tmp_path)
    prepared, unprepared, spared = committable(1, 0), committable(1, 1), committable(2, 0)
    for c in (prepared, unprepared, spared):
        kept.mark_started(AttemptId.of(c))
    kept.mark_prepared(AttemptId.of(prepared), prepared)
    kept.mark_rewrite("q", 1, "ab", partition=4)
    kept.mark_rewrite("q", 2, "cd")
    removed: list[AttemptId] = []
    rewrites: list[RecordEntry] = []
    assert kept.sweep([spared], removed.append, rewrites.append) == 3
    assert removed == [AttemptId.of(unprepared)]
    assert [(e.rewrite_id, kept.rewrite_partition(e)) for e in rewrites] == [("ab", 4), ("cd", 0)]
    pending = kept.pending()
    assert [(p.kind, p.batch_id, p.partition) for p in pending] == [
        (WorkKind.PREPARED, 1, 0),
        (WorkKind.UNPREPARED, 1, 1),
        (WorkKind.UNPREPARED, 1, None),
        (WorkKind.UNPREPARED, 2, 0),
        (WorkKind.UNPREPARED, 2, None),
    ]
    kept.forget_rewrite("q", 1, "ab")
    assert [e.rewrite_id for e in kept.listing() if e.rewrite_id] == ["cd"]


def test_an_unreadable_record_is_logged_and_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kept = records(tmp_path)
    path = kept.path(AttemptId("q", 0, 0, 0), ".json")
    Path(path).parent.mkdir(parents=True)
    Path(path).write_bytes(b"\xff")
    with caplog.at_level(logging.WARNING, logger="twopc.delta"):
        assert kept.prepared() == []
    assert "twopc delta: ignoring unreadable record" in caplog.text


def test_record_names() -> None:
    assert parse_record_name("2-7.started") == (2, 7, ".started")
    assert parse_record_name("rewrite-ab.started") is None
    assert parse_record_name("2-x.json") is None


def test_batches_commit_oldest_first_and_outcomes_keep_their_order() -> None:
    seen: list[tuple[int, list[int]]] = []

    def commit_batch(units: Sequence[Committable]) -> list[CommitOutcome]:
        seen.append((units[0].batch_id, [c.partition for c in units]))
        done = (
            CommitOutcome.COMMITTED if units[0].batch_id == 1 else CommitOutcome.ALREADY_COMMITTED
        )
        return [done] * len(units)

    given = [committable(2, 0), committable(1, 0), committable(2, 1), committable(1, 1)]
    outcomes = commit_by_batch(given, commit_batch)
    assert seen == [(1, [0, 1]), (2, [0, 1])]
    assert outcomes == [
        CommitOutcome.ALREADY_COMMITTED,
        CommitOutcome.COMMITTED,
        CommitOutcome.ALREADY_COMMITTED,
        CommitOutcome.COMMITTED,
    ]


def test_keys_must_be_columns_and_set() -> None:
    rows = pa.record_batch({"id": pa.array([1, None, 3]), "v": pa.array(["a", "b", "c"])})
    check_keys(["v"], rows, 0, "table db.t")
    with pytest.raises(PermanentSinkError, match=r"'k' is not a column of table db\.t"):
        check_keys(["k"], rows, 0, "table db.t")
    with pytest.raises(PermanentSinkError, match="null in row 11 of this task"):
        check_keys(["id"], rows, 10, "table db.t")


@pytest.mark.parametrize("row_column", ["__twopc_row", "__row"])
def test_key_mask_finds_the_rows_of_the_keys(row_column: str) -> None:
    table = pa.table({"a": [1, 1, 2, 2], "b": ["x", "y", "x", "y"], "v": [0, 1, 2, 3]})
    keys = pa.table({"a": [1, 2], "b": ["y", "x"]})
    assert key_mask(table, keys, row_column=row_column).to_pylist() == [False, True, True, False]
    assert key_mask(table, keys.select(["a"])).to_pylist() == [True, True, True, True]
