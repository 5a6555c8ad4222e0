"""The sink contract's data types and the error tree."""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

from twopc import (
    Capabilities,
    CommitOutcome,
    Committable,
    RecoveryScope,
    Sink,
    TaskContext,
    errors,
)
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
    with pytest.raises(ValueError, match="unsupported committable format"):
        Committable.from_json(data)
    with pytest.raises(ValueError, match="unsupported committable format"):
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


def test_capabilities_reject_commit_on_driver_and_in_task() -> None:
    with pytest.raises(ValueError, match="either"):
        Capabilities(global_commit=True, commit_in_task=True)
    in_task = Capabilities(global_commit=False, commit_in_task=True)
    assert in_task.commit_in_task
    default = Capabilities()
    assert (default.global_commit, default.commit_in_task, default.modes) == (
        True,
        False,
        ("append",),
    )


def test_value_types_are_immutable_and_hashable() -> None:
    ctx = TaskContext("s", "q", 0, 0)
    with pytest.raises(AttributeError):
        ctx.batch_id = 1  # type: ignore[misc]
    assert len({Capabilities(), Capabilities()}) == 1
    assert hash(ctx) == hash(TaskContext("s", "q", 0, 0))


def test_commit_outcomes() -> None:
    assert {o.value for o in CommitOutcome} == {"committed", "already_committed"}


class _Minimal(Sink[list[pa.RecordBatch]]):
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


def test_sink_is_abstract() -> None:
    with pytest.raises(TypeError, match="abstract"):
        Sink()  # type: ignore[abstract]

    class Partial(Sink[Any]):
        def begin_transaction(self, ctx: TaskContext) -> Any:
            return None

    with pytest.raises(TypeError, match="abstract"):
        Partial()  # type: ignore[abstract]


def test_sink_defaults_for_optional_methods() -> None:
    sink = _Minimal()
    assert sink.sweep("s") == 0
    assert sink.is_committed(RecoveryScope("s", "q"), 0) is False
    assert sink.default_commit_log("s") is None
    assert sink.describe() == "custom"
    assert sink.capabilities == Capabilities()
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
