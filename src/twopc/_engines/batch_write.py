"""Exactly-once writes of a plain (non-streaming) DataFrame: ``twopc.write_batch``.

A batch write is batch 0 of a query whose id is derived from the sink id and the write's
idempotency key, ``write_id`` (in the spirit of Delta's ``txnAppId``/``txnVersion``), so
the coordinator's rules carry over unchanged: the same ``write_id`` written again is
recognised and skipped (a retried job, a re-run scheduler task), and a write that fails
leaves nothing visible. The last needs a sink whose batch commits all or nothing: one that
commits on the driver, or commits in a single task.
"""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING, Any

from twopc._contract.boundary import leaving_twopc
from twopc._contract.paths import CommitPath
from twopc._contract.retry import RetryPolicy
from twopc._coordination.batch_metrics import BatchMetrics
from twopc._coordination.deciding import DEFAULT_COMMIT_PARALLELISM
from twopc._coordination.engine import BatchEngine
from twopc._coordination.group_engine import GroupEngine
from twopc._engines.batch_shape import arrange_for, check_max_tasks, narrows
from twopc._engines.spark import choose_spark_write
from twopc._engines.spark_engine import SparkEngine
from twopc._engines.writer import BatchWriter, MetricsCallback, WriterOptions
from twopc.errors import ConfigurationError
from twopc.faults import FaultPlan
from twopc.groups import SinkGroup, member_sink_id
from twopc.protocol import Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["BATCH_ID", "batch_query_id", "check_batch_sink", "validate_write_id", "write_batch"]

_NAMESPACE = uuid.UUID("6f1c2b1e-6a36-4a8e-9d0c-3c1f6f2b7a10")
_WRITE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,127}$")

BATCH_ID = 0
"""The batch number every batch write is recorded under (its query is its own)."""


def validate_write_id(write_id: str | int, sink_id: str) -> str:
    """A write id as text: 1-128 letters, digits, ``_ . : + -`` (an int is fine)."""
    text = str(write_id) if isinstance(write_id, int) and write_id >= 0 else write_id
    if not isinstance(text, str) or not _WRITE_ID.match(text):
        raise ConfigurationError(
            f"invalid write_id {write_id!r}: a batch write needs an idempotency key of 1-128 "
            "letters, digits, '_', '.', ':', '+' or '-' (a date such as 2026-11-25, a job "
            "run id); writing the same key again is skipped",
            sink_id=sink_id,
        )
    return text


def batch_query_id(sink_id: str, write_id: str) -> str:
    """The query id a batch write of ``sink_id`` with ``write_id`` is recorded under: a
    UUID like a streaming query's (so the sinks' naming treats both alike), the same for
    the same key."""
    return str(uuid.uuid5(_NAMESPACE, f"batch:{sink_id}:{write_id}"))


def check_batch_sink(sink: Sink[Any], sink_id: str) -> None:
    """Refuse sinks whose batch could be left half committed by a failed write."""
    if CommitPath.of(sink) is CommitPath.TASK and not sink.single_task:
        raise ConfigurationError(
            f"{sink.describe()} commits each partition in its own task, so a failed batch "
            "write would leave some partitions committed. Batch writes need a sink that "
            "commits on the driver or writes the batch in one task; where a sink option "
            "decides it, choose that mode (e.g. the SQL sinks' transaction_mode='two_phase', "
            "the Kafka sink's mode='atomic')",
            sink_id=sink_id,
        )


def write_batch(
    df: DataFrame,
    sink: Sink[Any],
    sink_id: str,
    *,
    write_id: str | int,
    commit_log: str | None = None,
    storage_options: dict[str, Any] | None = None,
    retry: RetryPolicy | None = None,
    faults: FaultPlan | None = None,
    on_metrics: MetricsCallback | None = None,
    commit_parallelism: int = DEFAULT_COMMIT_PARALLELISM,
    max_tasks: int | None = None,
) -> BatchMetrics:
    """Write ``df`` (a plain, non-streaming DataFrame) to ``sink`` exactly once, all rows or
    none, under the idempotency key ``write_id``. Works from classic PySpark and from Spark
    Connect clients.

    Usage::

        sink = twopc.create_sink("postgres", dsn=dsn, table="daily", transaction_mode="two_phase")
        twopc.write_batch(daily, sink, "daily-totals", write_id="2026-11-25",
                          commit_log="/durable/twopc/daily-totals")

    Writing the same ``write_id`` again (a retried job) writes nothing; the returned
    metrics say ``skipped``. Keys need no order. Raises :class:`~twopc.BatchFailedError`
    when the write fails; nothing of it is then visible. ``storage_options``, ``retry``,
    ``faults``, ``on_metrics``, ``commit_parallelism`` and ``max_tasks`` are as for
    :func:`twopc.foreach_batch`.

    Args:
        df: the rows to write.
        sink: the sink; one that commits on the driver or in a single task.
        sink_id: a stable name for this output.
        write_id: this write's idempotency key, unique per ``sink_id`` (a date, a job run
            id): 1-128 letters, digits, ``_ . : + -``, or a non-negative int.
        commit_log: where decisions are recorded; required unless the sink has its own
            default (files: next to the data).
    """
    check_batch_sink(sink, sink_id)
    key = validate_write_id(write_id, sink_id)
    check_max_tasks(max_tasks)
    options = WriterOptions(
        commit_log=commit_log,
        storage_options=storage_options,
        retry=retry,
        faults=faults,
        on_metrics=on_metrics,
        commit_parallelism=commit_parallelism,
    )
    writer = BatchWriter(sink, sink_id, options)
    group = isinstance(sink, SinkGroup)
    frame = df.persist() if group else df  # a group's members read the rows once, the same
    try:
        with leaving_twopc(sink_id, BATCH_ID):
            engine = _engine(sink, writer.sink_id, frame, max_tasks)
        return writer.run(
            batch_query_id(sink_id, key), BATCH_ID, engine, lambda: None, write_id=key
        )
    finally:
        writer.close()
        if group:
            frame.unpersist()


def _engine(sink: Sink[Any], sink_id: str, df: DataFrame, max_tasks: int | None) -> BatchEngine:
    """Phase 1's engine for a batch write; a group's runs each member on its projection."""
    if isinstance(sink, SinkGroup):
        return GroupEngine(
            sink,
            {
                name: _engine(
                    member.sink, member_sink_id(sink_id, name), member.projected(df), max_tasks
                )
                for name, member in sink.members.items()
            },
        )
    spark_write = choose_spark_write(sink, sink_id)
    return SparkEngine(
        arrange_for(sink, df, max_tasks),
        spark_write=spark_write,
        evaluate_replays=False,
        narrowing=narrows(sink, max_tasks),
    )
