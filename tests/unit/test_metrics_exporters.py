"""The metrics exporters without Spark: OpenTelemetry through its in-memory reader,
Prometheus through a registry of its own and its text exposition."""

from __future__ import annotations

import logging
import pickle
import sys
import urllib.request
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest

import twopc
from twopc.metrics import (
    CATALOG,
    Kind,
    OpenTelemetryExporter,
    PrometheusExporter,
    combine,
    observe,
    prometheus_name,
    start_prometheus_server,
)

pytestmark = pytest.mark.unit

COMMON = {"sink": "orders", "query": "q-1", "backend": "files"}


def batch(batch_id: int = 0, **fields: Any) -> twopc.BatchMetrics:
    values: dict[str, Any] = {
        "status": twopc.BatchStatus.COMMITTED,
        "backend": "files",
        "partitions": 2,
        "rows": 20,
        "bytes": 640,
        "recover_seconds": 0.01,
        "write_seconds": 0.5,
        "decide_seconds": 0.02,
        "commit_seconds": 0.1,
        "total_seconds": 0.63,
        "commit_retries": 1,
        "recovered_committed": 2,
        "recovered_aborted": 3,
        "swept": 1,
        "lingering_aborted": 2,
        "commit_log_batches": batch_id + 1,
        "finished_at": 1_700_000_000.0 + batch_id,
        "tasks": (
            twopc.TaskMetrics(0, 0, 10, 320, 0.4),
            twopc.TaskMetrics(1, 2, 10, 320, 0.5),
        ),
    }
    values.update(fields)
    return twopc.BatchMetrics("orders", "q-1", batch_id, **values)


def test_names_follow_each_convention() -> None:
    names = {spec.name: prometheus_name(spec) for spec in CATALOG}
    assert names["twopc.batch.rows"] == "twopc_batch_rows_total"
    assert names["twopc.batch.bytes"] == "twopc_batch_bytes_total"
    assert names["twopc.phase.duration"] == "twopc_phase_duration_seconds"
    assert names["twopc.commit_log.batches"] == "twopc_commit_log_batches"
    for spec in CATALOG:
        assert spec.name.startswith("twopc.") and spec.name == spec.name.lower()
        if spec.kind is Kind.HISTOGRAM:
            assert spec.unit == "s"
        assert spec.unit in ("s", "By") or spec.unit.startswith("{")


# -- OpenTelemetry ------------------------------------------------------------------------------


def otel_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "twopc"
            for metric in scope.metrics:
                found[metric.name] = list(metric.data.data_points)
    return found


def test_opentelemetry_records_every_instrument() -> None:
    reader = InMemoryMetricReader()
    export = OpenTelemetryExporter(MeterProvider(metric_readers=[reader]))
    export(batch(0))
    export(batch(1, status=twopc.BatchStatus.SKIPPED, rows=0, bytes=0, tasks=()))
    points = otel_points(reader)

    # unknown lag and nothing in doubt: no point
    assert {spec.name for spec in CATALOG} - set(points) == {
        "twopc.source.lag",
        "twopc.in_doubt.oldest_timestamp",
    }
    (rows,) = points["twopc.batch.rows"]
    assert rows.value == 20 and dict(rows.attributes) == COMMON
    by_status = {p.attributes["status"]: p.value for p in points["twopc.batches"]}
    assert by_status == {"committed": 1, "skipped": 1, "failed": 0}
    phases = {p.attributes["phase"]: p for p in points["twopc.phase.duration"]}
    assert phases["write"].count == 1 and phases["write"].sum == pytest.approx(0.5)
    assert phases["recover"].count == 2  # a skipped replay recovers too
    retries = {p.attributes["phase"]: p.value for p in points["twopc.batch.retries"]}
    assert retries == {"commit": 2, "task": 2}
    actions = {p.attributes["action"]: p.value for p in points["twopc.recovery.actions"]}
    assert actions == {"committed": 4, "aborted": 6, "swept": 2}
    (size,) = points["twopc.commit_log.batches"]
    assert size.value == 2  # a gauge: the last batch's value


def test_opentelemetry_reports_the_source_lag_where_known() -> None:
    reader = InMemoryMetricReader()
    OpenTelemetryExporter(MeterProvider(metric_readers=[reader]))(batch(source_lag=42))
    (lag,) = otel_points(reader)["twopc.source.lag"]
    assert lag.value == 42


# -- Prometheus ---------------------------------------------------------------------------------


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {**COMMON, **labels})


def test_prometheus_counts_observes_and_sets() -> None:
    registry = CollectorRegistry()
    export = PrometheusExporter(registry)
    export(batch(0))
    export(batch(1, source_lag=7))
    assert sample(registry, "twopc_batch_rows_total") == 40
    assert sample(registry, "twopc_batch_bytes_total") == 1280
    assert sample(registry, "twopc_batches_total", status="committed") == 2
    assert sample(registry, "twopc_phase_duration_seconds_count", phase="commit") == 2
    assert sample(registry, "twopc_phase_duration_seconds_sum", phase="write") == 1.0
    assert sample(registry, "twopc_batch_retries_total", phase="task") == 4
    assert sample(registry, "twopc_recovery_actions_total", action="swept") == 2
    assert sample(registry, "twopc_lingering_aborted_total") == 4
    assert sample(registry, "twopc_commit_log_batches") == 2
    assert sample(registry, "twopc_source_lag") == 7
    text = generate_latest(registry).decode()
    assert "# TYPE twopc_batch_duration_seconds histogram" in text
    assert "# HELP twopc_batch_rows_total Rows committed." in text


def test_a_failed_batch_counts_without_phase_figures() -> None:
    registry = CollectorRegistry()
    PrometheusExporter(registry)(
        twopc.BatchMetrics("orders", "q-1", 0, twopc.BatchStatus.FAILED, backend="files")
    )
    assert sample(registry, "twopc_batches_total", status="failed") == 1
    assert sample(registry, "twopc_batch_duration_seconds_count", status="failed") is None
    assert sample(registry, "twopc_commit_log_batches") is None


def test_every_status_series_exists_from_the_first_batch() -> None:
    """A failure's increase is then seen from the first one on (a series born at 1 shows
    no increase to Prometheus)."""
    registry = CollectorRegistry()
    PrometheusExporter(registry)(batch(0))
    assert sample(registry, "twopc_batches_total", status="failed") == 0
    assert sample(registry, "twopc_batches_total", status="skipped") == 0
    assert sample(registry, "twopc_writer_conflicts_total") == 0


def test_in_doubt_work_last_commit_and_other_writers() -> None:
    registry = CollectorRegistry()
    export = PrometheusExporter(registry)
    export(batch(0, finished_at=1_700_000_100.0))
    assert sample(registry, "twopc_last_commit_timestamp_seconds") == 1_700_000_100.0
    assert sample(registry, "twopc_in_doubt") == 0
    assert sample(registry, "twopc_in_doubt_oldest_timestamp_seconds") is None
    stuck = twopc.BatchMetrics(
        "orders",
        "q-1",
        1,
        twopc.BatchStatus.FAILED,
        backend="files",
        commit_retries=4,
        in_doubt=2,
        in_doubt_since=1_700_000_050.0,
        other_writers=1,
        finished_at=1_700_000_200.0,
    )
    export(stuck)
    # a failed batch keeps the last commit's time, and reports what it left in doubt
    assert sample(registry, "twopc_last_commit_timestamp_seconds") == 1_700_000_100.0
    assert sample(registry, "twopc_in_doubt") == 2
    assert sample(registry, "twopc_in_doubt_oldest_timestamp_seconds") == 1_700_000_050.0
    assert sample(registry, "twopc_batch_retries_total", phase="commit") == 5
    assert sample(registry, "twopc_writer_conflicts_total") == 1


def test_the_endpoint_serves_the_registry() -> None:
    registry = CollectorRegistry()
    PrometheusExporter(registry)(batch(0))
    server = start_prometheus_server(0, "127.0.0.1", registry)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    finally:
        server.close()
    assert 'twopc_batch_rows_total{backend="files",query="q-1",sink="orders"} 20.0' in text


# -- composition and missing extras -------------------------------------------------------------


def test_combine_calls_every_callback_even_after_one_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[int] = []

    def broken(metrics: twopc.BatchMetrics) -> None:
        raise RuntimeError("exporter down")

    with caplog.at_level(logging.ERROR, logger="twopc"):
        combine(broken, lambda m: seen.append(m.batch_id))(batch(5))
    assert seen == [5]
    assert "a metrics callback failed" in caplog.text


@pytest.mark.parametrize(
    ("make", "module", "extra"),
    [
        (OpenTelemetryExporter, "opentelemetry.metrics", "otel"),
        (PrometheusExporter, "prometheus_client", "prometheus"),
    ],
)
def test_a_missing_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, make: Any, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # what import sees when it is missing
    with pytest.raises(twopc.ExtraNotInstalledError, match=rf'pip install "twopc\[{extra}\]"'):
        make()


def test_exporters_refuse_to_be_shipped_to_another_process() -> None:
    """Spark Connect pickles the writer with its callback: say so instead of reporting
    nowhere."""
    reader = InMemoryMetricReader()
    exporters = [
        OpenTelemetryExporter(MeterProvider(metric_readers=[reader])),
        PrometheusExporter(CollectorRegistry()),
    ]
    for exporter in exporters:
        with pytest.raises(twopc.ConfigurationError, match="over Spark Connect"):
            pickle.dumps(exporter)


class ConnectFrame:
    """Stands in for a Spark Connect DataFrame: records what ``observe`` asks of it."""

    __module__ = "pyspark.sql.connect.dataframe"

    def observe(self, name: str, *exprs: Any) -> tuple[str, list[str]]:
        return name, [str(e) for e in exprs]


def test_observe_counts_rows_under_the_twopc_name_on_a_connect_frame() -> None:
    """Connect's columns are built without a server, so the expression can be read here;
    the e2e test runs the classic path in a real query."""
    assert observe(ConnectFrame()) == ("twopc", ["Column<'count(1) AS rows'>"])


def _query_labels(registry: CollectorRegistry) -> set[str]:
    return {
        s.labels["query"]
        for family in registry.collect()
        for s in family.samples
        if "query" in s.labels
    }


def test_batch_writes_share_one_query_label() -> None:
    """Each batch write has a query id of its own (derived from its key): labelled by it,
    a scheduled job would add a series per run, forever."""
    registry = CollectorRegistry()
    export = PrometheusExporter(registry)
    for day in range(30):
        export(
            twopc.BatchMetrics(
                "daily",
                f"derived-query-{day}",
                0,
                status=twopc.BatchStatus.COMMITTED,
                backend="files",
                rows=5,
                write_id=f"2026-11-{day + 1:02d}",
            )
        )
    assert _query_labels(registry) == {"batch-writes"}
    assert (
        sample(
            registry, "twopc_batches_total", sink="daily", query="batch-writes", status="committed"
        )
        == 30
    )


def _done(sink: str, query: str, batch_id: int = 0) -> twopc.BatchMetrics:
    return twopc.BatchMetrics(sink, query, batch_id, twopc.BatchStatus.COMMITTED, backend="files")


def test_only_the_latest_queries_of_a_sink_keep_their_series() -> None:
    registry = CollectorRegistry()
    export = PrometheusExporter(registry, queries_per_sink=3)
    for query in range(8):
        export(_done("orders", f"q-{query}"))
    export(_done("orders", "q-5", batch_id=1))  # q-5 reported recently
    export(_done("orders", "q-8"))
    assert _query_labels(registry) == {"q-5", "q-7", "q-8"}
    assert sample(registry, "twopc_batches_total", query="q-5", status="committed") == 2
    # another sink's queries are counted apart
    export(_done("audit", "q-0"))
    assert _query_labels(registry) == {"q-0", "q-5", "q-7", "q-8"}


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10"])
def test_queries_per_sink_must_be_a_positive_whole_number(bad: Any) -> None:
    with pytest.raises(twopc.ConfigurationError, match="queries_per_sink"):
        PrometheusExporter(CollectorRegistry(), queries_per_sink=bad)
