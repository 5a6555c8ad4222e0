"""Real runs whose scraped figures the alerting rules and the dashboard are tested on.

Each scenario writes its own sink id through the local engine and the files sink, with
faults injected so that one alert's condition occurs, into one shared
:class:`~twopc.metrics.PrometheusExporter`; :func:`run_scenarios` then scrapes the HTTP
endpoint as Prometheus would. Sinks and what happens to them:

* ``clean``: three batches commit; its progress goes to a group, so the source lag shows.
* ``failing``: batch 1's task raises, twice (the query restarted in the same process).
* ``stuck``: batch 1 is decided but its commit fails (the target fails transiently on
  every retry), then the restarted query's recovery fails the same way: work in doubt,
  commits retried, batches failed, no commit since batch 0.
* ``crashed``: the driver process dies between phase 1 and the decision; the restarted
  query's recovery aborts the prepared work, then the batches commit.
* ``shared``: another process's query writes the sink id and is still running; this
  query's first batch is refused.

The endpoint is scraped after every batch (every call of ``on_metrics``), so the result is
a timeline, as Prometheus would see it scraping often; ``clean`` goes on committing after
the others (``more_clean`` batches), as a healthy query does while the others stall.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

import twopc
from twopc import local
from twopc._contract.retry import RetryPolicy
from twopc._engines.writer import WriterOptions
from twopc.errors import TransientSinkError, TwoPCError
from twopc.faults import FaultPlan
from twopc.metrics import PrometheusExporter, combine, start_prometheus_server
from twopc.progress import GroupProgress, ProgressReporter, SourceOffsets
from twopc.protocol import Committable
from twopc_files import FilesSink

__all__ = ["FAULTS", "SCENARIOS", "Sample", "Scrape", "run_scenarios", "scrape"]

SCENARIOS = ("clean", "failing", "stuck", "crashed", "shared")
FAULTS = SCENARIOS[1:]
TOPIC = "orders"
BACKLOG = 12
"""Records each source partition holds beyond a batch's end: the group's lag per
partition."""
FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff_seconds=0.01, max_backoff_seconds=0.02)


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Scrape:
    """One scrape of the endpoint: every sample, and when it was taken (Unix time)."""

    samples: tuple[Sample, ...]
    at: float

    def values(self, name: str, **labels: str) -> dict[str, float]:
        """Each sink's value of ``name`` among the samples with ``labels``."""
        return {
            s.labels["sink"]: s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        }


def scrape(port: int) -> Scrape:
    """What Prometheus reads from the endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    at = time.time()
    samples = tuple(
        Sample(s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("twopc_")
    )
    return Scrape(samples, at)


def batches(count: int, partitions: int = 2, rows: int = 5) -> list[list[pa.Table]]:
    return [
        [
            pa.table({"id": pa.array(range(b * 100 + p * rows, b * 100 + (p + 1) * rows))})
            for p in range(partitions)
        ]
        for b in range(count)
    ]


class MemoryGroup(ProgressReporter):
    """A progress group kept in memory, over a source whose partitions end ``BACKLOG``
    records after the offsets it was last given (so the lag after a batch is known)."""

    group_id = "twopc-orders"

    def __init__(self) -> None:
        self.committed: dict[tuple[str, int], int] = {}

    def check(self, sink_id: str) -> None:
        """Always this sink's."""

    def publish(self, offsets: SourceOffsets, sink_id: str, query_id: str) -> None:
        for topic, partitions in offsets.topics.items():
            for partition, offset in partitions.items():
                self.committed[(topic, partition)] = offset

    def progress(self, offsets: SourceOffsets) -> GroupProgress:
        keys = [(t, p) for t, ps in offsets.topics.items() for p in ps]
        ends = {(t, p): offsets.topics[t][p] + BACKLOG for t, p in keys}
        return GroupProgress(self.group_id, dict(self.committed), ends)

    def describe(self) -> dict[str, Any]:
        return {"kind": "memory", "group": self.group_id}


class FlakyCommitSink(FilesSink):
    """The files sink, whose commits fail transiently while ``failing`` is set."""

    failing = False

    def commit(self, committables: Sequence[Committable]) -> Any:
        if FlakyCommitSink.failing:
            raise TransientSinkError("the target is unavailable (injected for the alerts test)")
        return super().commit(committables)


Exporter = Callable[[twopc.BatchMetrics], None]


def _writer(sink: Any, sink_id: str, exporter: Exporter, **options: Any) -> local.LocalBatchWriter:
    return local.LocalBatchWriter(
        sink, sink_id, WriterOptions(on_metrics=exporter, retry=FAST_RETRY, **options)
    )


def _run(stream: local.LocalStream, writer: local.LocalBatchWriter) -> TwoPCError | None:
    """Run the stream; the error that stopped it, if one did (as Spark stops a query)."""
    try:
        stream.run(writer)
    except TwoPCError as exc:
        return exc
    return None


def _clean(root: Path, exporter: Exporter, count: int = 3) -> None:
    """The first ``count`` batches of a query that never fails (again: only the new ones)."""
    sink = twopc.create_sink("files", path=str(root / "out"))
    stream = local.LocalStream(str(root / "chk"), batches(count), kafka_topic=TOPIC)
    assert _run(stream, _writer(sink, "clean", exporter, progress=MemoryGroup())) is None


def _failing(root: Path, exporter: Exporter) -> None:
    sink = twopc.create_sink("files", path=str(root / "out"))
    faults = FaultPlan.parse("after_invoke:raise@batch=1")
    for _ in range(2):
        stream = local.LocalStream(str(root / "chk"), batches(3))
        assert _run(stream, _writer(sink, "failing", exporter, faults=faults)) is not None


def _stuck(root: Path, exporter: Exporter) -> None:
    sink = FlakyCommitSink(path=str(root / "out"))
    data = batches(3)
    stream = local.LocalStream(str(root / "chk"), data[:1])
    assert _run(stream, _writer(sink, "stuck", exporter)) is None
    FlakyCommitSink.failing = True
    try:
        for _ in range(2):  # the batch's own commit, then the restarted query's recovery
            stream = local.LocalStream(str(root / "chk"), data)
            assert _run(stream, _writer(sink, "stuck", exporter)) is not None
    finally:
        FlakyCommitSink.failing = False


def _crash_before_decision(root: str) -> None:
    sink = twopc.create_sink("files", path=f"{root}/out")
    faults = FaultPlan.parse("before_decision:exit@batch=1")
    stream = local.LocalStream(f"{root}/chk", batches(3))
    stream.run(local.foreach_batch(sink, "crashed", faults=faults))


def _crashed(root: Path, exporter: Exporter) -> None:
    child = multiprocessing.get_context("fork").Process(
        target=_crash_before_decision, args=(str(root),)
    )
    child.start()
    child.join(120)
    assert child.exitcode == 86, f"the crashing driver ended with {child.exitcode}"
    sink = twopc.create_sink("files", path=str(root / "out"))
    stream = local.LocalStream(str(root / "chk"), batches(3))
    assert _run(stream, _writer(sink, "crashed", exporter)) is None


def _hold_a_query(root: str, ready: Any, done: Any) -> None:
    """Another process's query: batch 0 written, its writer open (its liveness record
    says it runs) until ``done``."""
    sink = twopc.create_sink("files", path=f"{root}/out")
    writer = local.foreach_batch(sink, "shared")
    stream = local.LocalStream(f"{root}/chk-other", batches(1))
    writer.write(stream.query_id, 0, stream.batches[0], stream.checkpoint)
    ready.set()
    done.wait(120)


@contextlib.contextmanager
def _other_writer(root: Path) -> Iterator[None]:
    context = multiprocessing.get_context("fork")
    ready, done = context.Event(), context.Event()
    child = context.Process(target=_hold_a_query, args=(str(root), ready, done))
    child.start()
    try:
        assert ready.wait(120), "the other query did not write its first batch"
        yield
    finally:
        done.set()
        child.join(60)


def _shared(root: Path, exporter: Exporter) -> None:
    sink = twopc.create_sink("files", path=str(root / "out"))
    with _other_writer(root):
        stream = local.LocalStream(str(root / "chk"), batches(2))
        error = _run(stream, _writer(sink, "shared", exporter))
    assert error is not None and "another query writes sink id 'shared'" in str(error)


_RUNS = {
    "clean": _clean,
    "failing": _failing,
    "stuck": _stuck,
    "crashed": _crashed,
    "shared": _shared,
}


def run_scenarios(
    root: Path, names: Sequence[str] = SCENARIOS, *, more_clean: int = 45
) -> list[Scrape]:
    """Run the scenarios ``names`` into one exporter, scraping its endpoint after every
    batch; then ``more_clean`` more batches of ``clean`` (when it is among them)."""
    registry = CollectorRegistry()
    server = start_prometheus_server(0, "127.0.0.1", registry)
    timeline: list[Scrape] = []

    def scraped(metrics: twopc.BatchMetrics) -> None:
        timeline.append(scrape(server.port))

    exporter = combine(PrometheusExporter(registry), scraped)
    try:
        for name in names:
            directory = root / name
            os.makedirs(directory, exist_ok=True)
            _RUNS[name](directory, exporter)
        if "clean" in names and more_clean:
            _clean(root / "clean", exporter, 3 + more_clean)
    finally:
        server.close()
    return timeline
