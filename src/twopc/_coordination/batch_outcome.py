"""A batch's metrics as the flow finishes it: committed from its tasks' reports, with the
progress it published, timed and logged. Shared by both flows (``coordinator``,
``reported``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace

from twopc._coordination.batch_metrics import BatchMetrics, BatchStatus
from twopc._coordination.publishing import Published
from twopc._coordination.reports import TaskReport

__all__ = ["committed_metrics", "finished", "metrics_with_progress"]

_log = logging.getLogger("twopc")


def committed_metrics(
    base: BatchMetrics, reports: Sequence[TaskReport], log_batches: int
) -> BatchMetrics:
    """A committed batch's metrics from its tasks' reports (timings are the caller's)."""
    tasks = tuple(r.metrics for r in sorted(reports, key=lambda r: r.partition))
    return replace(
        base,
        status=BatchStatus.COMMITTED,
        partitions=len(reports),
        rows=sum(t.rows for t in tasks),
        bytes=sum(t.bytes for t in tasks),
        commit_log_batches=log_batches,
        tasks=tasks,
    )


def finished(metrics: BatchMetrics, started: float) -> BatchMetrics:
    """The batch's metrics with its total time, logged."""
    metrics = replace(metrics, total_seconds=time.monotonic() - started, finished_at=time.time())
    if _log.isEnabledFor(logging.INFO):
        _log.info(metrics.summary())
    return metrics


def metrics_with_progress(metrics: BatchMetrics, published: Published) -> BatchMetrics:
    """The metrics with the source offsets a batch published to its progress group."""
    if published.offsets is None:
        return metrics
    return replace(
        metrics,
        source_offsets=published.offsets.to_json()["topics"],
        source_lag=published.lag,
        progress_error=published.error,
    )
