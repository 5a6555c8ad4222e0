"""Per-batch metrics as Prometheus collectors and an HTTP endpoint (the ``prometheus``
extra)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from twopc._coordination.batch_metrics import BatchMetrics
from twopc.errors import ConfigurationError
from twopc.metrics._catalog import (
    CATALOG,
    COMMON_LABELS,
    DURATION_BUCKETS,
    Instrument,
    Kind,
    common_labels,
    prometheus_name,
)
from twopc.metrics._extras import not_shippable, require

__all__ = ["PrometheusExporter", "PrometheusServer", "start_prometheus_server"]

_UNITS = {"s": "seconds", "By": "bytes"}


def _client() -> Any:
    return require("prometheus_client", "prometheus-client", "prometheus")


class PrometheusExporter:
    """Keeps each batch's metrics in Prometheus collectors: ``twopc_batch_rows_total``,
    ``twopc_phase_duration_seconds`` and so on, labelled ``sink``, ``query`` and
    ``backend``.

    An ``on_metrics`` callback. The collectors are registered in ``registry``, by default
    ``prometheus_client``'s global one, which :func:`start_prometheus_server` and any other
    exposition of that registry serve. Create one exporter per registry and give it to
    every writer: the labels tell sinks and queries apart (a second exporter on the same
    registry is refused by ``prometheus_client`` as a duplicate).

    Every label has a bounded set of values: ``query`` is the streaming query's id, or
    ``batch-writes`` for all of a sink's batch writes, and only the ``queries_per_sink``
    queries of a sink that reported last keep their series (a process that starts query
    after query, e.g. on new checkpoints, would otherwise keep every old one forever).

    Raises:
        ConfigurationError: ``queries_per_sink`` is not a whole number of at least 1.
        ExtraNotInstalledError: ``prometheus-client`` is missing (``pip install
            "twopc[prometheus]"``).
    """

    def __init__(self, registry: Any = None, *, queries_per_sink: int = 10) -> None:
        if isinstance(queries_per_sink, bool) or not isinstance(queries_per_sink, int):
            raise ConfigurationError(
                f"queries_per_sink takes a whole number, not {queries_per_sink!r}"
            )
        if queries_per_sink < 1:
            raise ConfigurationError(f"queries_per_sink must be at least 1, not {queries_per_sink}")
        client = _client()
        self.registry = registry if registry is not None else client.REGISTRY
        self.queries_per_sink = queries_per_sink
        self._collectors = [(spec, _create(client, spec, self.registry)) for spec in CATALOG]
        self._series: dict[str, OrderedDict[str, set[_Series]]] = {}
        self._lock = threading.Lock()

    def __reduce__(self) -> Any:
        raise not_shippable(type(self).__name__)

    def __call__(self, metrics: BatchMetrics) -> None:
        common = common_labels(metrics)
        with self._lock:
            series = self._series_of(common["sink"], common["query"])
            for spec, collector in self._collectors:
                for labels, value in spec.read(metrics):
                    values = {**common, **labels}
                    names = (*COMMON_LABELS, *spec.labels)
                    series.add((collector, tuple(values[name] for name in names)))
                    child = collector.labels(**values)
                    if spec.kind is Kind.COUNTER:
                        child.inc(value)
                    elif spec.kind is Kind.HISTOGRAM:
                        child.observe(value)
                    else:
                        child.set(value)

    def _series_of(self, sink: str, query: str) -> set[_Series]:
        """The series of one query of one sink. Beyond ``queries_per_sink``, the sink's
        query that reported least recently is forgotten (its series removed), so that a
        process that starts query after query keeps a bounded set of series."""
        queries = self._series.setdefault(sink, OrderedDict())
        if query in queries:
            queries.move_to_end(query)
            return queries[query]
        while len(queries) >= self.queries_per_sink:
            _, gone = queries.popitem(last=False)
            for collector, values in gone:
                collector.remove(*values)
        queries[query] = set()
        return queries[query]


_Series = tuple[Any, tuple[str, ...]]
"""A collector and the label values of one of its series, in its label order."""


def _create(client: Any, spec: Instrument, registry: Any) -> Any:
    name = prometheus_name(spec)
    labels = [*COMMON_LABELS, *spec.labels]
    unit = _UNITS.get(spec.unit, "")
    if spec.kind is Kind.COUNTER:
        # prometheus_client adds the _total suffix itself
        return client.Counter(
            name.removesuffix("_total"), spec.description, labels, registry=registry, unit=unit
        )
    if spec.kind is Kind.HISTOGRAM:
        return client.Histogram(
            name, spec.description, labels, registry=registry, unit=unit, buckets=DURATION_BUCKETS
        )
    return client.Gauge(name, spec.description, labels, registry=registry, unit=unit)


class PrometheusServer:
    """The HTTP endpoint :func:`start_prometheus_server` started; :meth:`close` stops it."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.port: int = server.server_port
        """The port it listens on (the one picked, when asked for port 0)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(port={self.port})"

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def start_prometheus_server(
    port: int = 9464, addr: str = "0.0.0.0", registry: Any = None
) -> PrometheusServer:
    """Serve ``registry`` (default: ``prometheus_client``'s global one) for scraping at
    ``http://<addr>:<port>/metrics``, from a daemon thread.

    Port ``0`` picks a free port (the returned server's ``port`` says which); 9464 is the
    port OpenTelemetry's Prometheus exporter uses. ``addr`` ``0.0.0.0`` listens on every
    interface, so that a Prometheus server on another host can scrape it.
    """
    client = _client()
    server, thread = client.start_http_server(
        port, addr, registry if registry is not None else client.REGISTRY
    )
    return PrometheusServer(server, thread)
