"""Exactly-once writes of a plain (non-streaming) DataFrame: ``twopc.write_batch``.

A batch write is one batch of a query with a fixed id derived from the sink id, so the
coordinator's rules carry over unchanged: the same ``batch_id`` written again is recognised
and skipped (a retried job, a re-run scheduler task), an older id after a newer one is
refused, and a write that fails leaves nothing visible. The last needs a sink whose batch
commits all or nothing: one that commits on the driver, or commits in a single task.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from twopc._metrics import BatchMetrics
from twopc._paths import CommitPath
from twopc._retry import RetryPolicy
from twopc._spark import _SparkEngine
from twopc._writer import BatchWriter, MetricsCallback
from twopc.errors import ConfigurationError
from twopc.faults import FaultPlan
from twopc.protocol import Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["batch_query_id", "check_batch_sink", "write_batch"]

_NAMESPACE = uuid.UUID("6f1c2b1e-6a36-4a8e-9d0c-3c1f6f2b7a10")


def batch_query_id(sink_id: str) -> str:
    """The query id batch writes of ``sink_id`` are recorded under (stable, a UUID like a
    streaming query's, so the sinks' naming treats both alike)."""
    return str(uuid.uuid5(_NAMESPACE, f"batch:{sink_id}"))


def check_batch_sink(sink: Sink[Any], sink_id: str) -> None:
    """Refuse sinks whose batch could be left half committed by a failed write."""
    if CommitPath.of(sink) is CommitPath.TASK and not sink.single_task:
        raise ConfigurationError(
            f"{sink.describe()} commits each partition in its own task, so a failed batch "
            "write would leave some partitions committed. Batch writes need a sink that "
            "commits on the driver (files; SQL with transaction_mode='two_phase') or in one "
            "task (Kafka mode='atomic')",
            sink_id=sink_id,
        )


def write_batch(
    df: DataFrame,
    sink: Sink[Any],
    sink_id: str,
    *,
    batch_id: int,
    commit_log: str | None = None,
    storage_options: dict[str, Any] | None = None,
    retry: RetryPolicy | None = None,
    faults: FaultPlan | None = None,
    on_metrics: MetricsCallback | None = None,
) -> BatchMetrics:
    """Write ``df`` (a plain, non-streaming DataFrame) to ``sink`` exactly once, as batch
    ``batch_id`` of ``sink_id``. Works from classic PySpark and from Spark Connect clients.

    Usage::

        sink = twopc.create_sink("postgres", dsn=dsn, table="daily", transaction_mode="two_phase")
        twopc.write_batch(daily, sink, "daily-totals", batch_id=20261125,
                          commit_log="/durable/twopc/daily-totals")

    Writing the same ``batch_id`` again (a retried job) is skipped; the returned metrics
    say ``skipped``. Batch ids must grow: an id older than the newest one written is
    refused. Raises :class:`~twopc.BatchFailedError` when the write fails; nothing of it is
    then visible.

    Args:
        df: the rows to write.
        sink: the sink; one that commits on the driver or in a single task.
        sink_id: a stable name for this output.
        batch_id: this write's number, unique and growing per ``sink_id`` (a date such as
            ``20261125``, a run counter).
        commit_log: where decisions are recorded; required unless the sink has its own
            default (files: next to the data).
        storage_options, retry, faults, on_metrics: as for :func:`twopc.foreach_batch`.
    """
    check_batch_sink(sink, sink_id)
    if int(batch_id) < 0:
        raise ConfigurationError("batch_id must be 0 or more", sink_id=sink_id)
    writer = BatchWriter(
        sink,
        sink_id,
        commit_log=commit_log,
        storage_options=storage_options,
        retry=retry,
        faults=faults,
        on_metrics=on_metrics,
    )
    if sink.single_task:
        df = df.repartition(1)
    elif keys := sink.partition_columns():
        df = df.repartition(*keys)
    try:
        return writer.run(batch_query_id(sink_id), int(batch_id), _SparkEngine(df), lambda: None)
    finally:
        writer.close()
