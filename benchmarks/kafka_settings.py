#!/usr/bin/env python
"""twopc's Kafka sink under several librdkafka producer settings, against Spark's Kafka
sink, in one run: which batching and compression settings pay off per mode.

    python -m benchmarks.kafka_settings                       # both modes, 1M rows, 3 reps
    python -m benchmarks.kafka_settings --modes atomic --reps 5

Each variant is the sink with its defaults plus the ``producer_config`` of
:data:`VARIANTS`; every run writes the same cached 1M-row frame (``kafka_shape`` of the
main benchmark's data: a string key and a JSON value per row, ~200 bytes) into a fresh
topic of 2 partitions, and is read back ``read_committed`` (every row once). The writers
alternate: each goes first in turn. Output: ``benchmarks/results/kafka_settings.json``
and a table on stdout (median seconds and the ratio Spark / variant, above 1 faster than
Spark). Needs the services' Kafka (``./scripts/services start kafka``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
from pathlib import Path
from typing import Any

import twopc
from benchmarks.spark_writers.config import BenchConfig, Endpoints, Workload
from benchmarks.spark_writers.data import kafka_shape
from benchmarks.spark_writers.runner import run_workload
from benchmarks.spark_writers.session import start_session
from benchmarks.spark_writers.targets import KafkaTarget, Target, Writer, sink_id

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE / "results" / "kafka_settings.json"

VARIANTS: dict[str, dict[str, Any]] = {
    # librdkafka's own defaults: linger.ms 5, batch.size 1,000,000 bytes,
    # batch.num.messages 10,000, no compression
    "twopc": {},
    "twopc_linger0": {"linger.ms": 0},
    "twopc_linger50": {"linger.ms": 50},
    "twopc_big_batches": {"linger.ms": 20, "batch.size": 4_000_000, "batch.num.messages": 100_000},
    "twopc_lz4": {"compression.type": "lz4"},
    "twopc_zstd": {"compression.type": "zstd"},
}


class KafkaSettingsTarget(KafkaTarget):
    """The Kafka target with one twopc side per producer-settings variant."""

    def alternatives(self) -> dict[str, str]:
        others = {v: f"twopc kafka {self.mode} {v}" for v in VARIANTS if v != "twopc"}
        return {**others, "spark": self.spark_label}

    def writer(self, side: str, work: Path) -> Writer:
        if side not in VARIANTS:
            return super().writer(side, work)
        sink = twopc.create_sink(
            "kafka",
            bootstrap_servers=self.bootstrap,
            topic=self.topic,
            mode=self.mode,
            transactional_id_prefix=f"bench-{side}",
            producer_config=dict(VARIANTS[side]) or None,
        )
        inner = twopc.foreach_batch(
            sink, sink_id=sink_id(f"{self.name}-{side}"), commit_log=str(work)
        )

        def write(df: Any, batch_id: int) -> None:
            inner(kafka_shape(df), batch_id)

        return write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--modes", default="per_partition,atomic")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[kafka-settings %(asctime)s] %(message)s")

    config = BenchConfig(rows=args.rows, partitions=args.partitions, reps=args.reps)
    endpoints = Endpoints.from_services(start=False)
    modes = [m for m in args.modes.split(",") if m]
    targets: dict[str, Target] = {
        f"kafka_{m}": KafkaSettingsTarget(endpoints.kafka_bootstrap, m) for m in modes
    }
    workload = Workload(args.rows, args.partitions, tuple(targets), "kafka settings")
    load = os.getloadavg()
    started = time.time()
    spark, _ = start_session(config)
    try:
        results = run_workload(spark, workload, targets, config)
    finally:
        spark.stop()
        for target in targets.values():
            target.cleanup()
    payload = {
        "meta": {
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "seconds": round(time.time() - started, 1),
            "load_average_before": [round(x, 2) for x in load],
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "rows": args.rows,
            "partitions": args.partitions,
            "reps": args.reps,
            "variants": VARIANTS,
        },
        "results": results,
    }
    args.output.write_text(json.dumps(payload, indent=1) + "\n")
    print(render(results))
    return 0


def render(results: list[dict[str, Any]]) -> str:
    """One row per mode and variant: median seconds (min-max), Spark's time / its time."""
    lines = ["| mode | writer | median s (min-max) | Spark / writer |", "|---|---|---:|---:|"]
    for result in results:
        mode = result["target"].removeprefix("kafka_")
        spark_s = result["alternatives"]["spark"]["median_seconds"]
        sides = {"twopc": result["twopc"], **result["alternatives"]}
        for side, summary in sides.items():
            seconds = summary["median_seconds"]
            spread = f"{summary['min_seconds']:.2f}-{summary['max_seconds']:.2f}"
            ratio = spark_s / seconds if seconds else float("nan")
            name = "Spark's Kafka sink" if side == "spark" else f"`{side}`"
            lines.append(f"| {mode} | {name} | {seconds:.2f} ({spread}) | {ratio:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
