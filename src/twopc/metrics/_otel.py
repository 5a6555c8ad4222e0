"""Per-batch metrics as OpenTelemetry instruments (the ``otel`` extra)."""

from __future__ import annotations

from typing import Any

from twopc._coordination.batch_metrics import BatchMetrics
from twopc._version import __version__
from twopc.metrics._catalog import CATALOG, DURATION_BUCKETS, Instrument, Kind, common_labels
from twopc.metrics._extras import not_shippable, require

__all__ = ["OpenTelemetryExporter"]


class OpenTelemetryExporter:
    """Records each batch's metrics on an OpenTelemetry meter named ``twopc``.

    An ``on_metrics`` callback: ``twopc.foreach_batch(sink, sink_id=..., on_metrics=
    OpenTelemetryExporter())``. Without ``meter_provider`` it uses the global one (set up
    by your application or by ``opentelemetry-instrument``). Instruments are named
    ``twopc.batch.rows``, ``twopc.phase.duration`` and so on, with UCUM units and the
    attributes ``sink``, ``query`` and ``backend`` (see the metrics page of the docs).
    One exporter serves any number of sinks and queries.

    Raises:
        ExtraNotInstalledError: ``opentelemetry-api`` is missing (``pip install
            "twopc[otel]"``).
    """

    def __init__(self, meter_provider: Any = None) -> None:
        api = require("opentelemetry.metrics", "opentelemetry-api", "otel")
        provider = meter_provider if meter_provider is not None else api.get_meter_provider()
        meter = provider.get_meter("twopc", __version__)
        self._instruments = [(spec, _create(meter, spec)) for spec in CATALOG]

    def __reduce__(self) -> Any:
        raise not_shippable(type(self).__name__)

    def __call__(self, metrics: BatchMetrics) -> None:
        common = common_labels(metrics)
        for spec, instrument in self._instruments:
            for labels, value in spec.read(metrics):
                attributes = {**common, **labels}
                if spec.kind is Kind.COUNTER:
                    instrument.add(value, attributes)
                elif spec.kind is Kind.HISTOGRAM:
                    instrument.record(value, attributes)
                else:
                    instrument.set(value, attributes)


def _create(meter: Any, spec: Instrument) -> Any:
    if spec.kind is Kind.COUNTER:
        return meter.create_counter(spec.name, spec.unit, spec.description)
    if spec.kind is Kind.HISTOGRAM:
        return meter.create_histogram(
            spec.name,
            spec.unit,
            spec.description,
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
    return meter.create_gauge(spec.name, spec.unit, spec.description)
