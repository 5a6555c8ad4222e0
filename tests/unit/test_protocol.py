"""The sink contract's data types and the error tree."""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from twopc import (
    CommitOutcome,
    CommitsInTask,
    CommitsOnDriver,
    Committable,
    Footprint,
    KeepsMarkers,
    Payload,
    RecoveryScope,
    Sink,
    TaskContext,
    errors,
)
from twopc._contract.paths import CommitPath
from twopc.protocol import COMMITTABLE_FORMAT_VERSION

pytestmark = pytest.mark.unit


def sample() -> Committable:
    return Committable(
        sink_id="orders",
        query_id="5f0c-query",
        batch_id=12,
        partition=3,
        attempt=1,
        payload={"staging": "x/y", "files": [{"final": "a.parquet", "rows": 7}], "ü": None},
        version=2,
    )


def test_committable_json_round_trip() -> None:
    original = sample()
    data = original.to_json()
    assert data["format"] == COMMITTABLE_FORMAT_VERSION
    assert Committable.from_json(data) == original
    assert Committable.from_json(json.loads(json.dumps(data))) == original
    assert Committable.loads(original.dumps()) == original


def test_dumps_is_canonical() -> None:
    a = Committable("s", "q", 1, 0, 0, payload={"b": 1, "a": 2})
    b = Committable("s", "q", 1, 0, 0, payload={"a": 2, "b": 1})
    assert a.dumps() == b.dumps()
    assert " " not in a.dumps()


def test_to_json_copies_the_payload() -> None:
    committable = Committable("s", "q", 1, 0, 0, payload={"files": []})
    data = committable.to_json()
    data["payload"]["extra"] = True
    assert "extra" not in committable.payload


@pytest.mark.parametrize("fmt", [None, 0, 2, "1"])
def test_unknown_committable_format_is_rejected(fmt: object) -> None:
    data = sample().to_json()
    if fmt is None:
        del data["format"]
    else:
        data["format"] = fmt
    with pytest.raises(errors.UnsupportedFormatError, match="committable format"):
        Committable.from_json(data)
    with pytest.raises(errors.UnsupportedFormatError, match="committable format"):
        Committable.loads(json.dumps(data))
    with pytest.raises(errors.UnsupportedFormatError, match="not JSON"):
        Committable.loads("{no json")


@pytest.mark.parametrize(
    "text",
    ["[1, 2]", '"text"', "3", '{"format": 1, "sink_id": "s"}', '{"format": 1, "payload": 3}'],
)
def test_what_is_not_a_committable_is_refused_not_misread(text: str) -> None:
    data = json.loads(text)
    if isinstance(data, dict) and "payload" in data:
        data = {**sample().to_json(), "payload": data["payload"]}
    with pytest.raises(errors.UnsupportedFormatError):
        Committable.from_json(data)
    with pytest.raises(errors.UnsupportedFormatError):
        Committable.loads(json.dumps(data))


def test_defaults_of_older_committables() -> None:
    data = sample().to_json()
    del data["payload"]
    del data["version"]
    read = Committable.from_json(data)
    assert read.payload == {}
    assert read.version == 1


def test_scopes() -> None:
    ctx = TaskContext("orders", "q", 3, 1, attempt=2, run_id="r")
    assert ctx.scope == RecoveryScope("orders", "q")
    assert sample().scope == RecoveryScope("orders", "5f0c-query")


@dataclass(frozen=True)
class _Files(Payload):
    version: ClassVar[int] = 2
    reads: ClassVar[tuple[int, ...]] = (1, 2)

    staging: str
    files: tuple[str, ...]

    @classmethod
    def from_json(cls, data: Any, version: int) -> _Files:
        if version == 1:  # version 1 named the directory "dir"
            return cls(data["dir"], tuple(data["files"]))
        return cls(data["staging"], tuple(data["files"]))


def test_a_payload_travels_as_json_and_reads_back_typed() -> None:
    ctx = TaskContext("orders", "q", 3, 1, attempt=2)
    committable = Committable.for_task(ctx, _Files("x/y", ("a.parquet",)))
    assert committable.version == 2
    assert committable.payload == {"staging": "x/y", "files": ["a.parquet"]}  # JSON's own
    assert Committable.loads(committable.dumps()) == committable
    assert _Files.of(committable) == _Files("x/y", ("a.parquet",))


def test_a_payload_reads_the_older_versions_it_lists_and_refuses_others() -> None:
    old = Committable("orders", "q", 3, 1, 0, payload={"dir": "d", "files": []}, version=1)
    assert _Files.of(old) == _Files("d", ())
    newer = Committable("orders", "q", 3, 1, 0, payload={"staging": "d", "files": []}, version=3)
    with pytest.raises(errors.UnsupportedFormatError) as refused:
        _Files.of(newer)
    refusal = str(refused.value)
    assert "_Files version 3 cannot be read by this version of tests" in refusal
    assert "another version of tests wrote it" in refusal  # the package's version matters
    assert refusal.count("batch 3") == 1  # where: said once, by the error's own prefix
    assert (refused.value.sink_id, refused.value.batch_id, refused.value.partition) == (
        "orders",
        3,
        1,
    )
    broken = Committable("orders", "q", 3, 1, 0, payload={"files": []}, version=2)
    with pytest.raises(errors.UnsupportedFormatError, match="is not a _Files"):
        _Files.of(broken)


def test_value_types_are_immutable_and_hashable() -> None:
    ctx = TaskContext("s", "q", 0, 0)
    with pytest.raises(AttributeError):
        ctx.batch_id = 1  # type: ignore[misc]
    assert len({RecoveryScope("s", "q"), RecoveryScope("s", "q")}) == 1
    assert hash(ctx) == hash(TaskContext("s", "q", 0, 0))


def test_commit_outcomes() -> None:
    assert {o.value for o in CommitOutcome} == {"committed", "already_committed"}


class _Minimal(Sink[list[pa.RecordBatch]], CommitsOnDriver):
    def begin_transaction(self, ctx: TaskContext) -> list[pa.RecordBatch]:
        return []

    def invoke(self, txn: list[pa.RecordBatch], batch: pa.RecordBatch) -> None:
        txn.append(batch)

    def pre_commit(self, txn: list[pa.RecordBatch]) -> Committable:
        return Committable("s", "q", 0, 0, 0, payload={"rows": sum(b.num_rows for b in txn)})

    def abort(self, txn: list[pa.RecordBatch]) -> None:
        txn.clear()

    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        return [CommitOutcome.COMMITTED] * len(committables)

    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        return None

    def recover(self, sink_id: str) -> list[Committable]:
        return []


class _InTask(Sink[list[int]], CommitsInTask[list[int]]):
    def begin_transaction(self, ctx: TaskContext) -> list[int]:
        return []

    def invoke(self, txn: list[int], batch: pa.RecordBatch) -> None: ...

    def pre_commit(self, txn: list[int]) -> Committable:
        return Committable("s", "q", 0, 0, 0)

    def abort(self, txn: list[int]) -> None: ...

    def commit_in_task(self, txn: list[int]) -> CommitOutcome:
        return CommitOutcome.COMMITTED

    def committed_partitions(
        self, scope: RecoveryScope, batch_id: int, footprint: Footprint
    ) -> set[int] | None:
        return set()


def test_sink_is_abstract() -> None:
    with pytest.raises(TypeError, match="abstract"):
        Sink()  # type: ignore[abstract]

    class Partial(Sink[Any]):
        def begin_transaction(self, ctx: TaskContext) -> Any:
            return None

    with pytest.raises(TypeError, match="abstract"):
        Partial()  # type: ignore[abstract]

    class NoMarkers(Sink[Any], CommitsInTask[Any]):
        begin_transaction = invoke = pre_commit = abort = commit_in_task = _Minimal.abort

    with pytest.raises(TypeError, match="committed_partitions"):
        NoMarkers()  # type: ignore[abstract]


def test_the_role_decides_the_commit_path() -> None:
    assert CommitPath.of(_Minimal()) is CommitPath.DRIVER
    assert CommitPath.of(_InTask()) is CommitPath.TASK
    assert isinstance(_InTask(), KeepsMarkers)
    assert not isinstance(_Minimal(), KeepsMarkers)


def test_sink_defaults_for_optional_methods() -> None:
    sink = _Minimal()
    assert sink.sweep("s") == 0
    assert sink.naming() == {}
    assert sink.partition_columns() == ()
    assert sink.default_commit_log("s") is None
    assert sink.describe() == "custom"
    assert sink.single_task is False
    assert "shows no pending work" in sink.inspect("s").notes[0]
    assert _InTask().sweep_lingering("s", Footprint({}, 3)) == 0
    txn = sink.begin_transaction(TaskContext("s", "q", 0, 0))
    sink.invoke(txn, pa.record_batch({"a": [1, 2]}))
    assert sink.pre_commit(txn).payload == {"rows": 2}


# -- errors -----------------------------------------------------------------------------------

ERROR_CLASSES = [getattr(errors, name) for name in errors.__all__]


def test_error_tree() -> None:
    assert all(issubclass(cls, errors.TwoPCError) for cls in ERROR_CLASSES)
    assert issubclass(errors.CommitStateUnknownError, errors.CommitError)
    assert issubclass(errors.CommitError, errors.SinkError)
    assert issubclass(errors.CheckpointMismatchError, errors.ConfigurationError)
    for cls in (
        errors.BackendNotFoundError,
        errors.BackendNotInstalledError,
        errors.BackendUnavailableError,
    ):
        assert issubclass(cls, errors.PluginError)
    retryable = {cls for cls in ERROR_CLASSES if cls("x").retryable}
    assert retryable == {errors.TransientSinkError}


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_errors_pickle_with_their_location(cls: type[errors.TwoPCError]) -> None:
    error = cls("schema mismatch in column 'x'", sink_id="orders", batch_id=7, partition=3)
    copy = pickle.loads(pickle.dumps(error))

    assert type(copy) is cls
    assert (copy.sink_id, copy.batch_id, copy.partition) == ("orders", 7, 3)
    assert copy.cause_message == "schema mismatch in column 'x'"
    assert str(copy) == str(error)
    assert str(error) == "sink 'orders', batch 7, partition 3: schema mismatch in column 'x'"
    assert copy.retryable == error.retryable


def test_error_message_names_only_what_is_known() -> None:
    assert str(errors.SinkError("boom")) == "boom"
    assert str(errors.SinkError("boom", batch_id=0)) == "batch 0: boom"
    assert (
        str(errors.CommitError("boom", sink_id="s", partition=0)) == "sink 's', partition 0: boom"
    )
    copy = pickle.loads(pickle.dumps(errors.SinkError("boom", batch_id=0)))
    assert (copy.sink_id, copy.batch_id, copy.partition) == (None, 0, None)


def test_the_core_stamps_a_location_once_and_keeps_what_a_sink_set() -> None:
    error = errors.TransientSinkError("connection reset")
    assert error.at(sink_id="orders", batch_id=4, partition=1) is error
    assert str(error) == "sink 'orders', batch 4, partition 1: connection reset"
    assert error.retryable
    own = errors.PermanentSinkError("bad row", partition=7)
    own.at(sink_id="orders", batch_id=4, partition=1)
    assert (own.partition, str(own)) == (7, "sink 'orders', batch 4, partition 7: bad row")
