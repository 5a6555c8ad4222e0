"""The files backend against a real S3 API (S3Proxy from ``scripts/services``, through s3fs
as against AWS): batches commit, a failed batch leaves nothing, and nothing staged stays
behind; read back with pyarrow's own S3 filesystem, not through twopc or fsspec."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import s3fs
from pyarrow import fs as pafs

import twopc
from tests.harness.service_fixtures import S3Store
from twopc import CommitLog, FaultPlan, TaskContext
from twopc._coordination.coordinator import Coordinator
from twopc.local import LocalEngine
from twopc_files import FilesSink
from twopc_files._layout import attempt_dir
from twopc_files._schemas import data_schema, schema_file

pytestmark = pytest.mark.integration

QUERY = "query-s3"


def _arrow_s3(store: S3Store) -> pafs.S3FileSystem:
    host = store.endpoint_url.removeprefix("http://")
    return pafs.S3FileSystem(
        access_key=store.access_key_id,
        secret_key=store.secret_access_key,
        endpoint_override=host,
        scheme="http",
        region="us-east-1",
    )


def _ids(batch_id: int) -> LocalEngine:
    return LocalEngine(
        [
            pa.table({"id": pa.array(range(batch_id * 100 + p * 10, batch_id * 100 + p * 10 + 10))})
            for p in range(2)
        ],
        processes=False,
    )


def _visible(store: S3Store, prefix: str) -> list[int]:
    """Every id a pyarrow reader of the output sees (hidden ``_``/``.`` names skipped)."""
    s3 = _arrow_s3(store)
    selector = pafs.FileSelector(f"{store.bucket}/{prefix}", recursive=True, allow_not_found=True)
    files = [
        info.path
        for info in s3.get_file_info(selector)
        if info.type == pafs.FileType.File
        and not any(part.startswith(("_", ".")) for part in info.path.split("/")[2:])
    ]
    if not files:
        return []
    table = ds.dataset(files, filesystem=s3, format="parquet").to_table()
    return sorted(table.column("id").to_pylist())


def _all_objects(store: S3Store, prefix: str) -> list[str]:
    s3 = _arrow_s3(store)
    selector = pafs.FileSelector(f"{store.bucket}/{prefix}", recursive=True, allow_not_found=True)
    return sorted(i.path for i in s3.get_file_info(selector) if i.type == pafs.FileType.File)


def _open_uploads(store: S3Store, prefix: str) -> list[str]:
    """Multipart uploads under ``prefix`` that are neither completed nor aborted."""
    s3 = s3fs.S3FileSystem(**store.storage_options())
    answer = s3.call_s3("list_multipart_uploads", Bucket=store.bucket, Prefix=f"{prefix}/")
    return sorted(u["Key"] for u in answer.get("Uploads") or [])


@pytest.mark.parametrize("commit_by", ["move", "complete_upload"])
def test_files_on_s3_commit_once_and_a_failed_batch_leaves_nothing(
    s3_store: S3Store, tmp_path: Path, commit_by: str
) -> None:
    prefix = f"orders-{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = s3_store.storage_options()

    def coordinator(**extra: Any) -> Coordinator:
        sink = twopc.create_sink(
            "files",
            path=s3_store.url(prefix),
            format="parquet",
            storage_options=options,
            commit_by=commit_by,
        )
        return Coordinator(sink, "orders", CommitLog(str(tmp_path / "log")), **extra)

    assert coordinator().run_batch(QUERY, 0, _ids(0)).status == "committed"
    assert _visible(s3_store, prefix) == list(range(20))

    failing = coordinator(faults=FaultPlan.parse("before_pre_commit:raise@batch=1,partition=1"))
    with pytest.raises(twopc.TwoPCError):
        failing.run_batch(QUERY, 1, _ids(1))
    assert _visible(s3_store, prefix) == list(range(20))

    assert coordinator().run_batch(QUERY, 1, _ids(1)).status == "committed"
    assert _visible(s3_store, prefix) == list(range(20)) + list(range(100, 120))
    # the replay of a committed batch writes nothing
    assert coordinator().run_batch(QUERY, 1, _ids(1)).status == "skipped"
    assert _visible(s3_store, prefix) == list(range(20)) + list(range(100, 120))
    # nothing staged is left behind, no upload stays open
    assert [o for o in _all_objects(s3_store, prefix) if "/_twopc_staging/" in o] == []
    assert _open_uploads(s3_store, prefix) == []


def _sink(
    store: S3Store, prefix: str, commit_by: str = "complete_upload", **options: Any
) -> twopc.Sink[Any]:
    return twopc.create_sink(
        "files",
        path=store.url(prefix),
        format="parquet",
        storage_options=store.storage_options(),
        commit_by=commit_by,
        **options,
    )


def _decide_without_completing(
    store: S3Store, prefix: str, log: str, engine: LocalEngine, commit_by: str = "complete_upload"
) -> None:
    """Batch 0 decided, then the driver stops before its commit: its uploads stay open
    (``move``: its files stay staged)."""
    stopped = Coordinator(
        _sink(store, prefix, commit_by),
        "orders",
        CommitLog(log),
        faults=FaultPlan.parse("after_decision:raise@batch=0"),
    )
    with pytest.raises(twopc.TwoPCError):
        stopped.run_batch(QUERY, 0, engine)


def test_uploads_stay_invisible_until_the_decided_batch_is_completed(
    s3_store: S3Store, tmp_path: Path
) -> None:
    """The driver stops after the decision: every file is an open upload at its final
    name, invisible, and nothing was written under a final name; a new coordinator's
    recovery completes them. A big file is several parts."""
    prefix = f"mp-{uuid.uuid4().hex[:8]}"
    log = str(tmp_path / "log")
    rng = np.random.default_rng(7)
    big = pa.table({"id": pa.array(range(3_000_000)), "noise": rng.random(3_000_000)})
    engine = LocalEngine(
        [big, pa.table({"id": pa.array([-1, -2]), "noise": [0.5, 0.5]})], processes=False
    )
    _decide_without_completing(s3_store, prefix, log, engine)
    assert _visible(s3_store, prefix) == []
    assert [o for o in _all_objects(s3_store, prefix) if "/_twopc_staging/" not in o] == []
    uploads = _open_uploads(s3_store, prefix)
    assert len(uploads) == 2 and all(u.endswith(".parquet") for u in uploads)

    stats = Coordinator(_sink(s3_store, prefix), "orders", CommitLog(log)).recover()
    assert stats.committed == 2
    seen = _visible(s3_store, prefix)
    assert len(seen) == 3_000_002 and seen[:2] == [-2, -1]
    assert _open_uploads(s3_store, prefix) == []
    # completing again (a crash between two completions, then recovery) changes nothing
    decision = CommitLog(log).decision(QUERY, 0)
    assert decision is not None
    sink = _sink(s3_store, prefix)
    assert isinstance(sink, twopc.CommitsOnDriver)
    # (S3 answers a completed upload's second completion with success or NoSuchUpload,
    # depending on how long ago; either way nothing changes)
    sink.commit(decision.committables)
    assert len(_visible(s3_store, prefix)) == 3_000_002


def test_a_killed_task_leaves_an_open_upload_that_the_sweep_aborts(
    s3_store: S3Store, tmp_path: Path
) -> None:
    """A task process SIGKILLed mid-write cannot abort its upload; the batch fails, and
    the coordinator's clean-up finds the upload (listing the prefix) and aborts it, while
    an upload of another writer under the same prefix is left alone."""
    prefix = f"mpk-{uuid.uuid4().hex[:8]}"
    foreign = s3fs.S3FileSystem(**s3_store.storage_options())
    other = foreign.call_s3(
        "create_multipart_upload", Bucket=s3_store.bucket, Key=f"{prefix}/someone-else.bin"
    )
    coordinator = Coordinator(
        _sink(s3_store, prefix),
        "orders",
        CommitLog(str(tmp_path / "log")),
        faults=FaultPlan.parse("before_pre_commit:kill@batch=0,partition=1"),
    )
    engine = LocalEngine([pa.table({"id": pa.array(range(i * 10, i * 10 + 10))}) for i in range(2)])
    with pytest.raises(twopc.TwoPCError):
        coordinator.run_batch(QUERY, 0, engine)
    assert _open_uploads(s3_store, prefix) == [f"{prefix}/someone-else.bin"]
    assert _visible(s3_store, prefix) == []
    foreign.call_s3(
        "abort_multipart_upload",
        Bucket=s3_store.bucket,
        Key=f"{prefix}/someone-else.bin",
        UploadId=other["UploadId"],
    )


def test_a_decided_upload_that_is_gone_fails_the_commit_loudly(
    s3_store: S3Store, tmp_path: Path
) -> None:
    """An operator (or a lifecycle rule) aborted an upload the decision names: the commit
    fails with an error naming the upload and the file, never succeeds without the rows."""
    prefix = f"mpg-{uuid.uuid4().hex[:8]}"
    log = str(tmp_path / "log")
    engine = LocalEngine([pa.table({"id": pa.array(range(5))})], processes=False)
    _decide_without_completing(s3_store, prefix, log, engine)
    s3 = s3fs.S3FileSystem(**s3_store.storage_options())
    (key,) = _open_uploads(s3_store, prefix)
    answer = s3.call_s3("list_multipart_uploads", Bucket=s3_store.bucket, Prefix=f"{prefix}/")
    s3.call_s3(
        "abort_multipart_upload",
        Bucket=s3_store.bucket,
        Key=key,
        UploadId=answer["Uploads"][0]["UploadId"],
    )
    with pytest.raises(twopc.CommitError) as failed:
        Coordinator(_sink(s3_store, prefix), "orders", CommitLog(log)).recover()
    text = str(failed.value)
    assert "multipart upload" in text and key.rsplit("/", 1)[-1] in text, text
    assert _visible(s3_store, prefix) == []


def test_a_decision_on_s3_is_never_overwritten_by_a_second_writer(s3_store: S3Store) -> None:
    """The commit log on the S3 API writes decisions with a conditional PUT
    (``If-None-Match: *``): a second writer's other decision for the batch is refused."""
    from tests.harness.decisions import decision

    log = CommitLog(s3_store.url(f"log-{uuid.uuid4().hex[:8]}"), s3_store.storage_options())
    log.record_decision(decision("q-1", 0, partitions=1))
    with pytest.raises(twopc.ConfigurationError, match="decided by another writer"):
        log.record_decision(decision("q-1", 0, partitions=2))
    read = log.decision("q-1", 0)
    assert read is not None and len(read.committables) == 1


DATA_WRITES = {"CopyObject", "UploadPartCopy", "PutObject", "UploadPart"}
"""S3 operations that copy or send object bytes."""


@pytest.mark.parametrize("commit_by", ["complete_upload", "move"])
def test_the_commit_on_s3_copies_nothing(s3_store: S3Store, tmp_path: Path, commit_by: str) -> None:
    """Every S3 request the driver's commit sends, counted by botocore's own event hook
    on the client s3fs uses: completing uploads copies and sends no bytes (one
    ``CompleteMultipartUpload`` per file); the move path, for contrast, copies each file."""
    prefix = f"mpc-{uuid.uuid4().hex[:8]}"
    log = str(tmp_path / "log")
    engine = LocalEngine(
        [pa.table({"id": pa.array(range(p * 100, p * 100 + 50))}) for p in range(3)],
        processes=False,
    )
    _decide_without_completing(s3_store, prefix, log, engine, commit_by)
    decision = CommitLog(log).decision(QUERY, 0)
    assert decision is not None and _visible(s3_store, prefix) == []
    sink = _sink(s3_store, prefix, commit_by)
    assert isinstance(sink, twopc.CommitsOnDriver)
    client = sink.fs.s3  # type: ignore[attr-defined]
    sent: list[str] = []
    put: list[str] = []

    def count(event_name: str, **_: Any) -> None:
        sent.append(event_name.rsplit(".", 1)[-1])

    def record_put(params: dict[str, Any], **_: Any) -> None:
        put.append(str(params.get("Key")))

    client.meta.events.register("before-call.s3", count)
    client.meta.events.register("before-parameter-build.s3.PutObject", record_put)
    try:
        sink.commit(decision.committables)
    finally:
        client.meta.events.unregister("before-call.s3", count)
        client.meta.events.unregister("before-parameter-build.s3.PutObject", record_put)

    assert len(_visible(s3_store, prefix)) == 150
    # the only object written: the schema record of the output's first batch (a few
    # hundred bytes), before any file becomes visible
    assert put == [f"{prefix}/_twopc_schema"]
    if commit_by == "complete_upload":
        assert [name for name in sent if name in DATA_WRITES] == ["PutObject"]
        assert sent.count("CompleteMultipartUpload") == 3
    else:
        assert sent.count("CopyObject") + sent.count("UploadPartCopy") == 3


def test_a_committable_on_s3_is_never_overwritten_by_a_second_run_of_its_attempt(
    s3_store: S3Store,
) -> None:
    """Two processes run the same task attempt: the second to prepare meets the first's
    ``_committable.json`` (a conditional PUT, ``If-None-Match: *``), gives way and aborts
    its own uploads; the first's record stays, and committing it shows its rows once."""
    prefix = f"mpx-{uuid.uuid4().hex[:8]}"
    sink = _sink(s3_store, prefix)
    assert isinstance(sink, twopc.CommitsOnDriver)
    context = twopc.TaskContext("orders", QUERY, 0, 0, 0, run_id="run-1")
    first, second = sink.begin_transaction(context), sink.begin_transaction(context)
    sink.invoke(first, pa.record_batch({"id": pa.array(range(5))}))
    sink.invoke(second, pa.record_batch({"id": pa.array(range(7))}))
    prepared = sink.pre_commit(first)
    with pytest.raises(twopc.TransientSinkError, match="prepared the same task attempt"):
        sink.pre_commit(second)
    sink.abort(second)
    assert sink.recover("orders") == [prepared]
    assert len(_open_uploads(s3_store, prefix)) == 1  # the first's; the second's aborted
    sink.commit([prepared])
    assert _visible(s3_store, prefix) == list(range(5))
    assert _open_uploads(s3_store, prefix) == []


@pytest.mark.parametrize("commit_by", ["complete_upload", "move"])
def test_batches_whose_columns_readers_cannot_merge_are_refused_on_s3(
    s3_store: S3Store, tmp_path: Path, commit_by: str
) -> None:
    """Partitions of a batch that disagree on a column's type, then a batch that disagrees
    with what the output holds: refused, nothing of them visible, no upload left open; a
    batch that adds a column commits, and pyarrow reads every file with the unified
    schema."""
    prefix = f"schema-{uuid.uuid4().hex[:8]}"

    def run(batch: int, *parts: pa.Table) -> Any:
        coordinator = Coordinator(_sink(s3_store, prefix, commit_by), "orders", CommitLog(log))
        return coordinator.run_batch(QUERY, batch, LocalEngine(list(parts), processes=False))

    log = str(tmp_path / "log")
    ids = pa.array([1, 2])
    assert run(0, pa.table({"id": ids, "n": pa.array([1, 2])})).status == "committed"
    with pytest.raises(twopc.BatchFailedError) as split:
        run(1, pa.table({"id": ids, "m": ["a", "b"]}), pa.table({"id": ids, "m": [1.5, 2.5]}))
    assert "column 'm' is double in this partition but string in partition 0" in str(split.value)
    with pytest.raises(twopc.BatchFailedError) as held:
        run(1, pa.table({"id": ids, "n": ["a", "b"]}))
    assert "column 'n' is string in this batch but int64 in what the output already holds" in (
        str(held.value)
    )
    assert _visible(s3_store, prefix) == [1, 2]
    assert _open_uploads(s3_store, prefix) == []

    assert run(1, pa.table({"id": pa.array([3]), "m": ["c"]})).status == "committed"
    s3 = _arrow_s3(s3_store)
    files = [o for o in _all_objects(s3_store, prefix) if o.endswith(".parquet") and "/_" not in o]
    schema = pa.unify_schemas([ds.dataset(f, filesystem=s3).schema for f in files])
    table = ds.dataset(files, filesystem=s3, format="parquet", schema=schema).to_table()
    assert sorted(table.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "n": 1, "m": None},
        {"id": 2, "n": 2, "m": None},
        {"id": 3, "n": None, "m": "c"},
    ]


def test_a_store_temporary_file_beside_a_schema_file_is_not_read_as_one(
    s3_store: S3Store,
) -> None:
    """S3Proxy's filesystem store lists an object's temporary file (``<name>-<uuid>``)
    while another task writes it, then renames it away: a task that checks the batch's
    schemas reads only schema files, so it prepares."""
    prefix = f"tmpname-{uuid.uuid4().hex[:8]}"
    sink = cast(FilesSink, _sink(s3_store, prefix))
    table = pa.table({"id": pa.array([1, 2])})
    schema = data_schema(table.schema, [])
    other_attempt = attempt_dir("orders", QUERY, 0, 7, 0)
    planted = f"{other_attempt}/{schema_file(schema)}-{uuid.uuid4()}"
    s3 = s3fs.S3FileSystem(**s3_store.storage_options())
    s3.pipe_file(f"{s3_store.bucket}/{prefix}/{planted}", b"half of a schema")

    txn = sink.begin_transaction(TaskContext("orders", QUERY, 0, 0, 1))
    sink.invoke(txn, table.to_batches()[0])
    committable = sink.pre_commit(txn)
    sink.commit([committable])
    assert _visible(s3_store, prefix) == [1, 2]
