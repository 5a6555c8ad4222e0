"""Drive one twopc sink the way one Spark task does, without Spark, for a profiler.

    python -m benchmarks.spark_writers.profile postgres_append --rows 500000
    py-spy record -o /tmp/pg.txt --format raw -- \\
        .venv/bin/python -m benchmarks.spark_writers.profile postgres_upsert
    python -m benchmarks.spark_writers.profile kafka_atomic --pyinstrument
    python -m benchmarks.spark_writers.profile --summarize /tmp/pg.txt   # top frames

The rows are those of the benchmark (id, s10, s40, x, ts; Kafka: key and JSON value),
built with pyarrow and cut into Spark's default Arrow batch size (10,000 rows); begin,
invoke per batch, pre_commit and commit run in this process and are timed apart.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
from benchmarks.spark_writers.config import TARGETS, BenchConfig, Endpoints
from benchmarks.spark_writers.targets import KafkaTarget, build_targets

import twopc

BATCH_ROWS = 10_000


def table(rows: int) -> pa.Table:
    """The benchmark's columns, the same values as ``data.generate``."""
    ids = list(range(rows))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "s10": [hashlib.sha256(str(i).encode()).hexdigest()[:10] for i in ids],
            "s40": [hashlib.sha256(str(i * 7).encode()).hexdigest()[:40] for i in ids],
            "x": pa.array([i * 1.5 for i in ids], pa.float64()),
            "ts": pa.array([(1_700_000_000 + i) * 1_000_000 for i in ids], pa.int64()).cast(
                pa.timestamp("us", tz="UTC")
            ),
        }
    )


def kafka_table(data: pa.Table) -> pa.Table:
    rows = data.to_pylist()
    return pa.table(
        {
            "key": [str(r["id"]) for r in rows],
            "value": [json.dumps(r, default=str, separators=(",", ":")) for r in rows],
        }
    )


def drive(sink: Any, data: pa.Table, work: Path) -> dict[str, float]:
    """begin, invoke per batch, pre_commit, commit: seconds of each."""
    ctx = twopc.TaskContext("bench-profile", str(uuid.uuid4()), 0, 0)
    times: dict[str, float] = {}
    started = time.perf_counter()
    txn = sink.begin_transaction(ctx)
    times["begin"] = time.perf_counter() - started
    mark = time.perf_counter()
    for batch in data.to_batches(max_chunksize=BATCH_ROWS):
        sink.invoke(txn, batch)
    times["invoke"] = time.perf_counter() - mark
    mark = time.perf_counter()
    committable = sink.pre_commit(txn)
    times["pre_commit"] = time.perf_counter() - mark
    mark = time.perf_counter()
    if isinstance(sink, twopc.CommitsInTask):
        sink.commit_in_task(txn)
    else:
        sink.commit([committable])
    times["commit"] = time.perf_counter() - mark
    times["total"] = time.perf_counter() - started
    return times


def summarize(raw: Path, top: int = 12) -> str:
    """The frames with the most samples (self and inclusive) inside :func:`drive`, from a
    ``py-spy record --format raw`` file."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not any(f.startswith("drive ") for f in frames):
            continue  # set-up and read-back, not the sink
        total += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
    lines = [f"{total} samples in drive()", "self:"]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    lines.append("inclusive (twopc frames):")
    lines += [
        f"  {100 * n / total:5.1f}%  {f}" for f, n in inclusive.most_common() if "twopc" in f
    ][:top]
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--summarize":
        print(summarize(Path(sys.argv[2])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("target", choices=TARGETS)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--pyinstrument", action="store_true", help="print a pyinstrument tree")
    args = parser.parse_args()
    config = BenchConfig()
    endpoints = Endpoints.from_services(start=False)
    target = build_targets((args.target,), endpoints, config)[args.target]
    work = config.work_dir / "profile"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data = table(args.rows)
    if isinstance(target, KafkaTarget):
        data = kafka_table(data)
    target.prepare()
    target.begin_workload(range(args.rows))  # the *_upsert_existing tables hold these ids
    target.reset()
    sink = target.twopc_sink()
    profiler = None
    if args.pyinstrument:
        from pyinstrument import Profiler

        profiler = Profiler()
        profiler.start()
    times = drive(sink, data, work)
    if profiler is not None:
        profiler.stop()
        print(profiler.output_text(unicode=False, color=False, show_all=False))
    shown = target.read_back("twopc")
    target.cleanup()
    print(
        f"{args.target}: {args.rows} rows, {args.rows / times['total']:,.0f} rows/s; "
        + ", ".join(f"{k} {v:.3f}s" for k, v in times.items())
        + f"; target shows {shown.rows} rows"
    )
    return 0 if shown.rows == args.rows else 1


if __name__ == "__main__":
    sys.exit(main())
