"""The Iceberg sink against a real catalog (pyiceberg's SQL catalog on SQLite, the embedded
default) and the local filesystem, through the local engine: partitioned tables, upsert,
schema changes, bad input, faults, two writers racing for one table, snapshot expiry.
Every check reads the table back with a pyiceberg scan."""

from __future__ import annotations

import datetime
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from tests.harness.iceberg import ids, load, records_left, scan, unreferenced_data_files
from tests.harness.local_runs import run
from twopc import local

pytest.importorskip("pyiceberg")

from twopc_iceberg import IcebergSink

pytestmark = pytest.mark.integration

TABLE = "db.events"
DAY = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)


def rows(start: int, stop: int, value: str = "a", **extra: Any) -> pa.Table:
    count = stop - start
    columns: dict[str, Any] = {
        "id": pa.array(range(start, stop), pa.int64()),
        "v": pa.array([value] * count),
        "ts": pa.array(
            [DAY + datetime.timedelta(hours=7 * i) for i in range(start, stop)],
            pa.timestamp("us", tz="UTC"),
        ),
    }
    columns.update(extra)
    return pa.table(columns)


def test_a_partitioned_table_gets_every_row_in_its_partition(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    sink = IcebergSink(
        TABLE,
        warehouse=str(wh),
        create_table=True,
        partition_by=["day(ts)", "bucket(4, id)", "v"],
    )
    run(sink, tmp_path, [[rows(0, 40), rows(40, 80, "b")], [rows(80, 120, "c")]])
    table = load(wh, TABLE)
    assert [f.name for f in table.spec().fields] == ["ts_day", "id_bucket_4", "v"]
    assert ids(wh, TABLE) == Counter(range(120))
    files = table.inspect.files().to_pylist()
    assert files
    for entry in files:
        # each file holds rows of one partition only: its bounds sit in one day and one v
        part = entry["partition"]
        assert entry["record_count"] > 0
        assert part["v"] in ("a", "b", "c")
    # a reader filtering on the partition column gets exactly that partition's rows
    only_b = table.scan(row_filter="v == 'b'").to_arrow()
    assert sorted(only_b["id"].to_pylist()) == list(range(40, 80))
    assert len(table.snapshots()) == 2  # one snapshot per batch
    assert records_left(wh, TABLE) == [] and unreferenced_data_files(wh, TABLE) == []


def test_upsert_keeps_the_last_row_of_each_key(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    sink = IcebergSink(
        TABLE, warehouse=str(wh), create_table=True, mode="upsert", key_columns=["id"]
    )
    first = [rows(0, 50, "old")]
    # batch 1 repeats ids 10..19 twice within one task (the later value wins) and 40..59
    second = [pa.concat_tables([rows(10, 20, "mid"), rows(10, 20, "new"), rows(40, 60, "new")])]
    run(sink, tmp_path, [first, second])
    table = scan(wh, TABLE)
    assert Counter(table["id"].to_pylist()) == Counter(range(60))
    values = dict(zip(table["id"].to_pylist(), table["v"].to_pylist(), strict=True))
    assert {values[i] for i in range(10, 20)} == {"new"}
    assert {values[i] for i in range(40, 60)} == {"new"}
    assert {values[i] for i in range(20, 40)} == {"old"}
    assert unreferenced_data_files(wh, TABLE) == []  # rewritten files are the table's


def test_upsert_takes_the_tables_identifier_fields_as_keys(tmp_path: Path) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

    wh = tmp_path / "wh"
    sink = IcebergSink(TABLE, warehouse=str(wh), mode="upsert")
    catalog = sink.access.catalog_object()
    catalog.create_namespace_if_not_exists("db")
    catalog.create_table(
        TABLE,
        Schema(
            NestedField(1, "id", LongType(), required=True),
            NestedField(2, "v", StringType(), required=False),
            NestedField(3, "ts", TimestamptzType(), required=False),
            identifier_field_ids=[1],
        ),
    )
    run(sink, tmp_path, [[rows(0, 10, "a")], [rows(5, 15, "b")]])
    table = scan(wh, TABLE)
    assert Counter(table["id"].to_pylist()) == Counter(range(15))


def test_an_upsert_key_that_is_null_fails_the_batch_and_leaves_nothing(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    sink = IcebergSink(
        TABLE, warehouse=str(wh), create_table=True, mode="upsert", key_columns=["v"]
    )
    bad = rows(0, 5, v=pa.array(["x", None, "y", "z", "w"]))
    with pytest.raises(twopc.BatchFailedError) as caught:
        run(sink, tmp_path, [[bad]])
    message = str(caught.value)
    assert "key column 'v' is null in row 1" in message and "batch 0" in message
    assert ids(wh, TABLE) == Counter()
    assert unreferenced_data_files(wh, TABLE) == []


def test_new_columns_are_refused_unless_schema_evolution_adds_them(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    strict = IcebergSink(TABLE, warehouse=str(wh), create_table=True)
    run(strict, tmp_path, [[rows(0, 10)]], name="a")
    wider = rows(10, 20, extra=pa.array([1.5] * 10))
    with pytest.raises(twopc.BatchFailedError) as caught:
        run(strict, tmp_path, [[wider]], name="b")
    message = str(caught.value)
    assert "column(s) ['extra']" in message and TABLE in message and "add_columns" in message
    assert ids(wh, TABLE) == Counter(range(10))

    evolving = IcebergSink(TABLE, warehouse=str(wh), schema_evolution="add_columns")
    run(evolving, tmp_path, [[wider]], name="c")
    table = scan(wh, TABLE)
    assert Counter(table["id"].to_pylist()) == Counter(range(20))
    extras = dict(zip(table["id"].to_pylist(), table["extra"].to_pylist(), strict=True))
    assert extras[3] is None and extras[13] == 1.5


def test_a_batch_whose_types_the_table_cannot_take_fails_clearly(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    sink = IcebergSink(TABLE, warehouse=str(wh), create_table=True)
    run(sink, tmp_path, [[rows(0, 10)]], name="a")
    text_ids = rows(0, 3).set_column(0, "id", pa.array(["x", "y", "z"]))
    with pytest.raises(twopc.BatchFailedError) as caught:
        run(sink, tmp_path, [[text_ids]], name="b")
    message = str(caught.value)
    assert "column 'id'" in message and "partition 0" in message and "batch 0" in message
    assert ids(wh, TABLE) == Counter(range(10))
    assert unreferenced_data_files(wh, TABLE) == [] and records_left(wh, TABLE) == []


def test_a_missing_table_is_named_unless_create_table(tmp_path: Path) -> None:
    sink = IcebergSink(TABLE, warehouse=str(tmp_path / "wh"))
    with pytest.raises(twopc.BatchFailedError) as caught:
        run(sink, tmp_path, [[rows(0, 3)]])
    assert f"table {TABLE} does not exist" in str(caught.value)
    assert "create_table=True" in str(caught.value)


def test_an_unreachable_catalog_is_named_without_its_password(tmp_path: Path) -> None:
    sink = IcebergSink(
        TABLE,
        catalog="lake",
        catalog_properties={
            "type": "sql",
            "uri": "postgresql+psycopg://twopc:s3cret-pw@127.0.0.1:9/lake",
            "warehouse": f"file://{tmp_path}/wh",
        },
    )
    assert "s3cret-pw" not in repr(sink) and "s3cret-pw" not in repr(sink.access)
    with pytest.raises(twopc.TwoPCError) as caught:
        run(sink, tmp_path, [[rows(0, 3)]])
    message = str(caught.value)
    assert "catalog 'lake'" in message and "s3cret-pw" not in message


def test_a_warehouse_without_write_permission_fails_clearly_and_loses_nothing(
    tmp_path: Path,
) -> None:
    wh = tmp_path / "wh"
    sink = IcebergSink(TABLE, warehouse=str(wh), create_table=True)
    run(sink, tmp_path, [[rows(0, 10)]])
    location = Path(load(wh, TABLE).location().removeprefix("file://"))
    # root ignores file modes: immutable directories refuse even root (EPERM)
    locked = subprocess.run(["chattr", "-R", "+i", str(location)], capture_output=True, check=False)
    if locked.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {locked.stderr.decode().strip()}")
    try:
        with pytest.raises(twopc.BatchFailedError) as caught:
            run(sink, tmp_path, [[rows(0, 10)], [rows(10, 20)]])
        message = str(caught.value)
        assert "permission denied" in message and TABLE in message and "batch 1" in message
    finally:
        subprocess.run(["chattr", "-R", "-i", str(location)], check=True)
    assert ids(wh, TABLE) == Counter(range(10))
    run(sink, tmp_path, [[rows(0, 10)], [rows(10, 20)]])  # the rerun finishes batch 1
    assert ids(wh, TABLE) == Counter(range(20))
    assert unreferenced_data_files(wh, TABLE) == [] and records_left(wh, TABLE) == []


class RacedSink(IcebergSink):
    """Another writer appends to the table just before each of the first ``races`` commit
    attempts of this sink, so that attempt loses the catalog's compare-and-swap."""

    races = 1

    def _commit_once(self, table: Any, *args: Any) -> None:
        if self.races > 0:
            self.races -= 1
            other = self.access.require()
            other.append(rows(10_000 + self.races, 10_001 + self.races, "other"))
        super()._commit_once(table, *args)


def test_a_commit_that_loses_the_race_is_tried_again_never_twice(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    sink = RacedSink(TABLE, warehouse=str(wh), create_table=True)
    sink.races = 2
    run(sink, tmp_path, [[rows(0, 10), rows(10, 20)]])
    assert ids(wh, TABLE) == Counter([*range(20), 10_000, 10_001])
    assert unreferenced_data_files(wh, TABLE) == []


def test_a_commit_that_keeps_losing_the_race_says_so_and_a_rerun_commits_once(
    tmp_path: Path,
) -> None:
    wh = tmp_path / "wh"
    sink = RacedSink(TABLE, warehouse=str(wh), create_table=True, commit_retries=1)
    run(sink, tmp_path, [[rows(0, 10)]], name="seed")
    sink.races = 100
    with pytest.raises(twopc.TwoPCError) as caught:
        run(sink, tmp_path, [[rows(100, 110)]])
    message = str(caught.value)
    assert "compare-and-swap 2 times" in message and TABLE in message and "batch 0" in message
    assert set(ids(wh, TABLE)) & set(range(100, 110)) == set()
    sink.races = 0
    run(sink, tmp_path, [[rows(100, 110)]])  # the decision stands: the restart commits it
    seen = ids(wh, TABLE)
    assert all(seen[i] == 1 for i in range(100, 110))


def test_two_queries_appending_to_one_table_both_land_once(tmp_path: Path) -> None:
    """Two writers in two processes commit batches to one table at the same time."""
    wh = tmp_path / "wh"
    IcebergSink(TABLE, warehouse=str(wh), create_table=True)
    seed = IcebergSink(TABLE, warehouse=str(wh), create_table=True)
    run(seed, tmp_path, [[rows(0, 1)]], name="seed", sink_id="seed")
    script = tmp_path / "writer.py"
    script.write_text(
        "import sys, pyarrow as pa, twopc.local as local\n"
        "from twopc_iceberg import IcebergSink\n"
        "wh, name, base = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
        f"sink = IcebergSink({TABLE!r}, warehouse=wh, commit_retries=50)\n"
        "batches = [[pa.table({'id': pa.array(range(base + b * 10, base + b * 10 + 10),"
        " pa.int64())})] for b in range(8)]\n"
        "stream = local.LocalStream(f'{wh}/../ck-{name}', batches)\n"
        "stream.run(local.foreach_batch(sink, name, commit_log=f'{wh}/../log-{name}',"
        " processes=False))\n"
    )
    import sys

    writers = [
        subprocess.Popen([sys.executable, str(script), str(wh), name, str(base)])
        for name, base in (("left", 1000), ("right", 2000))
    ]
    assert [w.wait(timeout=300) for w in writers] == [0, 0]
    expected = Counter([0, *range(1000, 1080), *range(2000, 2080)])
    assert ids(wh, TABLE) == expected
    summaries = [s.summary.additional_properties for s in load(wh, TABLE).snapshots()]
    assert sum(1 for s in summaries if s.get("twopc.sink-id") in ("left", "right")) == 16


def test_expiring_snapshots_keeps_the_marker_a_replay_needs(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    sink = IcebergSink(TABLE, warehouse=str(wh), create_table=True)
    run(sink, tmp_path, [[rows(0, 10)], [rows(10, 20)]])
    table = load(wh, TABLE)
    table.append(rows(500, 501, "other"))  # another writer's snapshot is the newest now
    table = load(wh, TABLE)
    current = table.current_snapshot().snapshot_id
    older = [s.snapshot_id for s in table.snapshots() if s.snapshot_id != current]
    table.maintenance.expire_snapshots().by_ids(older).commit()
    # no snapshot summary names a batch of this sink any more: only the property does
    assert [
        s.summary.additional_properties.get("twopc.batch-id") for s in load(wh, TABLE).snapshots()
    ] == [None]
    # the same query runs batch 0 again (its commit log lost): the table's marker refuses it
    twopc_log = tmp_path / "log-q"
    for path in sorted(twopc_log.rglob("*")):
        if path.is_file():
            path.unlink()
    checkpoint = tmp_path / "checkpoint-q"
    for name in ("commits", "offsets"):
        for path in (checkpoint / name).iterdir():
            path.unlink()
    with pytest.raises(twopc.TwoPCError, match="target's markers show a batch after 0"):
        run(sink, tmp_path, [[rows(0, 10)], [rows(10, 20)]])
    assert ids(wh, TABLE) == Counter([*range(20), 500])


def test_a_second_attempt_of_a_committed_partition_leaves_no_file(tmp_path: Path) -> None:
    """A batch run again after it committed (a checkpoint put back from a copy: chaos seed
    133013) prepares new files for a partition the table holds; its commit writes nothing
    and removes them, also when only the snapshot summary can tell (marker property lost)."""
    wh = tmp_path / "wh"
    sink = IcebergSink(TABLE, warehouse=str(wh), create_table=True)

    def prepare(attempt: int) -> twopc.Committable:
        ctx = twopc.TaskContext("ev", "q1", 0, 0, attempt)
        txn = sink.begin_transaction(ctx)
        for batch in rows(0, 10).to_batches():
            sink.invoke(txn, batch)
        return sink.pre_commit(txn)

    assert sink.commit([prepare(1)]) == [twopc.CommitOutcome.COMMITTED]
    assert sink.commit([prepare(2)]) == [twopc.CommitOutcome.ALREADY_COMMITTED]
    assert ids(wh, TABLE) == Counter(range(10))
    assert unreferenced_data_files(wh, TABLE) == [] and records_left(wh, TABLE) == []
    # without the property, the snapshot that names the batch tells which files it holds
    table = load(wh, TABLE)
    with table.transaction() as txn:
        txn.remove_properties(*[k for k in table.properties if k.startswith("twopc.")])
    assert sink.commit([prepare(3)]) == [twopc.CommitOutcome.ALREADY_COMMITTED]
    assert ids(wh, TABLE) == Counter(range(10))
    assert unreferenced_data_files(wh, TABLE) == [] and records_left(wh, TABLE) == []


def test_status_shows_a_decided_batch_and_recover_commits_it(tmp_path: Path) -> None:
    """``twopc status iceberg`` lists the decided batch and its prepared attempt; ``twopc
    recover iceberg`` commits it; the table then shows every row once."""
    wh = tmp_path / "wh"
    sink = IcebergSink(TABLE, warehouse=str(wh), create_table=True)
    stream = local.LocalStream(str(tmp_path / "chk"), [[rows(0, 10)], [rows(10, 20)]])
    failing = local.foreach_batch(
        sink,
        "ev",
        commit_log=str(tmp_path / "log"),
        processes=False,
        faults=twopc.FaultPlan.parse("after_decision:raise@batch=1"),
    )
    with pytest.raises(twopc.TwoPCError):
        stream.run(failing)
    failing.close()  # the query is over: its liveness record goes
    assert ids(wh, TABLE) == Counter(range(10))
    import sys

    cli = [sys.executable, "-m", "twopc.cli"]
    where = ["iceberg", "--sink-id", "ev", "--option", f"table={TABLE}"]
    where += ["--option", f"warehouse={wh}", "--commit-log", str(tmp_path / "log")]
    status = subprocess.run([*cli, "status", *where], capture_output=True, text=True, check=False)
    assert "decided, not finished: [1]" in status.stdout, status.stdout + status.stderr
    assert "commit  prepared" in status.stdout
    recovered = subprocess.run(
        [*cli, "recover", *where], capture_output=True, text=True, check=False
    )
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert "recovered: 1 committed, 0 aborted" in recovered.stdout
    assert ids(wh, TABLE) == Counter(range(20))
    assert unreferenced_data_files(wh, TABLE) == [] and records_left(wh, TABLE) == []


def _every_type() -> pa.Table:
    import decimal

    return pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "d": pa.array([datetime.date(2024, 1, 1), datetime.date(2024, 2, 1), None]),
            "dec": pa.array(
                [decimal.Decimal("1.23"), None, decimal.Decimal("-4.50")], pa.decimal128(10, 2)
            ),
            "flag": pa.array([True, False, None]),
            "raw": pa.array([b"xyz", b"xy", None], pa.binary()),
            "small": pa.array([1, None, 3], pa.int32()),
            "real": pa.array([1.5, None, 2.5], pa.float32()),
            "items": pa.array([[1, 2], [3], None], pa.list_(pa.int64())),
            "pair": pa.array(
                [{"a": 1, "b": "x"}, {"a": 2, "b": None}, None],
                pa.struct([("a", pa.int64()), ("b", pa.string())]),
            ),
            "tags": pa.array([[("k", 1)], [], None], pa.map_(pa.string(), pa.int64())),
            "local_ts": pa.array([datetime.datetime(2024, 1, 1, 1, 2, 3)] * 3, pa.timestamp("us")),
            "text": pa.array(["abc", "abd", None]),
        }
    )


@pytest.mark.parametrize(
    "partition_by",
    [
        [],
        ["d"],
        ["bucket(4, dec)"],
        ["truncate(2, raw)"],
        ["truncate(2, text)"],
        ["month(local_ts)"],
    ],
    ids=lambda p: p[0] if p else "unpartitioned",
)
def test_every_column_type_goes_in_and_comes_back(tmp_path: Path, partition_by: list[str]) -> None:
    """Dates, decimals, booleans, binary, 32-bit numbers, lists, structs, maps, timestamps
    without a zone, strings (nulls among them), under each kind of partition transform."""
    wh = tmp_path / "wh"
    sink = IcebergSink(TABLE, warehouse=str(wh), create_table=True, partition_by=partition_by)
    data = _every_type()
    run(sink, tmp_path, [[data]])
    back = scan(wh, TABLE).sort_by("id")
    assert back.to_pylist() == data.to_pylist()
    assert unreferenced_data_files(wh, TABLE) == []


def test_a_reader_sees_every_batch_whole_or_not_at_all(tmp_path: Path) -> None:
    """A pyiceberg scan taken again and again while batches of three partitions commit
    never shows part of a batch."""
    import threading

    wh = tmp_path / "wh"
    sink = IcebergSink(TABLE, warehouse=str(wh), create_table=True)
    run(sink, tmp_path, [[rows(0, 1)]], name="seed", sink_id="seed")  # the table exists
    batches = [
        [rows(b * 1000 + p * 100, b * 1000 + p * 100 + 100) for p in range(3)] for b in range(1, 9)
    ]
    writer = threading.Thread(target=run, args=(sink, tmp_path, batches))
    writer.start()
    seen_states = set()
    while writer.is_alive() or not seen_states:
        visible = set(ids(wh, TABLE)) - {0}
        by_batch = Counter(i // 1000 for i in visible)
        assert all(count == 300 for count in by_batch.values()), by_batch
        seen_states.add(frozenset(by_batch))
    writer.join()
    assert len(ids(wh, TABLE)) == 1 + 8 * 300
    assert len(seen_states) > 1  # the reader did look in between
