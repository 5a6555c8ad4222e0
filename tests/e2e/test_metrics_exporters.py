"""A real foreachBatch query's metrics where dashboards look: scraped from the Prometheus
endpoint, read from OpenTelemetry's in-memory reader, and in ``query.lastProgress``."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

import twopc
from tests.harness.promql import queries, used_names
from tests.harness.spark_fixtures import write_orders
from twopc.metrics import (
    OpenTelemetryExporter,
    PrometheusExporter,
    combine,
    observe,
    start_prometheus_server,
)

pytestmark = [pytest.mark.e2e]

BATCHES, ROWS = 3, 50


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """What Prometheus would read: each sample by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def otel_sums(reader: InMemoryMetricReader) -> dict[str, dict[str, float]]:
    """Each instrument's points, keyed by their phase/status label (or "")."""
    data = reader.get_metrics_data()
    assert data is not None
    found: dict[str, dict[str, float]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    attrs = dict(point.attributes or {})
                    key = str(attrs.get("phase", attrs.get("status", "")))
                    value = getattr(point, "value", None)
                    found.setdefault(metric.name, {})[key] = point.count if value is None else value
    return found


def test_a_query_reports_to_prometheus_opentelemetry_and_its_progress(
    spark: Any, tmp_path: Path
) -> None:
    write_orders(tmp_path / "in", batches=BATCHES, rows_per_batch=ROWS)
    started_at = time.time()
    registry = CollectorRegistry()
    reader = InMemoryMetricReader()
    on_metrics = combine(
        PrometheusExporter(registry),
        OpenTelemetryExporter(MeterProvider(metric_readers=[reader])),
    )
    server = start_prometheus_server(0, "127.0.0.1", registry)
    sink = twopc.create_sink("files", path=str(tmp_path / "out"))
    writer = twopc.foreach_batch(sink, sink_id="orders", on_metrics=on_metrics)
    stream = (
        spark.readStream.schema("id long, customer string, amount double")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
    )
    query = (
        observe(stream)
        .writeStream.option("checkpointLocation", str(tmp_path / "chk"))
        .foreachBatch(writer)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
        samples = scrape(server.port)
    finally:
        server.close()
        writer.close()
    assert [(m.status, m.rows) for m in writer.metrics] == [("committed", ROWS)] * BATCHES
    query_id = writer.metrics[0].query_id
    labels = {("sink", "orders"), ("query", query_id), ("backend", "files")}

    # Prometheus, scraped over HTTP
    assert samples[("twopc_batch_rows_total", frozenset(labels))] == BATCHES * ROWS
    committed = frozenset(labels | {("status", "committed")})
    assert samples[("twopc_batches_total", committed)] == BATCHES
    write = frozenset(labels | {("phase", "write")})
    assert samples[("twopc_phase_duration_seconds_count", write)] == BATCHES
    assert samples[("twopc_batch_bytes_total", frozenset(labels))] > 0
    assert samples[("twopc_commit_log_batches", frozenset(labels))] == BATCHES
    # what the shipped dashboard and alerts read, from a healthy Spark query
    assert samples[("twopc_in_doubt", frozenset(labels))] == 0
    last_commit = samples[("twopc_last_commit_timestamp_seconds", frozenset(labels))]
    assert started_at <= last_commit <= time.time()
    assert samples[("twopc_writer_conflicts_total", frozenset(labels))] == 0
    failed = frozenset(labels | {("status", "failed")})
    assert samples[("twopc_batches_total", failed)] == 0
    dashboard_names = {name for query in queries() for name in used_names(query).names}
    scraped = {name for name, _ in samples}
    # all but the source lag (no progress group here) and the in-doubt age (nothing in doubt)
    assert dashboard_names - scraped == {
        "twopc_source_lag",
        "twopc_in_doubt_oldest_timestamp_seconds",
    }

    # OpenTelemetry, from the in-memory reader
    points = otel_sums(reader)
    assert points["twopc.batch.rows"] == {"": BATCHES * ROWS}
    assert points["twopc.batches"] == {"committed": BATCHES, "skipped": 0, "failed": 0}
    assert points["twopc.phase.duration"]["commit"] == BATCHES

    # Spark's own progress: the rows twopc wrote, batch by batch
    progress = {p["batchId"]: p for p in query.recentProgress}
    for metrics in writer.metrics:
        observed = progress[metrics.batch_id]["observedMetrics"]["twopc"]
        assert observed["rows"] == metrics.rows
    assert query.lastProgress["observedMetrics"]["twopc"]["rows"] == ROWS


def test_a_long_run_of_batch_writes_keeps_one_query_label(spark: Any, tmp_path: Path) -> None:
    """A scheduled job's batch writes, one key per run: every write's metrics land on the
    one ``query="batch-writes"`` series of the sink (each write has a query id of its own,
    so labelling by it would add series without bound), and the files are all there."""
    registry = CollectorRegistry()
    export = PrometheusExporter(registry)
    sink = twopc.create_sink("files", path=str(tmp_path / "daily"))
    writes = 12
    for run in range(writes):
        frame = spark.range(run * 10, run * 10 + 10)
        metrics = twopc.write_batch(frame, sink, "daily", write_id=f"run-{run}", on_metrics=export)
        assert metrics.write_id == f"run-{run}"
    again = twopc.write_batch(
        spark.range(0, 10), sink, "daily", write_id="run-0", on_metrics=export
    )
    assert again.status is twopc.BatchStatus.SKIPPED

    queries = {
        s.labels["query"]
        for family in registry.collect()
        for s in family.samples
        if "query" in s.labels
    }
    assert queries == {"batch-writes"}
    labels = {"sink": "daily", "query": "batch-writes", "backend": "files"}
    assert (
        registry.get_sample_value("twopc_batches_total", {**labels, "status": "committed"})
        == writes
    )
    assert registry.get_sample_value("twopc_batches_total", {**labels, "status": "skipped"}) == 1
    assert registry.get_sample_value("twopc_batch_rows_total", labels) == writes * 10
    ids = sorted(r["id"] for r in spark.read.parquet(str(tmp_path / "daily")).collect())
    assert ids == list(range(writes * 10))
