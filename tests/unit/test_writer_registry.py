"""The core's side of ``twopc.TracksWriters``: the writer records itself in the target
before each batch, refuses a query's first batch while the target records another running
query of the sink id, and forgets its record when closed. Over the in-memory reference
sink with a registry of its own (the SQL sinks' registry is tested on the real servers in
tests/integration/test_two_writers.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
from twopc.local import LocalStream, foreach_batch
from twopc.testing import MemoryDriverSink, memory_store

pytestmark = pytest.mark.unit

REGISTRY: dict[tuple[str, str], twopc.WriterRecord] = {}


class RegistrySink(MemoryDriverSink, twopc.TracksWriters):
    def record_writer(self, record: twopc.WriterRecord) -> None:
        REGISTRY[(record.sink_id, record.query_id)] = record

    def writers(self, sink_id: str) -> list[twopc.WriterRecord]:
        return [r for (s, _), r in REGISTRY.items() if s == sink_id]

    def remove_writer(self, sink_id: str, query_id: str) -> None:
        REGISTRY.pop((sink_id, query_id), None)


@pytest.fixture
def other_process() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield child
    child.kill()
    child.wait()


def _stream(tmp_path: Path) -> LocalStream:
    table = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    return LocalStream(str(tmp_path / "chk"), [[table], [table]])


def test_a_running_query_in_the_target_refuses_the_second(
    tmp_path: Path, store_name: str, other_process: subprocess.Popen[bytes]
) -> None:
    REGISTRY.clear()
    first = twopc.WriterRecord(
        "orders", "first-query", socket.gethostname(), other_process.pid, time.time()
    )
    REGISTRY[("orders", "first-query")] = first
    sink = RegistrySink(store_name)
    stream = _stream(tmp_path)
    with pytest.raises(twopc.ConfigurationError) as refused:
        stream.run(foreach_batch(sink, "orders", commit_log=str(tmp_path / "log"), processes=False))
    message = str(refused.value)
    assert "another query writes sink id 'orders' right now: query first-query" in message
    assert f"pid {other_process.pid}" in message and "recorded in the target" in message
    assert memory_store(store_name).visible == []  # nothing written

    # the first query is gone: its record no longer counts, and the second records itself
    other_process.kill()
    other_process.wait()
    writer = foreach_batch(sink, "orders", commit_log=str(tmp_path / "log"), processes=False)
    stream.run(writer)
    assert sorted(memory_store(store_name).visible) == [1, 1, 2, 2, 3, 3]
    assert set(REGISTRY) == {("orders", "first-query")}  # run() closed the writer: own record gone


def test_the_writer_records_itself_before_each_batch(tmp_path: Path, store_name: str) -> None:
    REGISTRY.clear()
    sink = RegistrySink(store_name)
    stream = _stream(tmp_path)
    writer = foreach_batch(sink, "orders", commit_log=str(tmp_path / "log"), processes=False)
    writer.write(stream.query_id, 0, stream.batches[0])
    (record,) = REGISTRY.values()
    assert (record.sink_id, record.query_id, record.host) == (
        "orders",
        stream.query_id,
        socket.gethostname(),
    )
    writer.close()
    assert REGISTRY == {}
