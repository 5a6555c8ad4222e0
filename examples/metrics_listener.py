"""twopc's per-batch metrics joined with Spark's own progress, in a StreamingQueryListener.

Spark reports each micro-batch's progress (input rows, trigger time, ...) to
``StreamingQueryListener.onQueryProgress``; twopc hands its figures for the same batch
(rows written, bytes, time per phase, retries, recovered items) to ``on_metrics``. Both
carry the query id and the batch id, so one small class joins them and hands the combined
record to whatever metrics library you use (here: one JSON line on stdout per batch).

Run it (PySpark 4, Java 17) on a directory of JSON files, one micro-batch per file:

    python examples/metrics_listener.py --input IN --output OUT --checkpoint CHK

With ``--demo-rows N`` it first writes three input files of N rows into ``IN``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import twopc

Record = dict[str, Any]


class MetricsJoin:
    """Joins twopc's ``BatchMetrics`` with Spark's progress of the same batch.

    ``on_metrics`` runs inside ``foreachBatch``, before Spark reports the batch's progress,
    so twopc's figures wait here until the progress arrives. Each joined record goes to
    ``emit``: point it at your metrics client (a Prometheus gauge, a StatsD timer, ...).
    """

    def __init__(self, emit: Callable[[Record], None]) -> None:
        self._emit = emit
        self._lock = threading.Lock()
        self._waiting: dict[tuple[str, int], twopc.BatchMetrics] = {}
        self.emitted = 0

    def on_metrics(self, metrics: twopc.BatchMetrics) -> None:
        """Give this to ``twopc.foreach_batch(..., on_metrics=...)``."""
        with self._lock:
            self._waiting[(metrics.query_id, metrics.batch_id)] = metrics

    def on_progress(self, progress: Any) -> None:
        """Called from the listener with Spark's ``StreamingQueryProgress``."""
        with self._lock:
            metrics = self._waiting.pop((str(progress.id), int(progress.batchId)), None)
        if metrics is None:
            return  # a batch without data, or a query that does not use this sink
        self._emit(
            {
                "event": "batch_metrics",
                "query_id": metrics.query_id,
                "batch_id": metrics.batch_id,
                "spark_input_rows": int(progress.numInputRows),
                "spark_trigger_ms": int(progress.durationMs.get("triggerExecution", 0)),
                "twopc": {
                    "sink_id": metrics.sink_id,
                    "status": metrics.status,
                    "partitions": metrics.partitions,
                    "rows": metrics.rows,
                    "bytes": metrics.bytes,
                    "recover_seconds": metrics.recover_seconds,
                    "write_seconds": metrics.write_seconds,
                    "decide_seconds": metrics.decide_seconds,
                    "commit_seconds": metrics.commit_seconds,
                    "total_seconds": metrics.total_seconds,
                    "commit_retries": metrics.commit_retries,
                    "recovered_committed": metrics.recovered_committed,
                    "recovered_aborted": metrics.recovered_aborted,
                    "swept": metrics.swept,
                },
            }
        )
        self.emitted += 1

    def listener(self) -> Any:
        """A ``StreamingQueryListener`` for ``spark.streams.addListener``."""
        from pyspark.sql.streaming import StreamingQueryListener

        join = self

        class _Listener(StreamingQueryListener):  # type: ignore[misc]
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                join.on_progress(event.progress)

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        return _Listener()


def write_demo_input(directory: Path, rows: int, files: int = 3) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        lines = (json.dumps({"id": f * rows + i, "amount": i * 0.5}) for i in range(rows))
        (directory / f"orders-{f:04d}.json").write_text("\n".join(lines) + "\n")


def print_json(record: Record) -> None:
    print(json.dumps(record, sort_keys=True), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--demo-rows", type=int, default=0)
    args = parser.parse_args(argv)
    if args.demo_rows:
        write_demo_input(Path(args.input), args.demo_rows)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("twopc-metrics-listener")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    join = MetricsJoin(print_json)
    spark.streams.addListener(join.listener())

    orders = (
        spark.readStream.schema("id LONG, amount DOUBLE")
        .option("maxFilesPerTrigger", 1)
        .json(args.input)
    )
    sink = twopc.create_sink("files", path=args.output)
    writer = twopc.foreach_batch(sink, sink_id="orders", on_metrics=join.on_metrics)
    query = (
        orders.writeStream.option("checkpointLocation", args.checkpoint)
        .foreachBatch(writer)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    writer.close()  # the query stopped cleanly: remove its liveness record

    # Listener events arrive asynchronously; wait briefly for the last batch's progress.
    expected = len(writer.metrics)  # committed batches, and replays skipped after a crash
    deadline = time.monotonic() + 30
    while join.emitted < expected and time.monotonic() < deadline:
        time.sleep(0.2)
    spark.stop()
    return 0 if join.emitted == expected else 1


if __name__ == "__main__":
    sys.exit(main())
