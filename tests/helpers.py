"""Helpers shared by the test suites: run query processes, read committed output back."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

import twopc
from twopc._contract.boundary import leaving_sink

REPO = Path(__file__).resolve().parent.parent


@dataclass
class RunResult:
    returncode: int
    events: list[dict[str, Any]] = field(default_factory=list)
    stderr: str = ""

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == kind]


def local_query(script: str, **options: object) -> list[str]:
    """The command line of a local-engine query script in ``tests/e2e`` (``local_query``,
    ``local_sql_query``, ``local_kafka_query``): each keyword becomes ``--name value``, with
    dashes for underscores. For :func:`run_process`."""
    argv = [f"tests/e2e/{script}.py"]
    for name, value in options.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv


def run_process(
    args: list[str], *, faults: str | None = None, timeout: float = 300, cwd: Path = REPO
) -> RunResult:
    """Run a query process in its own session; kill whatever of it survives (the JVM)."""
    env = dict(os.environ)
    env.pop("TWOPC_FAULTS", None)
    if faults:
        env["TWOPC_FAULTS"] = faults
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    events = []
    for line in out.decode(errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return RunResult(process.returncode, events, err.decode(errors="replace"))


def read_ids(output: Path | str, column: str = "id") -> Counter[int]:
    """Committed ids as a pyarrow.dataset reader sees them (hidden files skipped)."""
    if not Path(output).exists():
        return Counter()
    dataset = ds.dataset(str(output), format="parquet", partitioning="hive")
    if not dataset.files:
        return Counter()
    return Counter(dataset.to_table(columns=[column])[column].to_pylist())


def staged_attempts(output: Path | str) -> list[Path]:
    """Attempt directories left in the hidden staging area."""
    staging = Path(output) / "_twopc_staging"
    return sorted(p for p in staging.glob("*/*/*/*") if p.is_dir())


def assert_exactly_once(ids: Counter[int], expected: set[int]) -> None:
    duplicates = {i: n for i, n in ids.items() if n > 1}
    missing = expected - set(ids)
    unexpected = set(ids) - expected
    assert not duplicates, f"duplicates: {sorted(duplicates.items())[:10]}"
    assert not missing, f"missing {len(missing)} ids, e.g. {sorted(missing)[:10]}"
    assert not unexpected, f"unexpected ids: {sorted(unexpected)[:10]}"


@contextmanager
def in_task(ctx: twopc.TaskContext) -> Iterator[None]:
    """Errors leave the block as they leave a task of the core: named by sink, batch and
    partition (sinks raise them without; tests that call a sink directly use this)."""
    with leaving_sink(ctx.sink_id, ctx.batch_id, ctx.partition):
        yield


def exception_texts(exc: BaseException) -> list[str]:
    """str and repr of the exception and of everything chained to it."""
    texts: list[str] = []
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        texts += [str(current), repr(current)]
        pending += [current.__cause__, current.__context__]
    return texts
