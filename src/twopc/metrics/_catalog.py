"""The per-batch instruments, named once so that every exporter reports the same set.

Each :class:`Instrument` has an OpenTelemetry name (dotted, with a UCUM unit) and reads its
data points from a :class:`~twopc.BatchMetrics`; :func:`prometheus_name` derives the
Prometheus name the way OpenTelemetry's own Prometheus exporter does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum

from twopc._coordination.batch_metrics import BatchMetrics, BatchStatus

__all__ = [
    "BATCH_WRITES",
    "CATALOG",
    "COMMON_LABELS",
    "DURATION_BUCKETS",
    "Instrument",
    "Kind",
    "Point",
    "common_labels",
    "prometheus_name",
]

Point = tuple[Mapping[str, str], float]
"""One data point: its own labels (besides :data:`COMMON_LABELS`) and its value."""

COMMON_LABELS = ("sink", "query", "backend")

DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Histogram bounds in seconds: phases take from milliseconds to minutes."""

_UNIT_SUFFIX = {"s": "seconds", "By": "bytes"}
"""UCUM units that Prometheus names carry as a suffix; ``{...}`` annotations carry none."""


class Kind(StrEnum):
    """What an instrument is: a counter (monotonic sums), a histogram (durations) or a
    gauge (the last value)."""

    COUNTER = "counter"
    HISTOGRAM = "histogram"
    GAUGE = "gauge"


@dataclass(frozen=True)
class Instrument:
    """One metric: ``read`` yields its points for a batch (none where it does not apply)."""

    name: str
    kind: Kind
    unit: str
    description: str
    read: Callable[[BatchMetrics], Iterator[Point]]
    labels: tuple[str, ...] = ()


BATCH_WRITES = "batch-writes"
"""The ``query`` label of every batch write (``twopc.write_batch``): each write has a query
id of its own, derived from its key, and one label value per write would grow without
bound."""


def common_labels(metrics: BatchMetrics) -> dict[str, str]:
    """``sink``, ``query`` and ``backend``: the streaming query's id, or
    :data:`BATCH_WRITES` for every batch write of the sink."""
    query = BATCH_WRITES if metrics.write_id is not None else metrics.query_id
    return {"sink": metrics.sink_id, "query": query, "backend": metrics.backend}


def prometheus_name(instrument: Instrument) -> str:
    """``twopc.batch.bytes`` (``By``, counter) → ``twopc_batch_bytes_total``."""
    name = instrument.name.replace(".", "_")
    suffix = _UNIT_SUFFIX.get(instrument.unit)
    if suffix and not name.endswith(f"_{suffix}"):
        name += f"_{suffix}"
    if instrument.kind is Kind.COUNTER:
        name += "_total"
    return name


def _finished(metrics: BatchMetrics) -> bool:
    """A failed batch's metrics carry the error only: no phase figures."""
    return metrics.status is not BatchStatus.FAILED


def _batches(m: BatchMetrics) -> Iterator[Point]:
    # every status from the first batch on, at 0 until it happens: a rate or increase
    # over the series then sees its first failure too
    for status in BatchStatus:
        yield {"status": str(status)}, 1 if status is m.status else 0


def _rows(m: BatchMetrics) -> Iterator[Point]:
    yield {}, m.rows


def _bytes(m: BatchMetrics) -> Iterator[Point]:
    yield {}, m.bytes


def _duration(m: BatchMetrics) -> Iterator[Point]:
    if _finished(m):
        yield {"status": str(m.status)}, m.total_seconds


def _phases(m: BatchMetrics) -> Iterator[Point]:
    if not _finished(m):
        return
    yield {"phase": "recover"}, m.recover_seconds
    if m.status is BatchStatus.COMMITTED:
        yield {"phase": "write"}, m.write_seconds
        yield {"phase": "decide"}, m.decide_seconds
        yield {"phase": "commit"}, m.commit_seconds


def _retries(m: BatchMetrics) -> Iterator[Point]:
    yield {"phase": "commit"}, m.commit_retries
    # a partition's winning attempt n means n earlier attempts of it failed or lost
    yield {"phase": "task"}, sum(t.attempt for t in m.tasks)


def _recovery(m: BatchMetrics) -> Iterator[Point]:
    yield {"action": "committed"}, m.recovered_committed
    yield {"action": "aborted"}, m.recovered_aborted
    yield {"action": "swept"}, m.swept


def _lingering(m: BatchMetrics) -> Iterator[Point]:
    yield {}, m.lingering_aborted


def _log_size(m: BatchMetrics) -> Iterator[Point]:
    if _finished(m):
        yield {}, m.commit_log_batches


def _open_work(m: BatchMetrics) -> Iterator[Point]:
    if m.status is BatchStatus.COMMITTED:
        yield {}, m.open_work_seconds


def _near_timeout(m: BatchMetrics) -> Iterator[Point]:
    yield {}, m.near_timeout


def _source_lag(m: BatchMetrics) -> Iterator[Point]:
    if m.source_lag is not None:
        yield {}, m.source_lag


def _in_doubt(m: BatchMetrics) -> Iterator[Point]:
    yield {}, m.in_doubt


def _in_doubt_since(m: BatchMetrics) -> Iterator[Point]:
    if m.in_doubt and m.in_doubt_since is not None:
        yield {}, m.in_doubt_since


def _last_commit(m: BatchMetrics) -> Iterator[Point]:
    if m.status is BatchStatus.COMMITTED and m.finished_at:
        yield {}, m.finished_at


def _other_writers(m: BatchMetrics) -> Iterator[Point]:
    yield {}, m.other_writers


CATALOG: tuple[Instrument, ...] = (
    Instrument(
        "twopc.batches",
        Kind.COUNTER,
        "{batch}",
        "Micro-batches handled, by outcome (committed, skipped replay, failed).",
        _batches,
        ("status",),
    ),
    Instrument("twopc.batch.rows", Kind.COUNTER, "{row}", "Rows committed.", _rows),
    Instrument("twopc.batch.bytes", Kind.COUNTER, "By", "Bytes the sink wrote.", _bytes),
    Instrument(
        "twopc.batch.duration",
        Kind.HISTOGRAM,
        "s",
        "Time the coordinator spent on a batch, recovery to commit.",
        _duration,
        ("status",),
    ),
    Instrument(
        "twopc.phase.duration",
        Kind.HISTOGRAM,
        "s",
        "Time per phase: recover, write (phase 1), decide, commit (phase 2).",
        _phases,
        ("phase",),
    ),
    Instrument(
        "twopc.batch.retries",
        Kind.COUNTER,
        "{retry}",
        "Retried commit calls (phase=commit) and task attempts that did not win (phase=task).",
        _retries,
        ("phase",),
    ),
    Instrument(
        "twopc.recovery.actions",
        Kind.COUNTER,
        "{action}",
        "Work finished by recovery and clean-up: committed, aborted, swept.",
        _recovery,
        ("action",),
    ),
    Instrument(
        "twopc.lingering.aborted",
        Kind.COUNTER,
        "{transaction}",
        "Transactions earlier runs left open, aborted by the lingering sweep.",
        _lingering,
    ),
    Instrument(
        "twopc.commit_log.batches",
        Kind.GAUGE,
        "{batch}",
        "Batches of the query the commit log holds after the last batch.",
        _log_size,
    ),
    Instrument(
        "twopc.open_work.age",
        Kind.GAUGE,
        "s",
        "How old the last committed batch's oldest transaction was when its commit started.",
        _open_work,
    ),
    Instrument(
        "twopc.open_work.near_timeout",
        Kind.COUNTER,
        "{partition}",
        "Partitions whose transaction passed 80 % of the sink's timeout before its commit.",
        _near_timeout,
    ),
    Instrument(
        "twopc.source.lag",
        Kind.GAUGE,
        "{record}",
        "The progress group's lag on the source after the last batch, where known.",
        _source_lag,
    ),
    Instrument(
        "twopc.in_doubt",
        Kind.GAUGE,
        "{unit}",
        "Units of work in doubt after the last batch: decided but not finished, or "
        "prepared with no decision.",
        _in_doubt,
    ),
    Instrument(
        "twopc.in_doubt.oldest_timestamp",
        Kind.GAUGE,
        "s",
        "Unix time since which the oldest in-doubt work has been in doubt (set while "
        "twopc_in_doubt is above 0).",
        _in_doubt_since,
    ),
    Instrument(
        "twopc.last_commit.timestamp",
        Kind.GAUGE,
        "s",
        "Unix time the last committed batch of the query ended.",
        _last_commit,
    ),
    Instrument(
        "twopc.writer.conflicts",
        Kind.COUNTER,
        "{writer}",
        "Running writers of another query of the sink id met at a query's first batch "
        "(the batch is refused).",
        _other_writers,
    ),
)
"""Every instrument the exporters report, in the order they record them."""
