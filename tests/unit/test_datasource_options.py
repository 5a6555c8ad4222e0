"""``format("twopc")``'s options resolved on the driver (``_Setup.from_options``), the query
id read from a streaming checkpoint, and which sinks batch writes accept.

No Spark session and no services: pyspark is only imported, the files backend writes to
``tmp_path`` (and creating its sink touches nothing), and the in-memory reference sinks stand
in for backends that commit in the task.
"""

from __future__ import annotations

import json
import pickle
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from twopc import ConfigurationError
from twopc._engines.batch_write import BATCH_ID, batch_query_id, check_batch_sink, validate_write_id
from twopc._engines.checkpoint import query_id_of

try:
    from twopc._engines.datasource import TwopcDataSource, _Setup
except ImportError as exc:  # PySpark 4.0 (scripts/lowest-versions): no Arrow stream writers
    _NO_DATASOURCE: str | None = f'format("twopc") needs PySpark 4.1 or newer: {exc}'
else:
    _NO_DATASOURCE = None
from twopc.errors import BackendNotFoundError
from twopc.storage import join
from twopc.testing._memory import MemoryDriverSink, MemoryTaskSink
from twopc_files.sink import FilesSink

pytestmark = pytest.mark.unit
# The batch-write checks (write_batch's too) and query_id_of run on PySpark 4.0 as well.
needs_datasource = pytest.mark.skipif(_NO_DATASOURCE is not None, reason=_NO_DATASOURCE or "")

QUERY_ID = "8f14e45f-ceea-467f-a0e6-1f2a3b4c5d6e"


def _checkpoint(tmp_path: Path, query_id: str | None = QUERY_ID, text: str | None = None) -> str:
    """A checkpoint directory whose ``metadata`` holds ``{"id": query_id}`` (or ``text``)."""
    root = tmp_path / "checkpoint"
    root.mkdir(exist_ok=True)
    if text is None and query_id is not None:
        text = json.dumps({"id": query_id}) + "\n"
    if text is not None:
        (root / "metadata").write_text(text)
    return str(root)


def _files(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"sink": "files", "sink_id": "orders", "path": str(tmp_path / "out"), **extra}


# -- the backend and the sink id -------------------------------------------------------------


@needs_datasource
@pytest.mark.parametrize("streaming", [True, False])
def test_no_sink_option(tmp_path: Path, streaming: bool) -> None:
    options = _files(tmp_path)
    del options["sink"]
    with pytest.raises(ConfigurationError) as info:
        _Setup.from_options(options, streaming=streaming)
    assert '.option("sink", "<backend>")' in str(info.value)
    assert '.option("sink_id"' in str(info.value)


@needs_datasource
def test_empty_sink_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r'\.option\("sink", '):
        _Setup.from_options(_files(tmp_path, sink=""), streaming=True)


@needs_datasource
def test_unknown_backend(tmp_path: Path) -> None:
    with pytest.raises(BackendNotFoundError, match="no twopc backend named 'nope'"):
        _Setup.from_options(_files(tmp_path, sink="nope"), streaming=True)


@needs_datasource
@pytest.mark.parametrize("sink_id", ["", "-orders", "a/b", "with space", "x" * 65, "ü"])
def test_invalid_sink_id(tmp_path: Path, sink_id: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid sink_id"):
        _Setup.from_options(_files(tmp_path, sink_id=sink_id), streaming=True)


@needs_datasource
def test_missing_sink_id(tmp_path: Path) -> None:
    options = _files(tmp_path)
    del options["sink_id"]
    with pytest.raises(ConfigurationError, match="invalid sink_id ''"):
        _Setup.from_options(options, streaming=True)


@needs_datasource
def test_own_option_keys_any_case(tmp_path: Path) -> None:
    options = {
        "SINK": "files",
        "Sink_Id": "orders",
        "PATH": str(tmp_path / "out"),
        "CheckpointLocation": _checkpoint(tmp_path),
    }
    setup = _Setup.from_options(options, streaming=True)
    assert setup.sink_id == "orders"
    assert setup.query_id == QUERY_ID


# -- streaming -------------------------------------------------------------------------------


@needs_datasource
def test_streaming_reads_the_query_id_from_the_checkpoint(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path)
    setup = _Setup.from_options(_files(tmp_path, checkpointLocation=checkpoint), streaming=True)
    assert setup.query_id == QUERY_ID
    assert setup.checkpoint == checkpoint
    assert setup.batch_id is None
    assert setup.sink_id == "orders"
    assert isinstance(setup.sink, FilesSink)
    assert setup.sink.path == str(tmp_path / "out")


@needs_datasource
def test_streaming_files_commit_log_defaults_next_to_the_data(tmp_path: Path) -> None:
    setup = _Setup.from_options(
        _files(tmp_path, checkpointLocation=_checkpoint(tmp_path)), streaming=True
    )
    assert setup.commit_log == setup.sink.default_commit_log("orders")
    assert setup.commit_log == join(str(tmp_path / "out"), "_twopc", "orders")
    assert not setup.commit_log_options  # the sink's own storage options: none


@needs_datasource
def test_explicit_commit_log_wins(tmp_path: Path) -> None:
    log = str(tmp_path / "log")
    setup = _Setup.from_options(
        _files(tmp_path, checkpointLocation=_checkpoint(tmp_path), commit_log=log),
        streaming=True,
    )
    assert setup.commit_log == log
    assert setup.commit_log_options is None


@needs_datasource
def test_commit_log_options_json_object(tmp_path: Path) -> None:
    log = str(tmp_path / "log")
    setup = _Setup.from_options(
        _files(tmp_path, commit_log=log, commit_log_options='{"auto_mkdir": true}'),
        streaming=True,
    )
    assert setup.commit_log == log
    assert setup.commit_log_options == {"auto_mkdir": True}


@needs_datasource
def test_commit_log_options_with_the_files_default_log(tmp_path: Path) -> None:
    setup = _Setup.from_options(
        _files(tmp_path, COMMIT_LOG_OPTIONS='{"auto_mkdir": false}'), streaming=True
    )
    assert setup.commit_log == join(str(tmp_path / "out"), "_twopc", "orders")
    assert setup.commit_log_options == {"auto_mkdir": False}


@needs_datasource
@pytest.mark.parametrize("text", ["[1, 2]", "{oops", "3", '"text"', "null"])
def test_commit_log_options_must_be_a_json_object(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigurationError, match="option 'commit_log_options' must be a JSON"):
        _Setup.from_options(_files(tmp_path, commit_log_options=text), streaming=True)


@needs_datasource
def test_empty_commit_log_options_are_none(tmp_path: Path) -> None:
    log = str(tmp_path / "log")
    setup = _Setup.from_options(
        _files(tmp_path, commit_log=log, commit_log_options=""), streaming=True
    )
    assert setup.commit_log_options is None


@needs_datasource
def test_streaming_without_checkpoint(tmp_path: Path) -> None:
    setup = _Setup.from_options(_files(tmp_path), streaming=True)
    assert setup.query_id is None
    assert setup.checkpoint is None
    assert setup.commit_log == join(str(tmp_path / "out"), "_twopc", "orders")


@needs_datasource
def test_streaming_empty_checkpoint_option(tmp_path: Path) -> None:
    setup = _Setup.from_options(_files(tmp_path, checkpointLocation=""), streaming=True)
    assert setup.checkpoint is None
    assert setup.query_id is None


@needs_datasource
def test_streaming_checkpoint_without_metadata(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path, query_id=None)
    setup = _Setup.from_options(_files(tmp_path, checkpointLocation=checkpoint), streaming=True)
    assert setup.checkpoint == checkpoint
    assert setup.query_id is None


@needs_datasource
@pytest.mark.parametrize(
    ("metadata", "why"),
    [
        (None, "metadata does not exist"),
        ('{"name": null}\n', "metadata holds no query id"),
        ("v1 not json\n", "metadata is not Spark's metadata file"),
        ("a directory", "metadata cannot be read: IsADirectoryError"),
    ],
    ids=["missing", "no-id", "not-json", "unreadable"],
)
def test_a_streaming_writer_says_why_the_set_checkpoint_gives_no_query_id(
    tmp_path: Path, metadata: str | None, why: str
) -> None:
    """``checkpointLocation`` is set but its metadata gives no query id: the error says so,
    and why, instead of asking for an option that is there."""
    checkpoint = _checkpoint(tmp_path, query_id=None)
    if metadata == "a directory":
        (Path(checkpoint) / "metadata").mkdir()
    elif metadata is not None:
        (Path(checkpoint) / "metadata").write_text(metadata)
    source = TwopcDataSource(_files(tmp_path, checkpointLocation=checkpoint))
    with pytest.raises(ConfigurationError) as refused:
        source.streamWriter(None, False)
    message = str(refused.value)
    assert f"cannot read the query id from the checkpointLocation {checkpoint!r}" in message
    assert why in message
    assert "set .option(" not in message
    assert refused.value.sink_id == "orders"


@needs_datasource
def test_a_streaming_writer_without_a_checkpoint_asks_for_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as refused:
        TwopcDataSource(_files(tmp_path)).streamWriter(None, False)
    assert 'set .option("checkpointLocation", ...) on the writeStream' in str(refused.value)


@needs_datasource
def test_streaming_ignores_write_id(tmp_path: Path) -> None:
    setup = _Setup.from_options(
        _files(tmp_path, checkpointLocation=_checkpoint(tmp_path), write_id="5"), streaming=True
    )
    assert setup.batch_id is None
    assert setup.query_id == QUERY_ID


# -- batch -----------------------------------------------------------------------------------


@needs_datasource
def test_batch_write(tmp_path: Path) -> None:
    setup = _Setup.from_options(_files(tmp_path, write_id="2026-11-25"), streaming=False)
    assert setup.batch_id == BATCH_ID
    assert setup.query_id == batch_query_id("orders", "2026-11-25")
    assert setup.checkpoint is None
    assert setup.commit_log == join(str(tmp_path / "out"), "_twopc", "orders")


@needs_datasource
def test_batch_query_id_ignores_the_checkpoint(tmp_path: Path) -> None:
    options = _files(tmp_path, write_id="1", checkpointLocation=_checkpoint(tmp_path))
    setup = _Setup.from_options(options, streaming=False)
    assert setup.query_id == batch_query_id("orders", "1") != QUERY_ID


@needs_datasource
@pytest.mark.parametrize("write_id", [None, "", "-1", "a b", "x" * 129, "../up"])
def test_batch_needs_a_valid_write_id(tmp_path: Path, write_id: str | None) -> None:
    options = _files(tmp_path)
    if write_id is not None:
        options["write_id"] = write_id
    with pytest.raises(ConfigurationError, match="write_id") as info:
        _Setup.from_options(options, streaming=False)
    assert info.value.sink_id == "orders"


def test_batch_query_id_is_stable_and_per_sink_and_key() -> None:
    first = batch_query_id("orders", "k1")
    assert first == batch_query_id("orders", "k1")
    assert str(uuid.UUID(first)) == first
    assert uuid.UUID(first).version == 5
    assert first != batch_query_id("orders-2", "k1")
    assert first != batch_query_id("orders", "k2")
    assert len({batch_query_id(f"sink-{i}", "k") for i in range(50)}) == 50


def test_write_ids_as_text() -> None:
    assert validate_write_id(20261125, "s") == "20261125"
    assert validate_write_id("2026-11-25T10:00+01", "s") == "2026-11-25T10:00+01"
    with pytest.raises(ConfigurationError, match="write_id"):
        validate_write_id(-1, "s")


@needs_datasource
def test_batch_query_id_per_sink_through_options(tmp_path: Path) -> None:
    one = _Setup.from_options(_files(tmp_path, write_id="1"), streaming=False)
    two = _Setup.from_options(_files(tmp_path, sink_id="other", write_id="1"), streaming=False)
    assert one.query_id != two.query_id
    assert two.query_id == batch_query_id("other", "1")


# -- the options the sink receives -----------------------------------------------------------


@needs_datasource
def test_options_are_typed_for_the_sink(tmp_path: Path) -> None:
    setup = _Setup.from_options(
        _files(
            tmp_path,
            format="csv",
            partition_by="day,country",
            target_file_size="2097152",
            write_options='{"include_header": false}',
        ),
        streaming=True,
    )
    sink = setup.sink
    assert isinstance(sink, FilesSink)
    assert sink.format == "csv"
    assert sink.partition_by == ("day", "country")
    assert sink.target_file_size == 2097152
    assert sink.write_options == {"include_header": False}


@needs_datasource
@pytest.mark.parametrize("streaming", [True, False])
def test_unknown_sink_option(tmp_path: Path, streaming: bool) -> None:
    with pytest.raises(ConfigurationError, match="files backend has no option 'colour'"):
        _Setup.from_options(_files(tmp_path, colour="red", write_id="1"), streaming=streaming)


@needs_datasource
def test_files_needs_a_path(tmp_path: Path) -> None:
    options = _files(tmp_path)
    del options["path"]
    with pytest.raises(ConfigurationError, match=r"needs the option\(s\) 'path'"):
        _Setup.from_options(options, streaming=True)


@needs_datasource
@pytest.mark.parametrize("key", ["checkpointLocation", "checkpointlocation", "CHECKPOINTLOCATION"])
def test_checkpoint_location_is_not_a_sink_option(tmp_path: Path, key: str) -> None:
    # the files backend refuses options it does not know, so reaching it would fail
    setup = _Setup.from_options(_files(tmp_path, **{key: _checkpoint(tmp_path)}), streaming=True)
    assert setup.query_id == QUERY_ID


@needs_datasource
def test_setup_pickles(tmp_path: Path) -> None:
    setup = _Setup.from_options(
        _files(tmp_path, checkpointLocation=_checkpoint(tmp_path)), streaming=True
    )
    copy = pickle.loads(pickle.dumps(setup))
    assert (copy.sink_id, copy.query_id, copy.commit_log) == (
        setup.sink_id,
        setup.query_id,
        setup.commit_log,
    )


# -- backends without services: the memory sinks behind a stand-in registry ----------------


class _Spec:
    def __init__(self, factory: Callable[..., Any]) -> None:
        self.factory = factory

    def load(self) -> Callable[..., Any]:
        return self.factory


class _Registry:
    """Just what ``from_options`` asks of the plugin registry."""

    def __init__(self, **factories: Callable[..., Any]) -> None:
        self.factories = factories

    def spec(self, name: str) -> _Spec:
        return _Spec(self.factories[name])

    def create_sink(self, backend: str, /, **options: Any) -> Any:
        return self.factories[backend](**options)


@pytest.fixture
def received(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Installs memory backends; returns the options each factory call received."""
    calls: list[dict[str, Any]] = []

    def driver(**options: Any) -> MemoryDriverSink:
        calls.append(options)
        return MemoryDriverSink("datasource-options")

    def in_task(*, store: str = "datasource-options", single: bool = False) -> MemoryTaskSink:
        calls.append({"store": store, "single": single})
        sink = MemoryTaskSink(store)
        sink.single_task = single
        return sink

    fake = _Registry(driver=driver, in_task=in_task)
    monkeypatch.setattr("twopc._contract.sink_options.registry", lambda: fake)
    return calls


@needs_datasource
@pytest.mark.parametrize("streaming", [True, False])
def test_only_sink_options_reach_the_sink(
    tmp_path: Path, received: list[dict[str, Any]], streaming: bool
) -> None:
    options = {
        "sink": "driver",
        "Sink_Id": "mem",
        "checkpointLocation": _checkpoint(tmp_path),
        "commit_log": str(tmp_path / "log"),
        "commit_log_options": "{}",
        "WRITE_ID": "3",
        "faults": "",
        "table": "t",
        "Flag": "true",
    }
    _Setup.from_options(options, streaming=streaming)
    assert received == [{"table": "t", "Flag": "true"}]


@needs_datasource
def test_commit_log_under_the_checkpoint_without_a_sink_default(
    tmp_path: Path, received: list[dict[str, Any]]
) -> None:
    checkpoint = _checkpoint(tmp_path)
    setup = _Setup.from_options(
        {"sink": "in_task", "sink_id": "mem", "checkpointLocation": checkpoint}, streaming=True
    )
    assert setup.commit_log == join(checkpoint, "twopc", "mem")
    assert setup.query_id == QUERY_ID
    assert received == [{"store": "datasource-options", "single": False}]


@needs_datasource
def test_no_commit_log_anywhere(received: list[dict[str, Any]]) -> None:
    with pytest.raises(ConfigurationError, match="cannot tell where to keep the commit log"):
        _Setup.from_options({"sink": "in_task", "sink_id": "mem"}, streaming=True)


@needs_datasource
def test_batch_refuses_a_sink_committing_each_partition(
    tmp_path: Path, received: list[dict[str, Any]]
) -> None:
    options = {"sink": "in_task", "sink_id": "mem", "commit_log": str(tmp_path / "log")}
    with pytest.raises(ConfigurationError, match="commits each partition") as info:
        _Setup.from_options({**options, "write_id": "1"}, streaming=False)
    assert info.value.sink_id == "mem"
    # the same sink is fine for streaming, where each batch is replayed until complete
    assert _Setup.from_options(options, streaming=True).batch_id is None


@needs_datasource
@pytest.mark.parametrize(("streaming", "advice"), [(True, "foreach_batch"), (False, "write_batch")])
def test_single_task_sinks_are_refused(
    tmp_path: Path, received: list[dict[str, Any]], streaming: bool, advice: str
) -> None:
    options = {
        "sink": "in_task",
        "sink_id": "mem",
        "commit_log": str(tmp_path / "log"),
        "single": "true",
        "write_id": "1",
        "checkpointLocation": _checkpoint(tmp_path),
    }
    with pytest.raises(ConfigurationError, match=rf"one task.*twopc\.{advice}") as info:
        _Setup.from_options(options, streaming=streaming)
    assert info.value.sink_id == "mem"
    assert received == [{"store": "datasource-options", "single": True}]


@needs_datasource
def test_batch_accepts_a_sink_committing_on_the_driver(
    tmp_path: Path, received: list[dict[str, Any]]
) -> None:
    options = {"sink": "driver", "sink_id": "mem", "commit_log": str(tmp_path / "log")}
    setup = _Setup.from_options({**options, "write_id": "7"}, streaming=False)
    assert isinstance(setup.sink, MemoryDriverSink)
    assert (setup.batch_id, setup.query_id) == (BATCH_ID, batch_query_id("mem", "7"))


# -- query_id_of -----------------------------------------------------------------------------


def test_query_id_of_a_missing_directory(tmp_path: Path) -> None:
    assert query_id_of(str(tmp_path / "nowhere")) is None


def test_query_id_of_a_directory_without_metadata(tmp_path: Path) -> None:
    assert query_id_of(_checkpoint(tmp_path, query_id=None)) is None


@pytest.mark.parametrize(
    "text",
    ["", "\n", "not json", "{broken", '["id"]', '"id"', "{}", '{"id": ""}', '{"id": null}'],
)
def test_query_id_of_unusable_metadata(tmp_path: Path, text: str) -> None:
    assert query_id_of(_checkpoint(tmp_path, text=text)) is None


def test_query_id_of_binary_garbage(tmp_path: Path) -> None:
    root = tmp_path / "checkpoint"
    root.mkdir()
    (root / "metadata").write_bytes(b"\xff\xfe\x00garbage")
    assert query_id_of(str(root)) is None


def test_query_id_of_a_proper_file(tmp_path: Path) -> None:
    assert query_id_of(_checkpoint(tmp_path)) == QUERY_ID


def test_query_id_of_reads_the_first_line(tmp_path: Path) -> None:
    text = json.dumps({"id": QUERY_ID, "extra": 1}) + "\n" + json.dumps({"id": "other"}) + "\n"
    assert query_id_of(_checkpoint(tmp_path, text=text)) == QUERY_ID


def test_query_id_of_a_file_url_and_trailing_slash(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path)
    assert query_id_of(Path(checkpoint).as_uri()) == QUERY_ID
    assert query_id_of(checkpoint + "/") == QUERY_ID


def test_query_id_of_a_non_string_id(tmp_path: Path) -> None:
    assert query_id_of(_checkpoint(tmp_path, text='{"id": 42}')) == "42"


# -- check_batch_sink ------------------------------------------------------------------------


def test_check_batch_sink_refuses_in_task_multi_partition() -> None:
    sink = MemoryTaskSink("check-batch")
    assert sink.single_task is False
    with pytest.raises(ConfigurationError) as info:
        check_batch_sink(sink, "mem")
    message = str(info.value)
    assert "commits each partition" in message
    assert "memory store 'check-batch'" in message
    assert message.startswith("sink 'mem': ")
    assert info.value.sink_id == "mem"


def test_check_batch_sink_accepts_in_task_single_task() -> None:
    sink = MemoryTaskSink("check-batch")
    sink.single_task = True
    check_batch_sink(sink, "mem")


def test_check_batch_sink_accepts_driver_commits(tmp_path: Path) -> None:
    check_batch_sink(MemoryDriverSink("check-batch"), "mem")
    check_batch_sink(FilesSink(str(tmp_path)), "files")


def test_check_batch_sink_refuses_a_non_sink() -> None:
    with pytest.raises(ConfigurationError, match=r"expected a twopc\.Sink"):
        check_batch_sink(object(), "mem")  # type: ignore[arg-type]


# -- the progress group ------------------------------------------------------------------------


@needs_datasource
def test_progress_group_options_build_a_consumer_group_for_streaming_only(tmp_path: Path) -> None:
    options = _files(
        tmp_path,
        checkpointLocation=_checkpoint(tmp_path),
        progress_group="orders-progress",
        progress_bootstrap_servers="broker:9092",
        progress_options='{"security.protocol": "SASL_SSL", "sasl.password": "s3cret"}',
    )
    setup = _Setup.from_options(options, streaming=True)
    from twopc_kafka import ConsumerGroup

    assert isinstance(setup.progress, ConsumerGroup)
    assert (setup.progress.group_id, setup.progress.bootstrap_servers) == (
        "orders-progress",
        "broker:9092",
    )
    assert "s3cret" not in repr(setup.progress)
    assert pickle.loads(pickle.dumps(setup)).progress.group_id == "orders-progress"
    # the progress options are twopc's: the files sink, which refuses unknown options,
    # never saw them
    assert isinstance(setup.sink, FilesSink)

    with pytest.raises(ConfigurationError, match="a batch write has none"):
        _Setup.from_options({**options, "write_id": "d1"}, streaming=False)
    del options["progress_bootstrap_servers"]
    with pytest.raises(ConfigurationError, match="progress_bootstrap_servers"):
        _Setup.from_options(options, streaming=True)


# -- speculation --------------------------------------------------------------------------


@needs_datasource
@pytest.mark.parametrize(
    ("value", "expected"), [(None, True), ("true", True), ("false", False), (" FALSE ", False)]
)
def test_speculation_is_assumed_unless_the_query_says_it_is_off(
    tmp_path: Path, value: str | None, expected: bool
) -> None:
    """The writer cannot read spark.speculation: its tasks treat other attempts as possibly
    running beside them unless ``speculation`` is ``false``; the option is twopc's own,
    never passed to the sink."""
    extra = {} if value is None else {"speculation": value}
    setup = _Setup.from_options(_files(tmp_path, write_id="1", **extra), streaming=False)
    assert setup.concurrent_attempts is expected
    assert isinstance(setup.sink, FilesSink)


@needs_datasource
def test_speculation_must_be_true_or_false(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="'true' or 'false'"):
        _Setup.from_options(_files(tmp_path, write_id="1", speculation="maybe"), streaming=False)
