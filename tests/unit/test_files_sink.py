"""The files sink driven directly through the protocol, on the local and in-memory filesystems.

Every assertion is about what a reader of the output sees: files listed on the filesystem
and read back with pyarrow (``pyarrow.dataset`` with Hive partitioning, ``pyarrow.parquet``,
``pyarrow.csv``, ``pyarrow.ipc`` and JSON lines), never about the sink's logs.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import signal
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import twopc
from twopc import (
    CommitError,
    CommitLog,
    CommitOutcome,
    Committable,
    ConfigurationError,
    PermanentSinkError,
    TaskContext,
    TwoPCError,
)
from twopc._contract.paths import CommitPath
from twopc._coordination.phase1 import Phase1Task
from twopc._coordination.records import Decision
from twopc._coordination.reports import TaskOutcome
from twopc_files import FORMATS, FilesSink
from twopc_files._layout import COMMITTABLE_FILE, LOG_DIR, STAGING_DIR, attempt_dir

pytestmark = pytest.mark.unit

SINK = "orders"
DATASET_FORMAT = {"parquet": "parquet", "csv": "csv", "json": "json", "arrow": "ipc"}


# -- targets: a local directory and an fsspec memory:// directory ------------------------


@dataclass
class Target:
    kind: str
    url: str
    fs: Any
    root: str

    @property
    def reader_fs(self) -> Any:
        """Filesystem to hand to pyarrow: native for local paths, the fsspec one otherwise."""
        return None if self.kind == "local" else self.fs

    def sink(self, **options: Any) -> FilesSink:
        return FilesSink(self.url, **options)


def _clear_memory_fs() -> None:
    memory = fsspec.filesystem("memory")
    memory.store.clear()
    memory.pseudo_dirs.clear()
    memory.pseudo_dirs.append("")


@pytest.fixture
def memory_target() -> Iterator[Target]:
    _clear_memory_fs()
    yield Target(
        "memory", "memory://twopc-unit/out", fsspec.filesystem("memory"), "/twopc-unit/out"
    )
    _clear_memory_fs()


@pytest.fixture
def local_target(tmp_path: Any) -> Target:
    root = str(tmp_path / "out")
    return Target("local", root, fsspec.filesystem("file"), root)


@pytest.fixture(params=["local", "memory"])
def target(request: pytest.FixtureRequest) -> Target:
    return request.getfixturevalue(f"{request.param}_target")  # type: ignore[no-any-return]


# -- helpers --------------------------------------------------------------------------------


def ctx(
    batch: int = 0, partition: int = 0, attempt: int = 0, query: str = "q-1", sink: str = SINK
) -> TaskContext:
    return TaskContext(sink, query, batch, partition, attempt, run_id="run-1")


def orders(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "amount": pa.array([i * 1.5 for i in ids], pa.float64()),
            "customer": pa.array([f"customer-{i % 7}" for i in ids], pa.string()),
        }
    )


def run_task(sink: FilesSink, context: TaskContext, table: pa.Table, chunk: int = 0) -> Committable:
    """Phase 1 of one task: begin, invoke per record batch, pre_commit."""
    txn = sink.begin_transaction(context)
    for batch in table.to_batches(max_chunksize=chunk or None):
        sink.invoke(txn, batch)
    return sink.pre_commit(txn)


def files_under(target: Target) -> list[str]:
    """Every file below the output root, relative to it."""
    if not target.fs.exists(target.root):
        return []
    prefix = target.root.rstrip("/") + "/"
    return sorted(p[len(prefix) :] for p in target.fs.find(target.root))


def spark_visible(target: Target) -> list[str]:
    """Files a Spark/pyarrow reader lists: no path component starts with ``_`` or ``.``."""
    return [
        p
        for p in files_under(target)
        if not any(part.startswith(("_", ".")) for part in p.split("/"))
    ]


def snapshot(target: Target) -> dict[str, bytes]:
    return {p: target.fs.cat_file(f"{target.root}/{p}") for p in spark_visible(target)}


def finals(committables: list[Committable]) -> list[str]:
    return sorted(f["final"] for c in committables for f in c.payload["files"])


def read_committed(target: Target, fmt: str = "parquet", partitioning: Any = None) -> pa.Table:
    if not target.fs.exists(target.root):
        return pa.table({})
    dataset = ds.dataset(
        target.root,
        format=DATASET_FORMAT[fmt],
        partitioning=partitioning,
        filesystem=target.reader_fs,
    )
    return dataset.to_table()


def rows_by_id(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda row: row["id"])


def read_file(target: Target, relative: str, fmt: str) -> pa.Table:
    """One committed file read with the format's own reader."""
    with target.fs.open(f"{target.root}/{relative}", "rb") as handle:
        raw = handle.read()
    if fmt == "parquet":
        return pq.read_table(pa.BufferReader(raw))
    if fmt == "csv":
        return pacsv.read_csv(pa.BufferReader(raw))
    if fmt == "arrow":
        return pa.ipc.open_file(pa.BufferReader(raw)).read_all()
    lines = [json.loads(line) for line in raw.decode().splitlines() if line]
    return pa.Table.from_pylist(lines)


def _fork_context() -> Any:
    return multiprocessing.get_context("fork")


def _start(process: Any) -> None:
    with warnings.catch_warnings():
        # Python 3.12+ warns when forking a multi-threaded process (pyarrow's pools).
        warnings.simplefilter("ignore", DeprecationWarning)
        process.start()


# -- visibility, commit, idempotence -----------------------------------------------------


def test_nothing_visible_before_commit(target: Target) -> None:
    sink = target.sink()
    prepared = [
        run_task(sink, ctx(partition=p), orders(50, start=100 * p), chunk=20) for p in range(2)
    ]

    staged = files_under(target)
    assert staged, "pre_commit wrote nothing at all"
    assert all(p.startswith(f"{STAGING_DIR}/") for p in staged)
    assert spark_visible(target) == []
    assert read_committed(target).num_rows == 0
    for committable in prepared:
        assert f"{committable.payload['staging']}/{COMMITTABLE_FILE}" in staged
        for entry in committable.payload["files"]:
            assert entry["staged"] in staged


def test_commit_makes_exactly_the_rows_visible_and_is_idempotent(target: Target) -> None:
    sink = target.sink()
    data = [orders(40), orders(25, start=1000)]
    prepared = [run_task(sink, ctx(partition=p), t, chunk=10) for p, t in enumerate(data)]

    assert sink.commit(prepared) == [CommitOutcome.COMMITTED] * 2

    expected = rows_by_id(pa.concat_tables(data))
    assert rows_by_id(read_committed(target)) == expected
    assert spark_visible(target) == finals(prepared)
    assert not any(p.startswith(STAGING_DIR) for p in files_under(target))
    before = snapshot(target)

    assert sink.commit(prepared) == [CommitOutcome.ALREADY_COMMITTED] * 2
    assert snapshot(target) == before
    assert rows_by_id(read_committed(target)) == expected


def test_every_visible_file_is_a_committed_data_file(target: Target) -> None:
    """Spark skips names starting with _ or .; everything else it sees must be our data."""
    sink = target.sink(partition_by=["customer"])
    prepared = run_task(sink, ctx(), orders(30))
    log = CommitLog(sink.default_commit_log(SINK))
    log.record_decision(Decision(SINK, "q-1", 0, (prepared,)))

    assert spark_visible(target) == []
    sink.commit([prepared])
    log.mark_done("q-1", 0)

    visible = spark_visible(target)
    assert visible == finals([prepared])
    assert all(p.rsplit("/", 1)[-1].startswith("part-") for p in visible)
    # the manifest (decision) lives in a hidden directory next to the data
    assert any(p.startswith(f"{LOG_DIR}/") for p in files_under(target))
    table = read_committed(target, partitioning="hive")
    assert sorted(table.column("id").to_pylist()) == list(range(30))


def test_commit_completes_after_a_crash_mid_commit(target: Target) -> None:
    sink = target.sink(format="arrow", target_file_size=1024)
    data = orders(600)
    prepared = run_task(sink, ctx(), data, chunk=50)
    files = prepared.payload["files"]
    assert len(files) >= 3

    # The crashed commit promoted the first file, then died.
    first = files[0]
    target.fs.mv(f"{target.root}/{first['staged']}", f"{target.root}/{first['final']}")
    assert spark_visible(target) == [first["final"]]

    assert sink.commit([prepared]) == [CommitOutcome.COMMITTED]
    assert rows_by_id(read_committed(target, "arrow")) == rows_by_id(data)
    assert spark_visible(target) == finals([prepared])
    assert sink.commit([prepared]) == [CommitOutcome.ALREADY_COMMITTED]
    assert rows_by_id(read_committed(target, "arrow")) == rows_by_id(data)


def test_commit_completes_when_crash_left_only_the_staging_directory(target: Target) -> None:
    sink = target.sink()
    data = orders(20)
    prepared = run_task(sink, ctx(), data)
    for entry in prepared.payload["files"]:  # every file promoted, staging not yet removed
        target.fs.mv(f"{target.root}/{entry['staged']}", f"{target.root}/{entry['final']}")

    assert sink.commit([prepared]) == [CommitOutcome.COMMITTED]
    assert not any(p.startswith(STAGING_DIR) for p in files_under(target))
    assert rows_by_id(read_committed(target)) == rows_by_id(data)
    assert sink.commit([prepared]) == [CommitOutcome.ALREADY_COMMITTED]


def test_empty_task_commits_nothing_visible(target: Target) -> None:
    sink = target.sink()
    txn = sink.begin_transaction(ctx())
    prepared = sink.pre_commit(txn)

    assert prepared.payload["files"] == []
    assert sink.recover(SINK) == [prepared]
    assert sink.commit([prepared]) == [CommitOutcome.COMMITTED]
    assert spark_visible(target) == []
    assert sink.recover(SINK) == []
    assert sink.commit([prepared]) == [CommitOutcome.ALREADY_COMMITTED]


def test_replayed_batch_overwrites_instead_of_duplicating(target: Target) -> None:
    sink = target.sink(partition_by=["customer"], target_file_size=2048)
    data = orders(300)
    first = run_task(sink, ctx(attempt=0), data, chunk=40)
    assert sink.commit([first]) == [CommitOutcome.COMMITTED]
    visible = spark_visible(target)

    # Spark re-runs the batch (driver died before commits/N): a new attempt, same data.
    replay = run_task(sink, ctx(attempt=1), data, chunk=40)
    sink.commit([replay])

    assert spark_visible(target) == visible
    assert rows_by_id(read_committed(target, partitioning="hive")) == rows_by_id(data)


def test_commit_of_aborted_work_fails_clearly(target: Target) -> None:
    sink = target.sink()
    prepared = run_task(sink, ctx(batch=4, partition=2), orders(10))
    sink.abort_prepared([prepared])

    with pytest.raises(CommitError, match="modified outside twopc"):
        sink.commit([prepared])
    assert spark_visible(target) == []


# -- abort ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_abort_leaves_nothing(target: Target, fmt: str) -> None:
    sink = target.sink(format=fmt)
    txn = sink.begin_transaction(ctx())
    sink.invoke(txn, orders(30).to_batches()[0])
    assert files_under(target)  # something was staged

    sink.abort(txn)
    sink.abort(txn)  # idempotent

    assert files_under(target) == []
    assert read_committed(target, fmt).num_rows == 0
    assert sink.recover(SINK) == []


def test_abort_prepared_removes_staging_and_shows_nothing(target: Target) -> None:
    sink = target.sink(partition_by=["customer"])
    prepared = [run_task(sink, ctx(partition=p), orders(20, start=50 * p)) for p in range(2)]
    other = run_task(sink, ctx(batch=1), orders(5, start=900))

    sink.abort_prepared(prepared)
    sink.abort_prepared(prepared)  # idempotent

    assert spark_visible(target) == []
    remaining = files_under(target)
    assert all(p.startswith(f"{other.payload['staging']}/") for p in remaining)
    assert sink.recover(SINK) == [other]


def test_abort_prepared_without_payload_uses_the_attempt_directory(target: Target) -> None:
    sink = target.sink()
    prepared = run_task(sink, ctx(batch=3, partition=1, attempt=2), orders(5))
    bare = Committable(SINK, "q-1", 3, 1, 2)  # e.g. rebuilt from a bare decision entry

    sink.abort_prepared([bare])

    assert files_under(target) == []
    assert prepared.payload["staging"] == attempt_dir(SINK, "q-1", 3, 1, 2)


# -- recovery and sweeping ----------------------------------------------------------------


def test_recover_returns_prepared_work_across_query_ids(target: Target) -> None:
    sink = target.sink()
    a = run_task(sink, ctx(query="q-old", batch=7, partition=0), orders(3))
    b = run_task(sink, ctx(query="q-new", batch=0, partition=1, attempt=1), orders(4))
    c = run_task(sink, ctx(query="q-new", batch=0, partition=0), orders(2))
    run_task(sink, ctx(sink="another-sink"), orders(2))
    unprepared = sink.begin_transaction(ctx(query="q-new", batch=0, partition=2))
    sink.invoke(unprepared, orders(2).to_batches()[0])

    found = sink.recover(SINK)

    assert sorted(x.dumps() for x in found) == sorted(x.dumps() for x in (a, b, c))
    sink.abort(unprepared)

    # what recover returns commits, even from a fresh sink object
    fresh = target.sink()
    assert fresh.commit(fresh.recover(SINK)) == [CommitOutcome.COMMITTED] * 3
    assert sorted(read_committed(target).column("id").to_pylist()) == [0, 0, 0, 1, 1, 1, 2, 2, 3]
    assert sink.recover(SINK) == []


def _plant_crashed_attempt(target: Target, staging: str) -> None:
    """A task that died mid-write: staged bytes, no _committable.json."""
    target.fs.makedirs(f"{target.root}/{staging}", exist_ok=True)
    target.fs.pipe_file(f"{target.root}/{staging}/part-x.parquet", b"PAR1 half a file")


def test_sweep_removes_never_prepared_attempts_and_keeps_prepared_ones(target: Target) -> None:
    sink = target.sink()
    prepared = run_task(sink, ctx(batch=2, partition=0, attempt=0), orders(5))
    crashed = [attempt_dir(SINK, "q-1", 2, 0, 1), attempt_dir(SINK, "q-0", 1, 3, 0)]
    kept_unprepared = attempt_dir(SINK, "q-1", 2, 1, 0)
    foreign = attempt_dir("another-sink", "q-1", 2, 0, 1)
    for staging in [*crashed, kept_unprepared, foreign]:
        _plant_crashed_attempt(target, staging)
    keep = [Committable(SINK, "q-1", 2, 1, 0, payload={"staging": kept_unprepared})]

    assert sink.sweep(SINK, keep=keep) == len(crashed)

    remaining = files_under(target)
    for staging in crashed:
        assert not any(p.startswith(f"{staging}/") for p in remaining)
    for staging in (prepared.payload["staging"], kept_unprepared, foreign):
        assert any(p.startswith(f"{staging}/") for p in remaining)
    assert sink.recover(SINK) == [prepared]
    assert sink.sweep(SINK, keep=keep) == 0
    assert sink.commit([prepared]) == [CommitOutcome.COMMITTED]
    assert rows_by_id(read_committed(target)) == rows_by_id(orders(5))


def test_inspect_shows_prepared_work_and_a_crashed_attempt_as_unprepared(
    target: Target,
) -> None:
    sink = target.sink()
    prepared = run_task(sink, ctx(query="q-1", batch=2, partition=0), orders(2))
    _plant_crashed_attempt(target, attempt_dir(SINK, "q-1", 3, 1, 0))
    pending = sorted(sink.inspect(SINK).pending, key=lambda w: w.kind)
    assert [(w.kind, w.query_id, w.batch_id, w.partition) for w in pending] == [
        (twopc.WorkKind.PREPARED, "q-1", 2, 0),
        (twopc.WorkKind.UNPREPARED, "q-1", 3, 1),
    ]
    assert pending[0].committable == prepared


@pytest.mark.skipif(
    tuple(int(part) for part in fsspec.__version__.split(".")[:2]) < (2026, 7),
    reason="before fsspec 2026.7 the memory filesystem globs by listing every directory, so "
    "the directory this test makes unlistable also hides the attempt under it from the glob "
    "(the sweep still passes over the directory; scripts/lowest-versions)",
)
def test_sweep_passes_over_a_listed_directory_that_cannot_be_listed(
    memory_target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SeaweedFS's S3 API lists an emptied directory as a prefix, and s3fs then raises
    ``FileNotFoundError`` listing it (measured); a directory removed by another process
    between the glob and the listing looks the same. The sweep goes on."""
    sink = memory_target.sink()
    crashed = attempt_dir(SINK, "q-1", 2, 0, 1)
    _plant_crashed_attempt(memory_target, crashed)
    emptied = f"{memory_target.root}/{crashed.rsplit('/', 2)[0]}"
    listing = memory_target.fs.ls

    def ls(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.rstrip("/") == emptied:
            raise FileNotFoundError(path)
        return listing(path, *args, **kwargs)

    monkeypatch.setattr(memory_target.fs, "ls", ls)
    assert sink.sweep(SINK) == 1
    assert not any(p.startswith(f"{crashed}/") for p in files_under(memory_target))


def test_sweep_on_an_empty_output_removes_nothing(target: Target) -> None:
    assert target.sink().sweep(SINK) == 0


def test_sweep_with_the_filesystem_root_as_output() -> None:
    """Output at the root of a filesystem: the staging path has no parent prefix."""
    _clear_memory_fs()
    try:
        fs = fsspec.filesystem("memory")
        sink = FilesSink("memory://")
        staging = attempt_dir(SINK, "q-1", 0, 0, 1)
        fs.pipe_file(f"/{staging}/part-x.parquet", b"half")
        prepared = run_task(sink, ctx(), orders(3))

        assert sink.sweep(SINK) == 1
        assert not fs.exists(f"/{staging}/part-x.parquet")
        assert fs.exists(f"/{prepared.payload['staging']}/{COMMITTABLE_FILE}")
    finally:
        _clear_memory_fs()


def _write_then_die(path: str, context: TaskContext, table: pa.Table) -> None:
    sink = FilesSink(path)
    txn = sink.begin_transaction(context)
    sink.invoke(txn, table.to_batches()[0])
    os.kill(os.getpid(), signal.SIGKILL)


def test_sweep_removes_staging_of_a_killed_task_process(local_target: Target) -> None:
    process = _fork_context().Process(
        target=_write_then_die, args=(local_target.url, ctx(attempt=0), orders(100))
    )
    _start(process)
    process.join(30)
    assert process.exitcode == -signal.SIGKILL
    assert files_under(local_target)  # the dead task left staged bytes

    sink = local_target.sink()
    assert sink.recover(SINK) == []
    assert sink.sweep(SINK) == 1
    assert files_under(local_target) == []


def test_begin_transaction_discards_leftovers_of_the_same_attempt(target: Target) -> None:
    sink = target.sink()
    _plant_crashed_attempt(target, attempt_dir(SINK, "q-1", 0, 0, 0))

    prepared = run_task(sink, ctx(), orders(4))

    staged = set(files_under(target))
    assert f"{prepared.payload['staging']}/part-x.parquet" not in staged
    sink.commit([prepared])
    assert rows_by_id(read_committed(target)) == rows_by_id(orders(4))


# -- commit from another process ------------------------------------------------------------


def _commit_in_child(path: str, fmt: str, texts: list[str], conn: Any) -> None:
    try:
        sink = FilesSink(path, format=fmt)
        outcomes = sink.commit([Committable.loads(text) for text in texts])
        conn.send([o.value for o in outcomes])
    except BaseException as exc:  # report, do not hang the parent
        conn.send(f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_commit_from_a_fresh_process(local_target: Target, method: str) -> None:
    sink = local_target.sink(format="csv")
    data = [orders(30), orders(30, start=30)]
    texts = [run_task(sink, ctx(partition=p), t).dumps() for p, t in enumerate(data)]
    assert spark_visible(local_target) == []

    context = multiprocessing.get_context(method)
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(
        target=_commit_in_child, args=(local_target.url, "csv", texts, sender)
    )
    _start(process)
    sender.close()
    result = receiver.recv() if receiver.poll(60) else "child did not answer"
    process.join(30)

    assert result == ["committed", "committed"]
    assert process.exitcode == 0
    assert rows_by_id(read_committed(local_target, "csv")) == rows_by_id(pa.concat_tables(data))
    assert (
        sink.commit([Committable.loads(t) for t in texts]) == [CommitOutcome.ALREADY_COMMITTED] * 2
    )


def test_commit_with_an_unpickled_sink_and_deserialized_committable(target: Target) -> None:
    sink = target.sink(format="json")
    data = orders(12)
    text = run_task(sink, ctx(), data).dumps()

    clone = pickle.loads(pickle.dumps(sink))
    assert clone.commit([Committable.loads(text)]) == [CommitOutcome.COMMITTED]
    assert rows_by_id(read_committed(target, "json")) == rows_by_id(data)


# -- formats --------------------------------------------------------------------------------


def _typed_rows() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "price": pa.array([0.5, -2.25, 1e10, None], pa.float64()),
            "name": pa.array(["alpha", "b,c", 'quote "q"', "ünïcode"], pa.string()),
            "flag": pa.array([True, False, None, True], pa.bool_()),
        }
    )


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_format_round_trip(target: Target, fmt: str) -> None:
    sink = target.sink(format=fmt)
    data = _typed_rows()
    prepared = run_task(sink, ctx(), data, chunk=2)
    sink.commit([prepared])

    visible = spark_visible(target)
    assert len(visible) == 1
    assert visible[0].endswith(f".{FORMATS[fmt]}")
    for table in (read_committed(target, fmt), read_file(target, visible[0], fmt)):
        assert rows_by_id(table) == rows_by_id(data)
        assert table.schema.field("id").type == pa.int64()
        assert table.schema.field("price").type == pa.float64()
        assert table.schema.field("name").type == pa.string()
        assert table.schema.field("flag").type == pa.bool_()


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_binary_formats_keep_exact_types(target: Target, fmt: str) -> None:
    import datetime
    import decimal

    data = pa.table(
        {
            "id": pa.array([1, 2], pa.int32()),
            "at": pa.array(
                [datetime.datetime(2024, 1, 2, 3, 4, 5, 6), None], pa.timestamp("us", "UTC")
            ),
            "day": pa.array([datetime.date(2024, 2, 29), datetime.date(1970, 1, 1)]),
            "cost": pa.array(
                [decimal.Decimal("12.34"), decimal.Decimal("-0.01")], pa.decimal128(9, 2)
            ),
            "tags": pa.array([["a", "b"], []], pa.list_(pa.string())),
            "blob": pa.array([b"\x00\xff", None], pa.binary()),
        }
    )
    sink = target.sink(format=fmt)
    sink.commit([run_task(sink, ctx(), data)])

    (visible,) = spark_visible(target)
    table = read_file(target, visible, fmt)
    assert table.schema.remove_metadata() == data.schema
    assert table.equals(data)


def test_json_lines_serialise_temporal_and_decimal_values(target: Target) -> None:
    import datetime
    import decimal

    data = pa.table(
        {
            "id": [1],
            "at": pa.array([datetime.datetime(2024, 1, 2, 3, 4, 5)], pa.timestamp("s")),
            "cost": pa.array([decimal.Decimal("1.50")], pa.decimal128(5, 2)),
            "blob": pa.array([b"\x01\xab"], pa.binary()),
        }
    )
    sink = target.sink(format="json")
    sink.commit([run_task(sink, ctx(), data)])

    (visible,) = spark_visible(target)
    lines = target.fs.cat_file(f"{target.root}/{visible}").decode().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"id": 1, "at": "2024-01-02T03:04:05", "cost": "1.50", "blob": "01ab"}
    ]


def test_write_options_reach_the_format_writer(target: Target) -> None:
    sink = target.sink(format="csv", write_options={"include_header": False, "delimiter": ";"})
    sink.commit([run_task(sink, ctx(), pa.table({"id": [1, 2], "s": ["x", "y"]}))])

    (visible,) = spark_visible(target)
    assert target.fs.cat_file(f"{target.root}/{visible}").decode().splitlines() == [
        '1;"x"',
        '2;"y"',
    ]


# -- partitioning ---------------------------------------------------------------------------

AWKWARD = ["a/b", "k=v", "plain", None, "x/=y", "50%", "sp ace+plus", "é:ü"]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "arrow"])
def test_partition_by_one_column(target: Target, fmt: str) -> None:
    data = pa.table(
        {
            "id": pa.array(range(len(AWKWARD) * 3), pa.int64()),
            "region": pa.array(AWKWARD * 3, pa.string()),
            "value": pa.array([float(i) for i in range(len(AWKWARD) * 3)]),
        }
    )
    sink = target.sink(format=fmt, partition_by="region")
    prepared = run_task(sink, ctx(), data, chunk=5)
    sink.commit([prepared])

    visible = spark_visible(target)
    assert len(visible) == len(AWKWARD)
    assert all(p.count("/") == 1 and p.startswith("region=") for p in visible)
    assert rows_by_id(read_committed(target, fmt, partitioning="hive")) == rows_by_id(data)
    for path in visible:  # partition columns live in the directory names only
        assert "region" not in read_file(target, path, fmt).column_names


def test_partition_by_two_columns_with_nulls(target: Target) -> None:
    n = 40
    data = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "country": pa.array([AWKWARD[i % 4] for i in range(n)], pa.string()),
            "year": pa.array([None if i % 5 == 0 else 2020 + i % 3 for i in range(n)], pa.int64()),
            "amount": pa.array([i / 4 for i in range(n)]),
        }
    )
    sink = target.sink(partition_by=["country", "year"])
    sink.commit([run_task(sink, ctx(partition=p), data.slice(20 * p, 20)) for p in range(2)])

    schema = pa.schema([("country", pa.string()), ("year", pa.int64())])
    table = read_committed(target, partitioning=ds.partitioning(schema, flavor="hive"))
    assert rows_by_id(table) == rows_by_id(data)
    groups = {(r["country"], r["year"]) for r in data.to_pylist()}
    directories = {p.rsplit("/", 1)[0] for p in spark_visible(target)}
    assert len(directories) == len(groups)
    assert all(d.count("/") == 1 for d in directories)


def test_partition_by_keeps_row_order_within_each_directory(target: Target) -> None:
    data = pa.table({"id": list(range(30)), "k": ["a", "b", "c"] * 10})
    sink = target.sink(format="arrow", partition_by=["k"])
    sink.commit([run_task(sink, ctx(), data, chunk=7)])

    for path in spark_visible(target):
        ids = read_file(target, path, "arrow").column("id").to_pylist()
        assert ids == sorted(ids)
        assert len(ids) == 10


# -- rolling by size --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_rolling_by_target_file_size(target: Target, fmt: str) -> None:
    data = orders(3000)
    sink = target.sink(format=fmt, target_file_size=4096)
    prepared = run_task(sink, ctx(), data, chunk=200)
    files = prepared.payload["files"]
    assert len(files) > 2
    sink.commit([prepared])

    visible = spark_visible(target)
    assert visible == sorted(f["final"] for f in files)
    assert len(set(visible)) == len(visible)
    assert rows_by_id(read_committed(target, fmt)) == rows_by_id(data)
    for entry in files:
        table = read_file(target, entry["final"], fmt)
        assert table.num_rows == entry["rows"]
        assert target.fs.size(f"{target.root}/{entry['final']}") == entry["bytes"]
    for entry in sorted(files, key=lambda f: f["final"])[:-1]:
        assert entry["bytes"] >= 4096  # only the last file of a task may be short


def test_rolling_with_partition_by_rolls_per_directory(target: Target) -> None:
    data = orders(2000)
    sink = target.sink(format="csv", partition_by=["customer"], target_file_size=2048)
    prepared = run_task(sink, ctx(), data, chunk=100)
    sink.commit([prepared])

    visible = spark_visible(target)
    per_directory: dict[str, int] = {}
    for path in visible:
        directory = path.rsplit("/", 1)[0]
        per_directory[directory] = per_directory.get(directory, 0) + 1
    assert len(per_directory) == 7
    assert all(count > 1 for count in per_directory.values())
    assert rows_by_id(read_committed(target, "csv", partitioning="hive")) == rows_by_id(data)


# -- deterministic names ----------------------------------------------------------------------


def test_final_names_are_deterministic(target: Target) -> None:
    data = orders(500)
    options = {"partition_by": ["customer"], "target_file_size": 2048}
    sink = target.sink(**options)

    def names(context: TaskContext) -> list[str]:
        committable = run_task(sink, context, data, chunk=50)
        sink.abort_prepared([committable])
        return finals([committable])

    first = names(ctx(attempt=0))
    assert len(first) > len({r["customer"] for r in data.to_pylist()})  # rolled as well
    assert names(ctx(attempt=3)) == first
    # a second sink object (another process, another run) names the same way
    assert finals([run_task(target.sink(**options), ctx(attempt=1), data, chunk=50)]) == first
    for other in (ctx(query="q-2"), ctx(sink="other"), ctx(batch=1), ctx(partition=1)):
        assert set(names(other)).isdisjoint(first)


# -- bad input and bad options ------------------------------------------------------------------


def run_one_batch(sink: FilesSink, batch_id: int) -> None:
    """Run one batch of ``orders`` through the coordinator, tasks inline."""
    writer = twopc.local.foreach_batch(sink, SINK, processes=False)
    writer.write("q-1", batch_id, [orders(5)])


def test_missing_partition_column_is_a_permanent_error(target: Target) -> None:
    sink = target.sink(partition_by=["customer", "country"])
    txn = sink.begin_transaction(ctx(batch=7, partition=3))

    with pytest.raises(PermanentSinkError, match="'country'"):
        sink.invoke(txn, orders(5).to_batches()[0])
    sink.abort(txn)
    assert files_under(target) == []

    # where the error leaves the sink, the core names the sink, batch and partition
    task = Phase1Task(sink, SINK, "q-1", 7, CommitPath.DRIVER)
    report = task.run(3, 0, iter(orders(5).to_batches()))
    assert report.outcome is TaskOutcome.REJECTED and "'country'" in (report.error or "")
    with pytest.raises(twopc.BatchFailedError) as info:
        run_one_batch(sink, 7)
    error = info.value
    assert (error.sink_id, error.batch_id, error.partition) == (SINK, 7, 0)
    assert "'country'" in str(error) and f"sink {SINK!r}, batch 7, partition 0" in str(error)


@pytest.mark.parametrize(
    "second",
    [
        pa.record_batch({"id": pa.array([1], pa.int32())}),
        pa.record_batch({"id": [1], "extra": ["x"]}),
        pa.record_batch({"other": [1]}),
    ],
    ids=["type", "added-column", "renamed"],
)
def test_schema_change_inside_a_task_is_a_permanent_error(
    target: Target, second: pa.RecordBatch
) -> None:
    sink = target.sink()
    txn = sink.begin_transaction(ctx(batch=2, partition=1))
    sink.invoke(txn, pa.record_batch({"id": pa.array([1, 2], pa.int64())}))

    with pytest.raises(PermanentSinkError, match="schema changed"):
        sink.invoke(txn, second)
    sink.abort(txn)
    assert files_under(target) == []


def test_schema_change_after_a_rolled_file_is_detected(target: Target) -> None:
    sink = target.sink(format="arrow", target_file_size=1024)
    txn = sink.begin_transaction(ctx())
    sink.invoke(txn, pa.record_batch({"id": pa.array(range(1000), pa.int64())}))

    with pytest.raises(PermanentSinkError, match="schema changed"):
        sink.invoke(txn, pa.record_batch({"id": pa.array(["x"], pa.string())}))
    sink.abort(txn)


def test_schema_change_in_another_partition_directory_is_detected(target: Target) -> None:
    sink = target.sink(partition_by=["k"])
    txn = sink.begin_transaction(ctx())
    sink.invoke(txn, pa.record_batch({"id": [1], "k": ["a"]}))

    with pytest.raises(PermanentSinkError, match="schema changed"):
        sink.invoke(txn, pa.record_batch({"id": ["text"], "k": ["b"]}))
    sink.abort(txn)


def test_schema_change_of_a_partition_column_is_detected(target: Target) -> None:
    sink = target.sink(partition_by=["k"])
    txn = sink.begin_transaction(ctx())
    sink.invoke(txn, pa.record_batch({"id": [1], "k": [1]}))

    with pytest.raises(PermanentSinkError, match="schema changed"):
        sink.invoke(txn, pa.record_batch({"id": [2], "k": ["1"]}))
    sink.abort(txn)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"path": "", "format": "parquet"}, "path"),
        ({"path": None}, "path"),
        ({"format": "xml"}, "'xml'"),
        ({"format": "orc", "write_path": "python"}, "Spark's own writer only"),
        ({"write_path": "jvm"}, "write_path"),
        ({"spark_options": {"maxRecordsPerFile": 10}, "write_path": "python"}, "spark_options"),
        ({"spark_options": {"x": [1]}}, "spark_options"),
        ({"format": "arrow", "write_path": "spark"}, "'arrow' is not one"),
        ({"commit_by": "complete_upload", "write_path": "spark"}, "multipart"),
        ({"write_options": {"row_group_size": 10}, "write_path": "spark"}, "row_group_size"),
        ({"target_file_size": 4096, "write_path": "spark"}, "maxRecordsPerFile"),
        ({"format": "PARQUET"}, "'PARQUET'"),
        ({"target_file_size": 10}, "target_file_size"),
        ({"target_file_size": 0}, "target_file_size"),
        ({"partition_by": ["ok", ""]}, "partition_by"),
        ({"partition_by": [1]}, "partition_by"),
    ],
)
def test_bad_options_are_configuration_errors(
    tmp_path: Any, options: dict[str, Any], fragment: str
) -> None:
    kwargs = {"path": str(tmp_path), **options}
    with pytest.raises(ConfigurationError, match=fragment):
        FilesSink(**kwargs)


def test_configuration_error_is_a_twopc_error() -> None:
    with pytest.raises(TwoPCError):
        FilesSink("/tmp/x", format="xml")


def test_partition_by_accepts_a_single_string(tmp_path: Any) -> None:
    assert FilesSink(str(tmp_path), partition_by="day").partition_by == ("day",)


# -- pickling and credentials ----------------------------------------------------------------


def test_sink_pickles_after_use_and_hides_secrets(local_target: Target) -> None:
    sink = FilesSink(local_target.url, storage_options={"key": "SECRET-KEY-123"})
    prepared = run_task(sink, ctx(), orders(3))
    assert sink.fs is not None  # the filesystem was created and cached

    clone = pickle.loads(pickle.dumps(sink))

    assert "SECRET-KEY-123" not in repr(sink)
    assert "SECRET-KEY-123" not in sink.describe()
    assert "SECRET-KEY-123" not in repr(clone)
    assert (clone.path, clone.format, clone.partition_by) == (sink.path, "parquet", ())
    assert clone.storage_options == {"key": "SECRET-KEY-123"}  # needed on executors
    assert clone.commit([prepared]) == [CommitOutcome.COMMITTED]  # clone has its own fs
    assert sink.commit([prepared]) == [CommitOutcome.ALREADY_COMMITTED]
    assert rows_by_id(read_committed(local_target)) == rows_by_id(orders(3))


def test_memory_sink_pickles_after_use(memory_target: Target) -> None:
    sink = memory_target.sink(format="arrow", partition_by=["customer"])
    run_task(sink, ctx(), orders(10))
    clone = pickle.loads(pickle.dumps(sink))
    assert clone.recover(SINK) == sink.recover(SINK)
    assert repr(clone) == repr(sink)


def test_default_commit_log_is_hidden_under_the_output(target: Target) -> None:
    sink = target.sink()
    location = sink.default_commit_log(SINK)
    assert location.startswith(target.url)
    relative = location[len(target.url) :].strip("/")
    assert relative.split("/")[0].startswith("_")


def test_two_runs_of_a_partition_with_one_attempt_number_stay_apart(target: Target) -> None:
    """Spark counts a task's attempts from 0 again when it re-attempts a stage (an executor
    was lost), and the old stage attempt's task may still run: two runs of partition 0 with
    attempt number 0. Named by their task attempt ids, the failing run's abort cannot take
    the files of the run the decision names (chaos campaign, seed 30161)."""
    sink = target.sink()
    task = Phase1Task(sink, SINK, "q-1", 2, CommitPath.DRIVER)
    decided = task.run(0, 0, iter(orders(5).to_batches()), attempt_id=17)
    assert decided.committable is not None

    def fetch_fails() -> Iterator[pa.RecordBatch]:
        yield from orders(5).to_batches()
        raise OSError("FetchFailed: the executor holding the shuffle blocks is gone")

    with pytest.raises(twopc.SinkError, match="FetchFailed"):
        task.run(0, 0, fetch_fails(), attempt_id=23)
    assert sink.commit([decided.committable]) == [CommitOutcome.COMMITTED]
    assert sorted(read_committed(target)["id"].to_pylist()) == sorted(orders(5)["id"].to_pylist())


def test_a_prepared_attempts_record_is_never_overwritten(target: Target) -> None:
    """``_committable.json`` is created exclusively: the same record written again (a
    retried request that had landed) is accepted; a second process preparing the same
    attempt with other files gives way with a retryable error, and its abort leaves the
    first record for recovery."""
    sink = target.sink()
    first, second = sink.begin_transaction(ctx()), sink.begin_transaction(ctx())
    sink.invoke(first, orders(5).to_batches()[0])
    sink.invoke(second, orders(7).to_batches()[0])
    prepared = sink.pre_commit(first)
    assert sink.pre_commit(first) == prepared  # written again: the same bytes, accepted
    with pytest.raises(twopc.TransientSinkError, match="prepared the same task attempt"):
        sink.pre_commit(second)
    sink.abort(second)
    assert sink.recover(SINK) == [prepared]
