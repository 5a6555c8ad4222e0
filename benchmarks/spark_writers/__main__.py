"""``python -m benchmarks.spark_writers``: twopc against Spark's own writers, in one run.

    python -m benchmarks.spark_writers                     # the full run (~25 min, 2 cores)
    python -m benchmarks.spark_writers --rows 20000 --reps 1 --scaling-rows 40000 \\
        --output /tmp/smoke.json --no-docs                 # a smoke run
    python -m benchmarks.spark_writers render              # docs table from the JSON
    python -m benchmarks.spark_writers --master standalone # all on a standalone cluster
    python -m benchmarks.spark_writers --runs 3            # three full runs, medians judged

See docs/benchmarks.md for what is measured and how.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.spark_writers.config import DOCS, RESULTS, TARGETS, BenchConfig, Endpoints

DEFAULT_OUTPUT = RESULTS / "spark_writers.json"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _names(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown target(s) {unknown}; known: {', '.join(TARGETS)}"
        )
    return names


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.spark_writers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", nargs="?", choices=("run", "render"), default="run")
    d = BenchConfig()
    parser.add_argument("--rows", type=int, default=d.rows, help="rows of the main workload")
    parser.add_argument("--partitions", type=int, default=d.partitions)
    parser.add_argument("--reps", type=int, default=d.reps, help="timed runs per writer")
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="full runs of the selected targets, one after the other; the JSON keeps every "
        "run and each ratio's median and min-max, goals judged on the median (issue 47)",
    )
    parser.add_argument(
        "--warmup-runs",
        type=int,
        default=None,
        help="untimed runs of each writer first (default: 1 below 3 reps, else 0)",
    )
    parser.add_argument(
        "--targets",
        type=_names,
        default=d.targets,
        help=f"comma-separated, from {','.join(TARGETS)}",
    )
    parser.add_argument(
        "--scaling-partitions",
        type=_ints,
        default=d.scaling_partitions,
        help="partition counts for the scaling targets ('' for none)",
    )
    parser.add_argument(
        "--scaling-rows",
        type=_ints,
        default=d.scaling_rows,
        help="row counts for the scaling targets ('' for none)",
    )
    parser.add_argument("--scaling-targets", type=_names, default=d.scaling_targets)
    parser.add_argument(
        "--overhead-batches",
        type=int,
        default=d.overhead_batches,
        help="micro-batches per overhead variant (0: skip)",
    )
    parser.add_argument(
        "--long-run-batches",
        type=int,
        default=10_000,
        help="micro-batches of the long run, without Spark (0: skip)",
    )
    parser.add_argument(
        "--long-run-at", type=_ints, default=(10, 1_000, 10_000), help="the long run's marks"
    )
    parser.add_argument(
        "--plots-dir",
        type=Path,
        default=None,
        help="where the PNG figures go (default: next to --docs; none with --no-docs)",
    )
    parser.add_argument("--jdbc-batchsize", type=int, default=d.jdbc_batchsize)
    parser.add_argument(
        "--master",
        default=d.master,
        help="Spark master; 'standalone' starts a master and --workers workers from the "
        "pyspark package for the run and stops them after it",
    )
    parser.add_argument("--driver-memory", default=d.driver_memory)
    parser.add_argument("--workers", type=int, default=d.workers, help="standalone workers")
    parser.add_argument("--worker-cores", type=int, default=d.worker_cores)
    parser.add_argument("--worker-memory", default=d.worker_memory)
    parser.add_argument(
        "--standalone-targets",
        type=_names,
        default=d.standalone_targets,
        help="after the run, the main workload of these targets once more on a standalone "
        "cluster, in a process of its own ('' for none)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=d.work_dir,
        help="scratch space for file output and commit logs",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="results JSON")
    parser.add_argument("--docs", type=Path, default=DOCS, help="page whose tables are rewritten")
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite the docs tables")
    parser.add_argument(
        "--no-start-services",
        action="store_true",
        help="use running services (POSTGRES_DSN etc. or scripts/services env)",
    )
    return parser.parse_args(argv)


def config_from(args: argparse.Namespace) -> BenchConfig:
    return BenchConfig(
        rows=args.rows,
        partitions=args.partitions,
        reps=args.reps,
        warmup_runs=args.warmup_runs,
        targets=args.targets,
        scaling_partitions=args.scaling_partitions,
        scaling_rows=args.scaling_rows,
        scaling_targets=args.scaling_targets,
        overhead_batches=args.overhead_batches,
        jdbc_batchsize=args.jdbc_batchsize,
        master=args.master,
        driver_memory=args.driver_memory,
        workers=args.workers,
        worker_cores=args.worker_cores,
        worker_memory=args.worker_memory,
        standalone_targets=args.standalone_targets if args.master != "standalone" else (),
        work_dir=args.work_dir,
    )


def run(config: BenchConfig, endpoints: Endpoints, command: str) -> dict[str, Any]:
    from benchmarks.spark_writers import report, standalone

    started = time.monotonic()
    load_before = [round(x, 2) for x in os.getloadavg()]
    with contextlib.ExitStack() as stack:
        master, conf, cluster = config.master, {}, None
        if config.master == "standalone":
            shape = (config.workers, config.worker_cores, config.worker_memory)
            running = stack.enter_context(standalone.cluster(*shape))
            master, conf = running.url, standalone.session_conf(running)
            cluster = {
                "url": master,
                "workers": config.workers,
                "worker_cores": config.worker_cores,
                "worker_memory": config.worker_memory,
            }
        measured = _measure(config, endpoints, master, conf)
    payload = {
        "meta": {
            "date": report.now(),
            "command": command,
            "duration_minutes": round((time.monotonic() - started) / 60, 1),
            "load_before": load_before,
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "machine": report.machine(),
            "servers": measured.pop("servers"),
            "spark": measured.pop("packages"),
            "cluster": cluster,
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(config).items()},
            "data": "id bigint, s10 string, s40 string, x double, ts timestamp",
        },
        **measured,
        "summary": report.summary(measured["results"]),
    }
    return payload


def run_all(
    config: BenchConfig, endpoints: Endpoints, command: str, runs: int, output: Path
) -> dict[str, Any]:
    """``runs`` full runs, one after the other; more than one are combined (``spread``),
    and the JSON is written after each so a stopped series keeps what it measured."""
    from benchmarks.spark_writers import report, spread

    if runs < 1:
        raise SystemExit(f"--runs must be at least 1, not {runs}")
    if runs == 1:
        return run(config, endpoints, command)
    done: list[dict[str, Any]] = []
    for number in range(1, runs + 1):
        logging.info("run %d of %d", number, runs)
        done.append(run(config, endpoints, command))
        report.write_json(output, spread.combine(done, command))
    return spread.combine(done, command)


def _measure(
    config: BenchConfig, endpoints: Endpoints, master: str, conf: dict[str, str]
) -> dict[str, Any]:
    """Every workload, the overhead and the floor, in one SparkSession on ``master``."""
    from benchmarks.spark_writers import overhead, report, runner
    from benchmarks.spark_writers.session import start_session
    from benchmarks.spark_writers.targets import build_targets

    workloads = config.workloads()
    names = tuple(dict.fromkeys(t for w in workloads for t in w.targets))
    targets = build_targets(names, endpoints, config)
    spark, packages = start_session(config, master, conf)
    results: list[dict[str, Any]] = []
    try:
        for target in targets.values():
            target.prepare()
        for workload in workloads:
            logging.info(
                "workload %s: %d rows, %d partitions",
                workload.label,
                workload.rows,
                workload.partitions,
            )
            results += runner.run_workload(spark, workload, targets, config)
        measured = overhead.measure(spark, config) if config.overhead_batches > 0 else None
        floor = overhead.measure_floor(spark, config) if config.overhead_batches > 0 else None
        servers = report.server_versions(endpoints, targets)
    finally:
        for target in targets.values():
            target.cleanup()
        spark.stop()
    return {
        "servers": servers,
        "packages": packages,
        "results": results,
        "overhead": measured,
        "floor": floor,
    }


def run_standalone(config: BenchConfig, endpoints: Endpoints) -> dict[str, Any]:
    """The main workload of ``config.standalone_targets`` on a standalone cluster, in a
    child process (a JVM of its own for the driver, whose packages resolve afresh); its
    results for the ``standalone`` part of the JSON."""
    from benchmarks.spark_writers.targets import SINK_ID_PREFIX_VARIABLE

    with tempfile.TemporaryDirectory(prefix="twopc-bench-standalone-") as tmp:
        output = Path(tmp) / "standalone.json"
        argv = [
            "--master", "standalone",
            "--rows", str(config.rows), "--partitions", str(config.partitions),
            "--reps", str(config.reps), "--warmup-runs", str(config.warmups),
            "--targets", ",".join(config.standalone_targets),
            "--scaling-partitions", "", "--scaling-rows", "", "--overhead-batches", "0",
            "--long-run-batches", "0",
            "--jdbc-batchsize", str(config.jdbc_batchsize),
            "--driver-memory", config.driver_memory, "--workers", str(config.workers),
            "--worker-cores", str(config.worker_cores),
            "--worker-memory", config.worker_memory,
            "--work-dir", str(config.work_dir / "standalone"),
            "--output", str(output), "--no-docs", "--no-start-services",
        ]  # fmt: skip
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": endpoints.kafka_bootstrap,
            "POSTGRES_DSN": endpoints.postgres_dsn,
            "MYSQL_DSN": endpoints.mysql_dsn,
            SINK_ID_PREFIX_VARIABLE: "bench-standalone",
        }
        logging.info("the throughput table once more, on a standalone cluster")
        subprocess.run([sys.executable, "-m", "benchmarks.spark_writers", *argv], env=env,
                       check=True)  # fmt: skip
        child = json.loads(output.read_text(encoding="utf-8"))
    meta = child["meta"]
    return {
        "command": meta["command"],
        "duration_minutes": meta["duration_minutes"],
        "load_before": meta["load_before"],
        "load_after": meta["load_after"],
        "cluster": meta["cluster"],
        "results": child["results"],
        "summary": child["summary"],
    }


def _write_over_time(payload: dict[str, Any], args: argparse.Namespace) -> None:
    """The figures, and the docs block of the long run and the figures."""
    from benchmarks.spark_writers import over_time

    directory = args.plots_dir or (None if args.no_docs else args.docs.parent)
    if directory is not None:
        for path in over_time.write_plots(payload, directory):
            print(f"figure: {path}")
    if not args.no_docs:
        over_time.write_docs(payload, args.docs)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO, format="[bench %(asctime)s] %(message)s", datefmt="%H:%M:%S"
    )
    logging.getLogger("twopc").setLevel(logging.WARNING)  # one line per batch otherwise
    from benchmarks.spark_writers import over_time, report

    if args.command == "render":
        payload = json.loads(args.output.read_text(encoding="utf-8"))
        report.write_docs(payload, args.docs)
        _write_over_time(payload, args)
        print(f"wrote the tables of {args.docs} from {args.output}")
        return 0
    config = config_from(args)
    endpoints = Endpoints.from_services(start=not args.no_start_services)
    command = "python -m benchmarks.spark_writers " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    if config.master == "standalone":
        # SIGTERM as an exception, so that the cluster is stopped on the way out
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    payload = run_all(config, endpoints, command.strip(), args.runs, args.output)
    if args.long_run_batches > 0:
        payload["long_run"] = over_time.run_long(
            args.long_run_batches, args.long_run_at, config.work_dir
        )
    report.write_json(args.output, payload)
    if config.standalone_targets:
        payload["standalone"] = run_standalone(config, endpoints)
        report.write_json(args.output, payload)
    print(report.render(payload))
    if not args.no_docs:
        report.write_docs(payload, args.docs)
    _write_over_time(payload, args)
    print(f"results: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
