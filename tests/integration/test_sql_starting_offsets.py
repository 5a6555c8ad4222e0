"""The SQL sinks keep each batch's source offsets in their marker rows, on real PostgreSQL
and MariaDB, in both transaction modes; ``twopc.starting_offsets`` reads them back.

Runs on the local engine with a stream whose offsets look like a Kafka source's
(``LocalStream(kafka_topic=...)``); every assertion reads the server: the table's rows,
the marker rows' columns, the catalog's columns.

- The start after the newest whole batch; a query on a new checkpoint from there writes
  every id once.
- A batch committed in one partition only (``transaction`` mode, a task failing before its
  commit) is refused, naming the partitions; its replay on the old checkpoint makes it
  whole. In ``two_phase`` mode a killed batch's prepared branches are refused until
  recovery settles them; a batch cut off between its partitions' commits is finished by a
  recovery that has lost its commit log (the marker rows prove the decision).
- Partition 0's marker row holds the offsets, every row the partition count.
- A marker table of an earlier version gains the offset columns on first use, its rows
  kept.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
from tests.harness.exactly_once import assert_exactly_once
from tests.harness.offset_streams import TOPIC, batches, run_stream
from tests.harness.sql_sink_cases import MODES, OFFSETLESS_MARKER_DDL, Env

pytestmark = pytest.mark.integration


def _batches(count: int) -> list[list[pa.Table]]:
    return batches(count)


def _run(
    sink: twopc.Sink,
    sink_id: str,
    checkpoint: Path,
    data: list[list[pa.Table]],
    *,
    faults: str | None = None,
    start: dict[str, int] | None = None,
) -> None:
    log = str(checkpoint) + "-log"
    run_stream(sink, sink_id, checkpoint, data, faults=faults, start=start, commit_log=log)


def _ids(env: Env, table: str) -> Counter[int]:
    return Counter(int(r[0]) for r in env.db.query(f"SELECT id FROM {env.db.q(table)}"))


@pytest.mark.parametrize("mode", MODES)
def test_a_new_checkpoint_from_the_stored_offsets_writes_every_id_once(
    env: Env, tmp_path: Path, mode: str
) -> None:
    table, sink_id = env.table(), env.sink_id()
    sink = env.sink(table, create_table=True, transaction_mode=mode)
    everything = _batches(5)
    _run(sink, sink_id, tmp_path / "first", everything[:3])
    rows = env.db.query(
        f"SELECT partition_id, partitions, source_offsets FROM {env.db.q(env.marker_table)} "
        "WHERE sink_id = %s AND batch_id = 2 ORDER BY partition_id",
        (sink_id,),
    )
    assert [(int(p), int(n)) for p, n, _ in rows] == [(0, 2), (1, 2)]
    assert json.loads(rows[0][2]) == {"batch_id": 2, "topics": {TOPIC: {"0": 9, "1": 9}}}
    assert rows[1][2] is None  # the offsets once per batch, in partition 0's row

    start = json.loads(twopc.starting_offsets(sink, sink_id, topics=[TOPIC]))
    assert start == {TOPIC: {"0": 9, "1": 9}}
    _run(sink, sink_id, tmp_path / "new", everything[3:], start=start[TOPIC])
    assert_exactly_once(_ids(env, table), set(range(30)))
    assert json.loads(twopc.starting_offsets(sink, sink_id)) == {TOPIC: {"0": 15, "1": 15}}


def test_a_batch_committed_in_one_partition_is_refused_until_its_replay(
    env: Env, tmp_path: Path
) -> None:
    table, sink_id = env.table(), env.sink_id()
    sink = env.sink(table, create_table=True, transaction_mode="transaction")
    batches = _batches(3)
    with pytest.raises(twopc.TwoPCError):
        _run(
            sink,
            sink_id,
            tmp_path / "ck",
            batches,
            faults="before_task_commit:raise@batch=2,partition=1",
        )
    with pytest.raises(twopc.UnsafeStartError, match=r"partitions 0 but not in 1 \(of 2\)"):
        twopc.starting_offsets(sink, sink_id)
    _run(sink, sink_id, tmp_path / "ck", batches)  # the old checkpoint's replay
    assert json.loads(twopc.starting_offsets(sink, sink_id)) == {TOPIC: {"0": 9, "1": 9}}
    assert_exactly_once(_ids(env, table), set(range(18)))


def test_prepared_branches_are_refused_until_recovery(env: Env, tmp_path: Path) -> None:
    table, sink_id = env.table(), env.sink_id()
    sink = env.sink(table, create_table=True, transaction_mode="two_phase")
    with pytest.raises(twopc.TwoPCError):
        _run(sink, sink_id, tmp_path / "ck", _batches(3), faults="after_decision:raise@batch=2")
    assert env.prepared(sink_id), "the decided batch's branches wait"
    with pytest.raises(twopc.UnsafeStartError, match=r"batch 2 of query .*twopc recover"):
        twopc.starting_offsets(sink, sink_id)
    log = twopc.CommitLog(str(tmp_path / "ck") + "-log")
    assert twopc.recover_sink(sink, sink_id, log, force=True).ok
    assert json.loads(twopc.starting_offsets(sink, sink_id)) == {TOPIC: {"0": 9, "1": 9}}
    assert_exactly_once(_ids(env, table), set(range(18)))


def test_a_batch_cut_off_between_commits_is_finished_without_its_log(
    env: Env, tmp_path: Path
) -> None:
    """The driver dies between the two partitions' commits of batch 2 and its commit log is
    lost: partition 0's marker row proves the batch was decided, so recovery with a new log
    commits partition 1's prepared branch instead of aborting it, and the start follows."""
    table, sink_id = env.table(), env.sink_id()
    sink = env.sink(table, create_table=True, transaction_mode="two_phase")
    with pytest.raises(twopc.TwoPCError):
        _run(sink, sink_id, tmp_path / "ck", _batches(3), faults="between_commits:raise@batch=2")
    assert len(env.prepared(sink_id)) == 1, "partition 1's branch waits"
    lost = twopc.CommitLog(str(tmp_path / "another-log"))
    planned = twopc.sink_status(sink, sink_id, lost)
    assert [(i.action, i.partition) for i in planned.items] == [("commit", 1)], planned.items
    report = twopc.recover_sink(sink, sink_id, lost, force=True)
    assert report.ok, report
    assert not env.prepared(sink_id)
    assert json.loads(twopc.starting_offsets(sink, sink_id)) == {TOPIC: {"0": 9, "1": 9}}
    assert_exactly_once(_ids(env, table), set(range(18)))


def test_an_old_marker_table_gains_the_offset_columns(env: Env, tmp_path: Path) -> None:
    table, sink_id = env.table(), env.sink_id()
    env.db.execute(OFFSETLESS_MARKER_DDL[env.db.name].format(env.db.q(env.marker_table)))
    env.db.execute(
        f"INSERT INTO {env.db.q(env.marker_table)} (sink_id, query_id, batch_id, "
        "partition_id, attempt) VALUES (%s, %s, %s, %s, %s)",
        ("older", "q-old", 4, 0, 1),
    )
    sink = env.sink(table, create_table=True)
    with pytest.raises(twopc.NoStoredOffsetsError, match="no committed batch"):
        twopc.starting_offsets(sink, sink_id)  # reading does not migrate
    _run(sink, sink_id, tmp_path / "ck", _batches(1))
    columns = {
        str(r[0]).lower()
        for r in env.db.query(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
            f"AND table_schema = {env.db.current_schema_sql}",
            (env.marker_table,),
        )
    }
    assert {"partitions", "source_offsets"} <= columns
    assert json.loads(twopc.starting_offsets(sink, sink_id)) == {TOPIC: {"0": 3, "1": 3}}
    # the old row is kept, and says it holds no offsets
    with pytest.raises(twopc.NoStoredOffsetsError, match="without source offsets"):
        twopc.starting_offsets(sink, "older")
