"""twopc's own work per micro-batch, without Spark: recovery checks, the decision, the
commit, the commit log's upkeep.

Runs ``--batches`` micro-batches of one query through the coordinator with the local
engine (tasks inline, so no process start is counted) and reports, per batch, the time
outside phase 1: ``total - write``, where ``write`` is phase 1 itself. Two sinks:

* ``null``: prepares and commits nothing, so what is left is the coordinator's own cost;
* ``files``: the files sink on the local disk (rename-based commit, decision next to the
  data), the cheapest real backend.

``--entry format`` measures ``format("twopc")``'s driver side instead: Spark runs it in a
fresh Python process per batch, so each batch gets new coordinators, one where the writer is
planned (it finishes decided batches) and one for ``commit``, which reads everything it
checks from the commit log. ``null-task`` is a sink that commits in the task (the path
that also looks for open work of earlier runs). ``--other-queries N`` puts N earlier
queries (old checkpoints), each with finished batches, in the log first: the format path
reads the whole log, so its cost grows with them.

Every line also counts the commit log's storage calls per batch (median): directory
listings, ``exists`` checks and file reads, under the log's root only.

It runs against whichever twopc is importable, also one from before the v2 contract
(0.1, ``--entry foreach`` only), so that the same script measures before and after a
change::

    .venv/bin/python -m benchmarks.coordination --batches 300
    /path/to/old/checkout/.venv/bin/python benchmarks/coordination.py --batches 300

It prints one line per sink and writes ``results/coordination.json`` (``--output``);
``--profile FILE`` writes cProfile's statistics of the batches after the first ten
(``results/profiles/coordination-files-*.txt`` are such files). The
CPU time per batch (the whole batch, phase 1 included) compares two versions fairly on a
busy machine; the wall-clock figures need a quiet one.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

import twopc
from twopc._internal import (
    BatchRun,
    CommitPath,
    Coordinator,
    Decision,
    Phase1Task,
    ReportedBatches,
    commit_log_module,
)
from twopc.local import LocalEngine


@dataclass
class _Txn:
    ctx: twopc.TaskContext
    rows: int = 0


@dataclass(frozen=True)
class _Rows(twopc.Payload):
    version: ClassVar[int] = 1
    rows: int


class _CountingSink(twopc.Sink[_Txn]):
    """The task side of both null sinks: counts rows, writes nothing."""

    def begin_transaction(self, ctx: twopc.TaskContext) -> _Txn:
        return _Txn(ctx)

    def invoke(self, txn: _Txn, batch: pa.RecordBatch) -> None:
        txn.rows += batch.num_rows

    def pre_commit(self, txn: _Txn) -> twopc.Committable:
        return twopc.Committable.for_task(txn.ctx, _Rows(txn.rows))

    def abort(self, txn: _Txn) -> None:
        return None


class NullSink(_CountingSink, twopc.CommitsOnDriver):
    """Counts rows, writes nothing: what remains is the coordinator's cost."""

    backend_name = "null"

    def commit(self, committables: Sequence[twopc.Committable]) -> list[twopc.CommitOutcome]:
        return [twopc.CommitOutcome.COMMITTED for _ in committables]

    def abort_prepared(self, committables: Sequence[twopc.Committable]) -> None:
        return None

    def recover(self, sink_id: str) -> list[twopc.Committable]:
        return []


class NullTaskSink(_CountingSink, twopc.CommitsInTask[_Txn]):
    """Commits nothing in the task; keeps no markers: the in-task path's own cost."""

    backend_name = "null-task"

    def commit_in_task(self, txn: _Txn) -> twopc.CommitOutcome:
        return twopc.CommitOutcome.COMMITTED

    def committed_partitions(
        self, scope: twopc.RecoveryScope, batch_id: int, footprint: twopc.Footprint
    ) -> set[int] | None:
        return set()


def _partitions(batch_id: int, partitions: int, rows: int) -> list[pa.Table]:
    start = batch_id * partitions * rows
    return [
        pa.table({"id": pa.array(range(start + p * rows, start + (p + 1) * rows), pa.int64())})
        for p in range(partitions)
    ]


_COUNTED = {"ls": "listings", "exists": "exists", "cat_file": "reads"}


@contextlib.contextmanager
def _counting_log_calls(log: Any) -> Iterator[Counter[str]]:
    """Count the storage calls under ``log``'s root (fsspec caches filesystem instances,
    so the data's own calls go through the same object and are left out by path)."""
    fs, root = log._fs, log._root
    counts: Counter[str] = Counter()
    originals = {name: getattr(fs, name) for name in _COUNTED}

    def counted(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(path: str, *args: Any, **kwargs: Any) -> Any:
            if str(path).startswith(root):
                counts[_COUNTED[name]] += 1
            return call(path, *args, **kwargs)

        return wrapper

    for name, call in originals.items():
        setattr(fs, name, counted(name, call))
    # a local log directory is listed with os.listdir, past fsspec (the commit log
    # module's _list_names): count those listings too
    module: Any = commit_log_module()
    listed = getattr(module, "_list_names", None)
    if listed is not None:
        from twopc.storage import is_local

        def list_names(fs: Any, directory: str, **kwargs: Any) -> list[str]:
            if str(directory).startswith(root) and is_local(fs):
                counts["listings"] += 1
            return listed(fs, directory, **kwargs)  # type: ignore[no-any-return]

        module._list_names = list_names
    try:
        yield counts
    finally:
        for name in originals:
            delattr(fs, name)  # the class's own methods again
        if listed is not None:
            module._list_names = listed


def _sink(name: str, work: str) -> twopc.Sink[Any]:
    if name == "null":
        return NullSink()
    if name == "null-task":
        return NullTaskSink()
    return twopc.create_sink("files", path=f"{work}/out")


def _fill_other_queries(log: Any, sink: twopc.Sink[Any], queries: int, batches: int = 3) -> None:
    """``queries`` earlier queries, each with ``batches`` finished batches."""
    path = CommitPath.of(sink)
    for q in range(queries):
        query_id = f"earlier-{q:03d}"
        for batch_id in range(batches):
            run = BatchRun(twopc.Footprint(sink.naming(), 2), None, path=path)
            log.record_run(query_id, batch_id, run)
            log.record_decision(Decision("bench", query_id, batch_id, (), path=path))
            log.mark_done(query_id, batch_id)


def _foreach_batches(
    sink: twopc.Sink[Any], log_url: str, batches: int, partitions: int, rows: int
) -> Iterator[tuple[float, float, float]]:
    """``foreach_batch``: one coordinator runs every batch. Yields (outside phase 1,
    recovery, CPU) in milliseconds per batch."""
    coordinator = Coordinator(sink, "bench", twopc.CommitLog(log_url))
    for batch_id in range(batches):
        engine = LocalEngine(_partitions(batch_id, partitions, rows), processes=False)
        before = time.process_time()
        metrics = coordinator.run_batch("query", batch_id, engine)
        cpu = (time.process_time() - before) * 1000
        outside = (metrics.total_seconds - metrics.write_seconds) * 1000
        yield outside, metrics.recover_seconds * 1000, cpu


def _format_batches(
    sink: twopc.Sink[Any], log_url: str, batches: int, partitions: int, rows: int
) -> Iterator[tuple[float, float, float]]:
    """``format("twopc")``: per batch a coordinator where the writer is planned (finishing
    decided batches), phase 1 inline, then a fresh coordinator for ``commit``."""
    path = CommitPath.of(sink)
    for batch_id in range(batches):
        tables = _partitions(batch_id, partitions, rows)
        before = time.process_time()
        started = time.perf_counter()
        ReportedBatches(Coordinator(sink, "bench", twopc.CommitLog(log_url))).finish_decided()
        planned = time.perf_counter() - started
        task = Phase1Task(sink, "bench", "query", batch_id, path)
        reports = [task.run(p, 0, table.to_batches()) for p, table in enumerate(tables)]
        committing = time.perf_counter()
        ReportedBatches(Coordinator(sink, "bench", twopc.CommitLog(log_url))).commit(
            "query", batch_id, reports
        )
        outside = planned + time.perf_counter() - committing
        yield outside * 1000, 0.0, (time.process_time() - before) * 1000


def measure(
    sink_name: str,
    batches: int,
    partitions: int,
    rows: int,
    *,
    entry: str = "foreach",
    other_queries: int = 0,
    profile: Path | None = None,
) -> dict[str, Any]:
    """Milliseconds per batch outside phase 1, over ``batches`` batches of one query, and
    the commit log's storage calls per batch. ``profile``: write cProfile's statistics of
    the batches after the first ten there (cumulative and internal time, as text)."""
    with tempfile.TemporaryDirectory(prefix="twopc-coord-") as work:
        sink = _sink(sink_name, work)
        log_url = f"{work}/log"
        if other_queries:
            _fill_other_queries(twopc.CommitLog(log_url), sink, other_queries)
        outside: list[float] = []
        recover: list[float] = []
        cpu: list[float] = []
        calls: list[Counter[str]] = []
        run = _format_batches if entry == "format" else _foreach_batches
        started = time.perf_counter()
        # fsspec hands every CommitLog of this URL the same filesystem object: the
        # coordinators' calls are counted through this one
        profiler = cProfile.Profile() if profile is not None else None
        profiled = 0.0
        with _counting_log_calls(twopc.CommitLog(log_url)) as counts:
            for index, (out, rec, used) in enumerate(run(sink, log_url, batches, partitions, rows)):
                outside.append(out)
                recover.append(rec)
                cpu.append(used)
                calls.append(Counter(counts))
                counts.clear()
                if profiler is not None and index == 9:
                    profiled = time.perf_counter()
                    profiler.enable()  # the batches from the eleventh on
            if profiler is not None:
                profiler.disable()
                profiled = time.perf_counter() - profiled
        elapsed = time.perf_counter() - started
        if profiler is not None and profile is not None:
            _write_profile(profiler, profile, profiled, max(1, batches - 10))
    first = min(10, len(outside) - 1)  # after the first batches' recovery
    steady = outside[first:]
    counted = calls[first:]
    return {
        "sink": sink_name,
        "entry": entry,
        "other_queries": other_queries,
        "batches": batches,
        "partitions": partitions,
        "rows_per_partition": rows,
        "median_ms": round(statistics.median(steady), 3),
        "p95_ms": round(sorted(steady)[int(0.95 * (len(steady) - 1))], 3),
        "mean_ms": round(statistics.fmean(steady), 3),
        "first_batch_ms": round(outside[0], 3),
        "recover_median_ms": round(statistics.median(recover[first:]), 3),
        # CPU time of the whole batch (phase 1 included, inline): what the process did,
        # whatever else the machine ran meanwhile
        "cpu_median_ms": round(statistics.median(cpu[first:]), 3),
        "log_calls_per_batch": {
            kind: statistics.median(c[kind] for c in counted) for kind in _COUNTED.values()
        },
        "wall_seconds": round(elapsed, 2),
    }


def _write_profile(profiler: cProfile.Profile, path: Path, seconds: float, batches: int) -> None:
    text = io.StringIO()
    text.write(
        f"{batches} batches profiled, wall {seconds / batches * 1000:.1f} ms per batch "
        "(phase 1 included, under the profiler)\n"
    )
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(60)
    stats.sort_stats("tottime").print_stats(25)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.getvalue().replace(str(Path.cwd()) + "/", ""))


def _revision() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(twopc.__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.coordination")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rows", type=int, default=500, help="rows per partition")
    parser.add_argument(
        "--sink", action="append", choices=["null", "null-task", "files"], default=[]
    )
    parser.add_argument(
        "--entry",
        choices=["foreach", "format"],
        default="foreach",
        help='foreach_batch (one coordinator), or format("twopc") (fresh ones per batch)',
    )
    parser.add_argument(
        "--other-queries", type=int, default=0, help="earlier queries in the log beforehand"
    )
    parser.add_argument(
        "--output", type=Path, default=Path(__file__).parent / "results" / "coordination.json"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="cProfile the batches after the first ten; the statistics go to this file "
        "(one sink at a time)",
    )
    args = parser.parse_args(argv)
    results = [
        measure(
            name,
            args.batches,
            args.partitions,
            args.rows,
            entry=args.entry,
            other_queries=args.other_queries,
            profile=args.profile,
        )
        for name in (args.sink or ["null", "files"])
    ]
    document = {
        "twopc": getattr(twopc, "__version__", "?"),
        "contract": "v2",
        "revision": _revision(),
        "results": results,
    }
    for r in results:
        print(
            f"{document['contract']} {r['sink']:<6} median {r['median_ms']:7.3f} ms  "
            f"p95 {r['p95_ms']:7.3f} ms  first batch {r['first_batch_ms']:8.3f} ms  "
            f"(recover median {r['recover_median_ms']:.3f} ms; CPU per batch "
            f"{r['cpu_median_ms']:.3f} ms; log calls per batch {r['log_calls_per_batch']})"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
