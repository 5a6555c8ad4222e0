"""twopc's own work per micro-batch, without Spark: recovery checks, the decision, the
commit, the commit log's upkeep.

Runs ``--batches`` micro-batches of one query through the coordinator with the local
engine (tasks inline, so no process start is counted) and reports, per batch, the time
outside phase 1: ``total - write``, where ``write`` is phase 1 itself. Two sinks:

* ``null``: prepares and commits nothing, so what is left is the coordinator's own cost;
* ``files``: the files sink on the local disk (rename-based commit, decision next to the
  data), the cheapest real backend.

It runs against whichever twopc is importable, also one from before the v2 contract
(0.1), so that the same script measures before and after a change::

    .venv/bin/python -m benchmarks.coordination --batches 300
    /path/to/old/checkout/.venv/bin/python benchmarks/coordination.py --batches 300

It prints one line per sink and writes ``results/coordination.json`` (``--output``). The
CPU time per batch (the whole batch, phase 1 included) compares two versions fairly on a
busy machine; the wall-clock figures need a quiet one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

import twopc
from twopc.local import LocalEngine

try:  # v2
    from twopc._coordinator import Coordinator
except ImportError:  # pragma: no cover - 0.1 exported it
    Coordinator = twopc.Coordinator  # type: ignore[attr-defined]

_V2 = hasattr(twopc, "CommitsOnDriver")
_ROLE: tuple[type, ...] = (twopc.CommitsOnDriver,) if _V2 else ()


@dataclass
class _Txn:
    ctx: twopc.TaskContext
    rows: int = 0


if _V2:

    @dataclass(frozen=True)
    class _Rows(twopc.Payload):
        version: ClassVar[int] = 1
        rows: int


class NullSink(twopc.Sink[_Txn], *_ROLE):  # type: ignore[misc]
    """Counts rows, writes nothing: what remains is the coordinator's cost."""

    backend_name = "null"
    if not _V2:  # pragma: no cover - 0.1
        capabilities = twopc.Capabilities(global_commit=True, recover=True)  # type: ignore[attr-defined]

    def begin_transaction(self, ctx: twopc.TaskContext) -> _Txn:
        return _Txn(ctx)

    def invoke(self, txn: _Txn, batch: pa.RecordBatch) -> None:
        txn.rows += batch.num_rows

    def pre_commit(self, txn: _Txn) -> twopc.Committable:
        if _V2:
            return twopc.Committable.for_task(txn.ctx, _Rows(txn.rows))
        return twopc.Committable.for_task(txn.ctx, {"rows": txn.rows})  # type: ignore[arg-type]

    def abort(self, txn: _Txn) -> None:
        return None

    def commit(self, committables: Sequence[twopc.Committable]) -> list[twopc.CommitOutcome]:
        return [twopc.CommitOutcome.COMMITTED for _ in committables]

    def abort_prepared(self, committables: Sequence[twopc.Committable]) -> None:
        return None

    def recover(self, sink_id: str) -> list[twopc.Committable]:
        return []


def _partitions(batch_id: int, partitions: int, rows: int) -> list[pa.Table]:
    start = batch_id * partitions * rows
    return [
        pa.table({"id": pa.array(range(start + p * rows, start + (p + 1) * rows), pa.int64())})
        for p in range(partitions)
    ]


def measure(sink_name: str, batches: int, partitions: int, rows: int) -> dict[str, Any]:
    """Milliseconds per batch outside phase 1, over ``batches`` batches of one query."""
    with tempfile.TemporaryDirectory(prefix="twopc-coord-") as work:
        sink: twopc.Sink[Any] = (
            NullSink() if sink_name == "null" else twopc.create_sink("files", path=f"{work}/out")
        )
        log = twopc.CommitLog(f"{work}/log")
        coordinator = Coordinator(sink, "bench", log)
        outside: list[float] = []
        recover: list[float] = []
        cpu: list[float] = []
        started = time.perf_counter()
        for batch_id in range(batches):
            engine = LocalEngine(_partitions(batch_id, partitions, rows), processes=False)
            before = time.process_time()
            metrics = coordinator.run_batch("query", batch_id, engine)
            cpu.append((time.process_time() - before) * 1000)
            outside.append((metrics.total_seconds - metrics.write_seconds) * 1000)
            recover.append(metrics.recover_seconds * 1000)
        elapsed = time.perf_counter() - started
    steady = outside[min(10, len(outside) - 1) :]  # after the first batches' recovery
    return {
        "sink": sink_name,
        "batches": batches,
        "partitions": partitions,
        "rows_per_partition": rows,
        "median_ms": round(statistics.median(steady), 3),
        "p95_ms": round(sorted(steady)[int(0.95 * (len(steady) - 1))], 3),
        "mean_ms": round(statistics.fmean(steady), 3),
        "first_batch_ms": round(outside[0], 3),
        "recover_median_ms": round(statistics.median(recover[min(10, len(recover) - 1) :]), 3),
        # CPU time of the whole batch (phase 1 included, inline): what the process did,
        # whatever else the machine ran meanwhile
        "cpu_median_ms": round(statistics.median(cpu[min(10, len(cpu) - 1) :]), 3),
        "wall_seconds": round(elapsed, 2),
    }


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
    parser.add_argument("--sink", action="append", choices=["null", "files"], default=[])
    parser.add_argument(
        "--output", type=Path, default=Path(__file__).parent / "results" / "coordination.json"
    )
    args = parser.parse_args(argv)
    results = [
        measure(name, args.batches, args.partitions, args.rows)
        for name in (args.sink or ["null", "files"])
    ]
    document = {
        "twopc": getattr(twopc, "__version__", "?"),
        "contract": "v2" if _V2 else "v1",
        "revision": _revision(),
        "results": results,
    }
    for r in results:
        print(
            f"{document['contract']} {r['sink']:<6} median {r['median_ms']:7.3f} ms  "
            f"p95 {r['p95_ms']:7.3f} ms  first batch {r['first_batch_ms']:8.3f} ms  "
            f"(recover median {r['recover_median_ms']:.3f} ms; CPU per batch "
            f"{r['cpu_median_ms']:.3f} ms)"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
