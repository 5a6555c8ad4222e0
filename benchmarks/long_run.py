"""twopc's cost over a long query: many micro-batches of one query, without Spark.

A real Spark streaming query with 10,000 micro-batches takes hours on two cores (each
batch is at least one Spark job, 0.1-0.3 s), so this drives twopc's driver side directly:
``twopc.local.foreach_batch(..., processes=False)``, the writer ``foreachBatch`` would call,
with the local engine running each partition's phase 1 inline, on tiny batches (2
partitions of 5 rows by default). What it measures per batch is twopc's own work outside
phase 1: the liveness record, the commit log's reads and writes (runs record, decision,
done, pruning), the commit, and the checks before phase 1. That is the part that could
grow with the query's age; Spark's own per-batch work is the same for any writer.

At the marks (batches 10, 1,000 and 10,000 by default) it records the median of that time
over the ``--window`` batches before the mark, and the commit log's size (files and bytes
under its directory), then says whether each stayed flat:

* time: the median at the last mark is at most 1.5 times the median at the first mark,
  plus 1 ms for a shared machine's noise;
* log: once past the log's retention (``log_retention``, 100 finished batches per query),
  the log holds no more files at a later mark than at an earlier one, and at most 10 %
  more bytes. Before it (batch 10) the log is smaller by design.

    .venv/bin/python -m benchmarks.long_run                      # 10,000 batches, files sink
    .venv/bin/python -m benchmarks.long_run --batches 30 --at 10,20,30 --output /tmp/l.json

It writes ``results/long_run.json`` (``--output``); ``python -m benchmarks.spark_writers``
runs the same measurement as its long-run section.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

import twopc
import twopc.local

RETENTION = 100
"""The coordinator's default ``log_retention``: finished batches kept per query."""

TIME_FACTOR = 1.5
TIME_SLACK_MS = 1.0
BYTES_FACTOR = 1.1

RESULTS = Path(__file__).parent / "results"


def _tables(batch_id: int, partitions: int, rows: int) -> list[pa.Table]:
    start = batch_id * partitions * rows
    return [
        pa.table({"id": pa.array(range(start + p * rows, start + (p + 1) * rows), pa.int64())})
        for p in range(partitions)
    ]


MARKERS = "bench_long_run_markers"
"""The marker table of the SQL sinks' long runs (dropped before and after a run)."""


def _sink(name: str, work: Path) -> twopc.Sink[Any]:
    if name == "files":
        return twopc.create_sink("files", path=str(work / "out"))
    if name in ("postgres", "mysql"):
        _reset_sql(name)
        return twopc.create_sink(
            name, dsn=_dsn(name), table="bench_long_run", marker_table=MARKERS, create_table=True
        )
    from benchmarks.coordination import NullSink

    return NullSink()


def _dsn(name: str) -> str:
    from benchmarks.spark_writers.config import Endpoints

    endpoints = Endpoints.from_services(start=True)
    return endpoints.postgres_dsn if name == "postgres" else endpoints.mysql_dsn


def _sql(name: str, statement: str) -> list[tuple[Any, ...]]:
    """One statement on the services' server, through the sink's own connection."""
    sink = twopc.create_sink(name, dsn=_dsn(name), table="bench_long_run")
    conn = sink.connect(autocommit=True)  # type: ignore[attr-defined]
    try:
        cursor = conn.cursor()
        cursor.execute(statement)
        return list(cursor.fetchall()) if cursor.description else []
    finally:
        conn.close()


def _reset_sql(name: str) -> None:
    for table in ("bench_long_run", MARKERS, f"{MARKERS}_writers"):
        _sql(name, f"DROP TABLE IF EXISTS {table}")


def target_rows(name: str) -> dict[str, int]:
    """What grows in the target: the marker table's rows (SQL sinks); nothing else is
    counted."""
    if name not in ("postgres", "mysql"):
        return {}
    (count,) = _sql(name, f"SELECT count(*) FROM {MARKERS}")[0]
    return {"marker_rows": int(count)}


class _FsyncClock:
    """Time spent in ``os.fsync`` outside phase 1, per batch: what the disk's latency adds
    to the coordination time. On a shared machine it moves with the other processes' I/O,
    while the work (the CPU time, the number of fsyncs) stays the same."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._in_phase1 = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        from twopc._internal import Phase1Task

        fsync, run = os.fsync, Phase1Task.run
        clock = self

        def timed_fsync(fd: int) -> None:
            if clock._in_phase1:
                fsync(fd)
                return
            before = time.perf_counter()
            try:
                fsync(fd)
            finally:
                clock.seconds += time.perf_counter() - before
                clock.calls += 1

        def phase1(task: Any, *args: Any, **kwargs: Any) -> Any:
            clock._in_phase1 = True
            try:
                return run(task, *args, **kwargs)
            finally:
                clock._in_phase1 = False

        os.fsync = timed_fsync
        Phase1Task.run = phase1  # type: ignore[method-assign]
        try:
            yield
        finally:
            os.fsync = fsync
            Phase1Task.run = run  # type: ignore[method-assign]

    def take(self) -> tuple[float, int]:
        """Milliseconds and calls since the last call."""
        taken = (self.seconds * 1000, self.calls)
        self.seconds, self.calls = 0.0, 0
        return taken


def log_size(directory: Path) -> dict[str, int]:
    """Files and bytes under ``directory`` (the commit log of one sink id)."""
    files = size = 0
    for root, _, names in os.walk(directory):
        for name in names:
            try:
                size += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # a temporary file that just went
                continue
            files += 1
    return {"files": files, "bytes": size}


def _window(values: Sequence[float], end: int, width: int) -> list[float]:
    """The values of batches ``end - width + 1 .. end``, leaving batch 0 (recovery) out."""
    return list(values[max(1, end - width + 1) : end + 1])


def measure(
    *,
    batches: int = 10_000,
    marks: Sequence[int] = (10, 1_000, 10_000),
    sink_name: str = "files",
    partitions: int = 2,
    rows: int = 5,
    window: int = 100,
    samples: int = 100,
    work_dir: Path | None = None,
) -> dict[str, Any]:
    """Run ``batches`` micro-batches of one query; the per-batch coordination time and the
    commit log's size at ``marks``, and the flat/not-flat verdicts."""
    marks = sorted(m for m in marks if 0 < m <= batches)
    if not marks:
        raise ValueError(f"no mark within 1..{batches}")
    every = max(1, batches // max(1, samples))
    with tempfile.TemporaryDirectory(prefix="twopc-long-run-", dir=work_dir) as scratch:
        work = Path(scratch)
        sink = _sink(sink_name, work)
        writer = twopc.local.foreach_batch(
            sink,
            "long-run",
            commit_log=None if sink_name == "files" else str(work / "log"),
            processes=False,
        )
        query_id = str(uuid.uuid4())
        coordination: list[float] = []
        fsyncs: list[float] = []
        fsync_calls: list[int] = []
        cpu: list[float] = []
        clock = _FsyncClock()
        at_marks: list[dict[str, Any]] = []
        series: list[dict[str, Any]] = []
        log_dir: Path | None = None
        started = time.perf_counter()
        stack = contextlib.ExitStack()
        stack.enter_context(clock.installed())
        for batch_id in range(batches):
            tables = _tables(batch_id, partitions, rows)
            cpu_before = time.process_time()
            before = time.perf_counter()
            metrics = writer.write(query_id, batch_id, tables)
            wall = time.perf_counter() - before
            cpu.append((time.process_time() - cpu_before) * 1000)
            coordination.append((wall - metrics.write_seconds) * 1000)
            waited, calls = clock.take()
            fsyncs.append(waited)
            fsync_calls.append(calls)
            if log_dir is None:
                log_dir = Path(writer.coordinator(lambda: None).commit_log.url)
            number = batch_id + 1  # batches run so far
            if number in marks:
                recent = _window(coordination, batch_id, window)
                at_marks.append(
                    {
                        "batch": number,
                        "median_ms": round(statistics.median(recent), 3),
                        "p95_ms": round(sorted(recent)[int(0.95 * (len(recent) - 1))], 3),
                        "cpu_median_ms": round(
                            statistics.median(_window(cpu, batch_id, window)), 3
                        ),
                        "fsync_median_ms": round(
                            statistics.median(_window(fsyncs, batch_id, window)), 3
                        ),
                        "without_fsync_median_ms": round(
                            statistics.median(
                                c - f
                                for c, f in zip(
                                    _window(coordination, batch_id, window),
                                    _window(fsyncs, batch_id, window),
                                    strict=True,
                                )
                            ),
                            3,
                        ),
                        "fsyncs_per_batch": statistics.median(
                            _window(fsync_calls, batch_id, window)
                        ),
                        "window": len(recent),
                        "log": log_size(log_dir),
                        "log_batches": metrics.commit_log_batches,
                        **target_rows(sink_name),
                        "elapsed_seconds": round(time.perf_counter() - started, 1),
                    }
                )
            if number % every == 0 and number > 1:
                recent = _window(coordination, batch_id, min(window, every))
                series.append(
                    {
                        "batch": number,
                        "median_ms": round(statistics.median(recent), 3),
                        "fsync_median_ms": round(
                            statistics.median(_window(fsyncs, batch_id, min(window, every))), 3
                        ),
                        "log_files": log_size(log_dir)["files"],
                    }
                )
        stack.close()
        elapsed = time.perf_counter() - started
        writer.close()
        if sink_name in ("postgres", "mysql"):
            _reset_sql(sink_name)
    return {
        "sink": sink_name,
        "entry": "twopc.local.foreach_batch(processes=False): the writer, phase 1 inline",
        "batches": batches,
        "partitions": partitions,
        "rows_per_partition": rows,
        "window": window,
        "log_retention": RETENTION,
        "marks": at_marks,
        "series": series,
        "first_batch_ms": round(coordination[0], 3),
        "wall_seconds": round(elapsed, 1),
        **verdicts(at_marks),
    }


def verdicts(marks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Whether the coordination time and the commit log's size stayed flat (see the
    module docstring for the rules)."""
    first, last = marks[0], marks[-1]
    time_limit = TIME_FACTOR * first["median_ms"] + TIME_SLACK_MS
    work_limit = TIME_FACTOR * first["without_fsync_median_ms"] + TIME_SLACK_MS
    past = [m for m in marks if m["batch"] > RETENTION]
    log_flat = all(
        later["log"]["files"] <= earlier["log"]["files"]
        and later["log"]["bytes"] <= BYTES_FACTOR * earlier["log"]["bytes"]
        for earlier, later in itertools.pairwise(past)
    )
    return {
        "time_limit_ms": round(time_limit, 3),
        "time_flat": last["median_ms"] <= time_limit,
        # the same rule without the time spent waiting for fsyncs, and the fsyncs' count:
        # the work itself, apart from the disk's latency on a shared machine
        "without_fsync_limit_ms": round(work_limit, 3),
        "without_fsync_flat": last["without_fsync_median_ms"] <= work_limit,
        "fsyncs_flat": last["fsyncs_per_batch"] <= first["fsyncs_per_batch"],
        "log_flat": log_flat,
        "log_compared": [m["batch"] for m in past],
    }


def describe(result: dict[str, Any]) -> str:
    lines = [
        f"{result['sink']}: {result['batches']:,} batches of {result['partitions']} x "
        f"{result['rows_per_partition']} rows in {result['wall_seconds']:.0f} s"
    ]
    for m in result["marks"]:
        lines.append(
            f"  batch {m['batch']:>6,}: coordination median {m['median_ms']:7.3f} ms "
            f"(p95 {m['p95_ms']:.3f}, CPU {m['cpu_median_ms']:.3f}, fsync waits "
            f"{m['fsync_median_ms']:.3f} in {m['fsyncs_per_batch']:g} calls), commit log "
            f"{m['log']['files']} files, {m['log']['bytes']:,} bytes"
            + (f", marker rows {m['marker_rows']:,}" if "marker_rows" in m else "")
        )
    lines.append(
        f"  time flat: {result['time_flat']} (limit {result['time_limit_ms']} ms); without "
        f"fsync waits: {result['without_fsync_flat']} (limit {result['without_fsync_limit_ms']}"
        f" ms); fsyncs per batch flat: {result['fsyncs_flat']}; "
        f"log flat: {result['log_flat']} (compared at {result['log_compared']})"
    )
    return "\n".join(lines)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.long_run", description=__doc__)
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--at", type=_ints, default=(10, 1_000, 10_000), help="marks")
    parser.add_argument("--sink", choices=["files", "null", "postgres", "mysql"], default="files")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rows", type=int, default=5, help="rows per partition")
    parser.add_argument("--window", type=int, default=100, help="batches per median")
    parser.add_argument("--output", type=Path, default=RESULTS / "long_run.json")
    args = parser.parse_args(argv)
    load_before = [round(x, 2) for x in os.getloadavg()]
    result = measure(
        batches=args.batches,
        marks=args.at,
        sink_name=args.sink,
        partitions=args.partitions,
        rows=args.rows,
        window=args.window,
    )
    print(describe(result))
    from benchmarks.coordination import _revision

    document = {
        "twopc": twopc.__version__,
        "revision": _revision(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": "python -m benchmarks.long_run "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "result": result,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
