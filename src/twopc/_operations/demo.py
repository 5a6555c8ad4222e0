"""``twopc demo``: exactly-once through a SIGKILL of the driver, on local files.

1. Write the input: ``rows`` orders with unique ids, spread over ``batches`` JSON files.
2. Run the streaming query (its own driver process) with fault injection that SIGKILLs it
   between the commits of two partitions of batch ``crash_batch``: half a batch promoted.
3. Restart the query from its checkpoint: recovery finishes the decided batch, Spark's
   replay of it is skipped, the remaining batches are written.
4. Read the output back with Spark (and, independently, with pyarrow) and print
   ``exactly-once: OK (expected=N committed=N duplicates=0 missing=0)``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from twopc._coordination.batch_metrics import BatchStatus
from twopc._coordination.commit_log import CommitLog
from twopc.errors import ConfigurationError, ExtraNotInstalledError
from twopc.faults import ENV_VAR

__all__ = ["DemoResult", "run_demo"]

_MARKER = ".twopc-demo"


@dataclass(frozen=True)
class DemoResult:
    expected: int
    committed: int
    duplicates: int
    missing: int
    ok: bool
    detail: str = ""

    def line(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        text = (
            f"exactly-once: {verdict} (expected={self.expected} committed={self.committed} "
            f"duplicates={self.duplicates} missing={self.missing}"
        )
        if self.detail:
            text += f" {self.detail}"
        return text + ")"


class _Progress:
    """A small progress display: a redrawn line on a terminal, plain lines otherwise."""

    def __init__(self, stream: TextIO, batches: int) -> None:
        self.stream = stream
        self.batches = batches
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self.committed: set[int] = set()

    def step(self, text: str) -> None:
        self._clear()
        self.stream.write(f"[{time.monotonic() - self.started:5.1f}s] {text}\n")
        self.stream.flush()

    def batch(self, event: dict[str, Any]) -> None:
        batch_id = int(event["batch"])
        status = BatchStatus(event["status"])
        if status in (BatchStatus.COMMITTED, BatchStatus.SKIPPED):
            self.committed.add(batch_id)
        extra = ""
        if event.get("recovered"):
            extra += f", recovery finished {event['recovered']} decided partition commit(s)"
        if event.get("aborted"):
            extra += f", recovery aborted {event['aborted']} undecided one(s)"
        if status is BatchStatus.SKIPPED:
            text = f"batch {batch_id}: replay recognised, already committed, skipped{extra}"
        else:
            text = f"batch {batch_id}: {status}, {event['rows']} rows{extra}"
        self.step(f"  {text}")
        self._bar()

    def _bar(self) -> None:
        if not self.tty:
            return
        done = len(self.committed)
        width = 30
        filled = int(width * done / max(self.batches, 1))
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"  [{bar}] {done}/{self.batches} batches committed\r")
        self.stream.flush()

    def _clear(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K")


def _write_input(directory: Path, rows: int, batches: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    per_file = -(-rows // batches)
    for index in range(batches):
        start, stop = index * per_file, min(rows, (index + 1) * per_file)
        lines = [
            json.dumps({"id": i, "customer": f"c{i % 97:02d}", "amount": round(i * 0.37, 2)})
            for i in range(start, stop)
        ]
        # Files are picked up in name order; write atomically so the source never sees half.
        tmp = directory / f".orders-{index:04d}.json.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(directory / f"orders-{index:04d}.json")


def _run_query(
    workdir: Path,
    expected: int,
    progress: _Progress,
    *,
    faults: str | None,
    read_back: bool,
    log_name: str,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[int, dict[str, Any] | None]:
    env = dict(os.environ)
    env.pop(ENV_VAR, None)
    if faults:
        env[ENV_VAR] = faults
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    command = [
        sys.executable,
        "-m",
        "twopc._operations.demo_query",
        "--input",
        str(workdir / "input"),
        "--output",
        str(workdir / "output"),
        "--checkpoint",
        str(workdir / "checkpoint"),
        "--expected",
        str(expected),
    ]
    if read_back:
        command.append("--read-back")
    result: dict[str, Any] | None = None
    with open(workdir / log_name, "wb") as log:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True
        )
        assert process.stdout is not None
        for raw in process.stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            kind = event.get("event")
            if kind == "spark-ready":
                progress.step("  Spark driver ready, query started")
            elif kind == "batch":
                progress.batch(event)
            elif kind == "read-back":
                result = event
            if on_event is not None:
                on_event(event)
        code = process.wait()
    _kill_process_group(process.pid)
    return code, result


def _kill_process_group(pid: int) -> None:
    """The JVM is the Python driver's child; make sure nothing of a driver outlives it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _describe_crash_state(output: Path, batch_id: int) -> str:
    """What the crash left for the batch, as ``twopc status`` sees it: whether the batch
    was decided, and how many of its partitions are still staged (invisible to readers)."""
    from twopc._operations.demo_query import SINK_ID
    from twopc._operations.status import ItemKind, sink_status
    from twopc.plugins import create_sink

    sink = create_sink("files", path=str(output))
    log = CommitLog(sink.default_commit_log(SINK_ID) or "")
    status = sink_status(sink, SINK_ID, log)
    mine = [item for item in status.items if item.batch_id == batch_id]
    if not any(item.kind is ItemKind.DECISION for item in mine):
        return "no decision recorded"
    staged = sum(1 for item in mine if item.kind is ItemKind.PREPARED)
    return (
        f"decision recorded, {staged} partition(s) still staged (invisible to readers), the "
        "rest promoted"
    )


def _log_tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _pyarrow_ids(output: Path) -> list[int]:
    import pyarrow.dataset as ds

    return list(
        ds.dataset(str(output), format="parquet").to_table(columns=["id"])["id"].to_pylist()
    )


def run_demo(
    *,
    workdir: str | None = None,
    rows: int = 6000,
    batches: int = 6,
    crash_batch: int = 3,
    keep: bool = False,
    stream: TextIO = sys.stdout,
) -> DemoResult:
    """Run the demo; returns the verdict (also printed as the last line)."""
    if not 0 <= crash_batch < batches:
        raise ConfigurationError("crash_batch must be one of the batches")
    base = _prepared_workdir(workdir)
    progress = _Progress(stream, batches)
    progress.step(f"twopc demo in {base}")
    _write_input(base / "input", rows, batches)
    progress.step(f"input: {rows} orders with unique ids in {batches} JSON files (one per batch)")

    fault = f"between_commits:kill@batch={crash_batch}"
    progress.step(f"run 1: streaming query -> Parquet, SIGKILL of the driver planned ({fault})")
    code, _ = _run_query(base, rows, progress, faults=fault, read_back=False, log_name="run1.log")
    if code != -signal.SIGKILL:
        return _finish(
            DemoResult(rows, 0, 0, rows, False, f"run 1 was not killed: exit status {code}"),
            progress,
            base,
            keep,
            base / "run1.log",
        )
    progress.step(
        f"run 1: driver killed by SIGKILL while committing batch {crash_batch}: "
        + _describe_crash_state(base / "output", crash_batch)
    )

    progress.step("run 2: restart from the checkpoint")
    code, counts = _run_query(
        base, rows, progress, faults=None, read_back=True, log_name="run2.log"
    )
    if code != 0 or counts is None:
        return _finish(
            DemoResult(rows, 0, 0, rows, False, f"run 2 failed: exit status {code}"),
            progress,
            base,
            keep,
            base / "run2.log",
        )
    progress.step(
        f"read back with Spark: {counts['committed']} rows, {counts['duplicates']} duplicates, "
        f"{counts['missing']} missing"
    )
    ids = _pyarrow_ids(base / "output")
    agrees = (
        len(ids) == counts["committed"]
        and len(set(ids)) == counts["committed"] - counts["duplicates"]
    )
    progress.step(f"read back with pyarrow: {len(ids)} rows, {len(set(ids))} distinct ids")
    ok = (
        agrees
        and counts["committed"] == rows
        and counts["duplicates"] == 0
        and counts["missing"] == 0
    )
    detail = "" if agrees else "spark and pyarrow disagree"
    result = DemoResult(
        rows, counts["committed"], counts["duplicates"], counts["missing"], ok, detail
    )
    return _finish(result, progress, base, keep, None)


def _finish(
    result: DemoResult, progress: _Progress, base: Path, keep: bool, log: Path | None
) -> DemoResult:
    if log is not None:
        progress.step(f"log tail of {log}:\n{_log_tail(log)}")
    if keep or not result.ok:
        progress.step(f"demo files kept in {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)
    progress.stream.write(result.line() + "\n")
    progress.stream.flush()
    return result


def _prepared_workdir(workdir: str | None) -> Path:
    """An empty work directory for the demo (one it made before is emptied), after checking
    that PySpark and Java are there."""
    if importlib.util.find_spec("pyspark") is None:
        raise ExtraNotInstalledError(
            "the demo runs a Spark streaming query, and PySpark is not installed: "
            'pip install "twopc[files,spark]" (or run ./scripts/demo, which sets it all up)'
        )
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise RuntimeError("Spark needs Java 17 or newer: install a JDK and put java on PATH")
    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="twopc-demo-"))
    if base.exists() and any(base.iterdir()):
        if not (base / _MARKER).exists():
            raise ConfigurationError(
                f"{base} is not empty and was not made by twopc demo; pick another --dir"
            )
        shutil.rmtree(base)
    base.mkdir(parents=True, exist_ok=True)
    (base / _MARKER).write_text("made by twopc demo; deleted and re-created by the next run\n")
    return base
