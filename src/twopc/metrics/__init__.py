"""Per-batch metrics where dashboards look: OpenTelemetry, Prometheus and Spark's progress.

Every name here is an ``on_metrics`` callback or builds one; :func:`combine` gives a writer
several at once::

    from twopc.metrics import (
        OpenTelemetryExporter, PrometheusExporter, combine, observe, start_prometheus_server
    )

    start_prometheus_server(9464)
    on_metrics = combine(PrometheusExporter(), OpenTelemetryExporter())
    writer = twopc.foreach_batch(sink, sink_id="orders", on_metrics=on_metrics)
    observe(orders).writeStream.foreachBatch(writer).start()

The exporters import their client libraries when created: ``pip install "twopc[otel]"``
or ``"twopc[prometheus]"``; without them nothing here costs an import.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from twopc._coordination.batch_metrics import BatchMetrics
from twopc.metrics._catalog import CATALOG, Instrument, Kind, prometheus_name
from twopc.metrics._otel import OpenTelemetryExporter
from twopc.metrics._prometheus import (
    PrometheusExporter,
    PrometheusServer,
    start_prometheus_server,
)
from twopc.metrics._spark import OBSERVED_NAME, observe

__all__ = [
    "CATALOG",
    "OBSERVED_NAME",
    "Instrument",
    "Kind",
    "OpenTelemetryExporter",
    "PrometheusExporter",
    "PrometheusServer",
    "combine",
    "observe",
    "prometheus_name",
    "start_prometheus_server",
]

_log = logging.getLogger("twopc")


def combine(*callbacks: Callable[[BatchMetrics], None]) -> Callable[[BatchMetrics], None]:
    """One ``on_metrics`` callback that calls each of ``callbacks`` in turn; one that
    raises is logged and the others still run."""

    def on_metrics(metrics: BatchMetrics) -> None:
        for callback in callbacks:
            try:
                callback(metrics)
            except Exception:
                _log.exception("twopc sink=%s: a metrics callback failed", metrics.sink_id)

    return on_metrics
