"""A tiny local engine: the protocol without a JVM.

:class:`LocalEngine` runs phase 1 for each partition in its own child process (as Spark
runs each task in a Python worker), so a crash point can kill a "worker" without killing
the driver. :class:`LocalStream` is a replayable source with a checkpoint that behaves like
Spark's micro-batch loop: it writes ``offsets/N`` before batch N and ``commits/N`` after
the write returns, and re-runs the last uncommitted batch with the same id after a crash.

The conformance kit and the crash-matrix tests use it to run in seconds; Spark is then
tested at representative points. Usage::

    stream = LocalStream("/tmp/chk", batches=[[part0, part1], [part0]])
    writer = twopc.local.foreach_batch(sink, sink_id="orders")
    stream.run(writer)
"""

from __future__ import annotations

import gc
import hashlib
import json
import multiprocessing
import os
import signal
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from twopc._contract.boundary import leaving_twopc
from twopc._contract.retry import RetryPolicy
from twopc._coordination.batch_metrics import BatchMetrics
from twopc._coordination.deciding import DEFAULT_COMMIT_PARALLELISM
from twopc._coordination.engine import BatchEngine
from twopc._coordination.group_engine import GroupEngine
from twopc._coordination.phase1 import Phase1Task
from twopc._coordination.reports import TaskReport
from twopc._engines.checkpoint import planned_input
from twopc._engines.writer import BatchWriter, MetricsCallback, WriterOptions
from twopc.errors import SinkError, TwoPCError
from twopc.faults import FaultPlan
from twopc.groups import SinkGroup
from twopc.protocol import Sink
from twopc.storage import atomic_write, filesystem_for, join

__all__ = ["LocalBatchWriter", "LocalEngine", "LocalStream", "foreach_batch"]

_CHUNK_ROWS = 10_000


class LocalEngine(BatchEngine):
    """Runs phase 1 over in-memory partitions, one child process per task.

    Args:
        partitions: one Arrow table (or list of record batches) per partition.
        processes: run tasks in child processes (``fork``); ``False`` runs them inline,
            which is handy for debugging but lets a ``kill`` fault kill the caller.
        max_attempts: task attempts per partition, like ``spark.task.maxFailures``.
        chunk_rows: rows per record batch handed to ``invoke``.
    """

    def __init__(
        self,
        partitions: Sequence[pa.Table | Sequence[pa.RecordBatch]],
        *,
        processes: bool = True,
        max_attempts: int = 1,
        chunk_rows: int = _CHUNK_ROWS,
    ) -> None:
        self.partitions = list(partitions)
        self.processes = processes
        self.max_attempts = max_attempts
        self.chunk_rows = chunk_rows

    def run_phase1(self, task: Phase1Task) -> list[TaskReport]:
        reports: dict[int, TaskReport] = {}
        failures: dict[int, str] = {}
        pending = list(range(len(self.partitions)))
        for attempt in range(self.max_attempts):
            results = self._run_attempts(task, pending, attempt)
            pending = []
            for partition, (report, error) in results.items():
                if report is not None:
                    reports[partition] = report
                else:
                    failures[partition] = error or "unknown failure"
                    pending.append(partition)
            if not pending:
                break
        if pending:
            first = pending[0]
            raise SinkError(
                f"task failed {self.max_attempts} time(s): {failures[first]}", partition=first
            )
        return [reports[p] for p in sorted(reports)]

    def discard(self) -> None:
        """In-memory partitions need no evaluation."""

    def partition_count(self) -> int:
        return len(self.partitions)

    def task_slots(self) -> int:
        """Forked tasks all run at once; inline ones one after another."""
        return len(self.partitions) if self.processes else 1

    def partitions_run(self) -> int:
        """Every partition it holds runs, each to one report."""
        return len(self.partitions)

    def _run_attempts(
        self, task: Phase1Task, partitions: list[int], attempt: int
    ) -> dict[int, tuple[TaskReport | None, str | None]]:
        if not self.processes:
            return {p: _run_inline(task, p, attempt, self._batches(p)) for p in partitions}
        context = multiprocessing.get_context("fork")
        running = []
        for partition in partitions:
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(
                target=_child,
                args=(task, partition, attempt, self._batches(partition), sender),
                daemon=True,
            )
            process.start()
            sender.close()
            running.append((partition, process, receiver))
        results: dict[int, tuple[TaskReport | None, str | None]] = {}
        for partition, process, receiver in running:
            message: tuple[str, str] | None = None
            try:
                message = receiver.recv()
            except EOFError:
                message = None
            finally:
                receiver.close()
            process.join()
            results[partition] = _interpret(message, process.exitcode)
        return results

    def _batches(self, partition: int) -> list[pa.RecordBatch]:
        data = self.partitions[partition]
        if isinstance(data, pa.Table):
            return list(data.to_batches(max_chunksize=self.chunk_rows))
        return list(data)


def _run_inline(
    task: Phase1Task, partition: int, attempt: int, batches: list[pa.RecordBatch]
) -> tuple[TaskReport | None, str | None]:
    try:
        return task.run(partition, attempt, iter(batches)), None
    except TwoPCError as exc:
        return None, str(exc)
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _child(
    task: Phase1Task,
    partition: int,
    attempt: int,
    batches: list[pa.RecordBatch],
    sender: Any,
) -> None:
    # Everything inherited from the parent stays out of this process's garbage collection:
    # an unreachable client of a C library with threads of its own (a librdkafka admin
    # client kept alive by an old traceback) would be destroyed here, where its threads
    # do not exist, and hang the task.
    gc.freeze()
    report, error = _run_inline(task, partition, attempt, batches)
    sender.send(("ok", report.dumps()) if report is not None else ("error", error or ""))
    sender.close()


def _interpret(
    message: tuple[str, str] | None, exitcode: int | None
) -> tuple[TaskReport | None, str | None]:
    if message is None:
        if exitcode is not None and exitcode < 0:
            name = signal.Signals(-exitcode).name
            return None, f"the task's process died of signal {name}"
        return None, f"the task's process exited with status {exitcode} without reporting"
    kind, body = message
    if kind == "ok":
        return TaskReport.loads(body), None
    return None, body


class LocalBatchWriter(BatchWriter):
    """Like :class:`twopc.SparkBatchWriter`, for :class:`LocalStream` batches."""

    def __init__(
        self,
        sink: Sink[Any],
        sink_id: str,
        options: WriterOptions | None = None,
        *,
        max_attempts: int = 1,
        processes: bool = True,
    ) -> None:
        super().__init__(sink, sink_id, options)
        self.max_attempts = max_attempts
        self.processes = processes

    def write(
        self,
        query_id: str,
        batch_id: int,
        partitions: Sequence[pa.Table],
        checkpoint_root: str | None = None,
    ) -> BatchMetrics:
        engine = self._engine(self.sink, partitions)
        with leaving_twopc(self.sink_id, batch_id):
            planned = planned_input(checkpoint_root, batch_id)
        return self.run(
            query_id,
            batch_id,
            engine,
            lambda: checkpoint_root,
            input_fingerprint=planned.fingerprint,
            source_offsets=planned.offsets,
        )

    def _engine(self, sink: Sink[Any], partitions: Sequence[pa.Table]) -> BatchEngine:
        """The engine of one batch; a group's runs each member on its projection of every
        partition."""
        if isinstance(sink, SinkGroup):
            return GroupEngine(
                sink,
                {
                    name: self._engine(member.sink, [member.projected(t) for t in partitions])
                    for name, member in sink.members.items()
                },
            )
        if sink.single_task and len(partitions) > 1:
            partitions = [pa.concat_tables(partitions)]
        return LocalEngine(partitions, max_attempts=self.max_attempts, processes=self.processes)


def foreach_batch(
    sink: Sink[Any],
    sink_id: str,
    *,
    commit_log: str | None = None,
    storage_options: dict[str, Any] | None = None,
    retry: RetryPolicy | None = None,
    faults: FaultPlan | None = None,
    on_metrics: MetricsCallback | None = None,
    max_attempts: int = 1,
    processes: bool = True,
    commit_parallelism: int = DEFAULT_COMMIT_PARALLELISM,
) -> LocalBatchWriter:
    """The local engine's counterpart of :func:`twopc.foreach_batch`.

    ``processes=False`` runs tasks inline, which in-process filesystems (fsspec's
    ``memory://``) need, since a forked task's writes stay in the child.
    """
    options = WriterOptions(
        commit_log=commit_log,
        storage_options=storage_options,
        retry=retry,
        faults=faults,
        on_metrics=on_metrics,
        commit_parallelism=commit_parallelism,
    )
    return LocalBatchWriter(sink, sink_id, options, max_attempts=max_attempts, processes=processes)


class LocalStream:
    """A replayable, checkpointed stream of micro-batches, each a list of partitions.

    The checkpoint holds ``metadata`` (the query id, stable across restarts), ``offsets/N``
    and ``commits/N``. :meth:`run` resumes where the checkpoint says, re-running the last
    batch if it has an offset but no commit, exactly as Spark's micro-batch loop does.

    With ``kafka_topic``, the stream's offsets look like a Kafka source's: partition *p* of
    every batch is partition *p* of the topic, and ``offsets/N`` holds the next offset of
    each partition after batch *N* (``starting_offsets`` plus the rows so far), so that the
    output stores them as it does under Spark.
    """

    def __init__(
        self,
        checkpoint: str,
        batches: Sequence[Sequence[pa.Table]],
        *,
        kafka_topic: str | None = None,
        starting_offsets: Mapping[int, int] | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.batches = [list(b) for b in batches]
        self.kafka_topic = kafka_topic
        self.starting_offsets = dict(starting_offsets or {})
        self._fs, self._root = filesystem_for(checkpoint)
        self.query_id = self._load_or_create_query_id()

    def _load_or_create_query_id(self) -> str:
        path = join(self._root, "metadata")
        if self._fs.exists(path):
            return str(json.loads(self._fs.cat_file(path))["id"])
        query_id = str(uuid.uuid4())
        self._fs.makedirs(self._root, exist_ok=True)
        atomic_write(self._fs, path, json.dumps({"id": query_id}).encode())
        return query_id

    def _logged(self, name: str) -> list[int]:
        directory = join(self._root, name)
        if not self._fs.exists(directory):
            return []
        return sorted(
            int(os.path.basename(p))
            for p in self._fs.ls(directory, detail=False)
            if os.path.basename(p).isdigit()
        )

    def _offsets_entry(self, batch_id: int) -> bytes:
        """Spark's layout: version, metadata, then the batch's "source offsets", here a
        digest of the batch's rows (so a changed input shows, as in Spark)."""
        digest = hashlib.sha256()
        for table in self.batches[batch_id]:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as stream:
                stream.write_table(table)
            digest.update(sink.getvalue().to_pybytes())
        rows = sum(t.num_rows for t in self.batches[batch_id])
        metadata = json.dumps({"batchTimestampMs": int(time.time() * 1000)})
        source = json.dumps({"rows": rows, "digest": digest.hexdigest()})
        if self.kafka_topic is not None:
            source = json.dumps({self.kafka_topic: self._kafka_offsets(batch_id)})
        return f"v1\n{metadata}\n{source}".encode()

    def _kafka_offsets(self, batch_id: int) -> dict[str, int]:
        """The next offset of each partition after ``batch_id``."""
        ends = dict(self.starting_offsets)
        for batch in self.batches[: batch_id + 1]:
            for partition, table in enumerate(batch):
                ends[partition] = ends.get(partition, 0) + table.num_rows
        return {str(p): o for p, o in sorted(ends.items())}

    def run(self, writer: LocalBatchWriter) -> list[int]:
        """Run every batch not yet committed; returns the batch ids the writer was given.

        Closes the writer at the end (its liveness record goes); a failure leaves it."""
        offsets, commits = self._logged("offsets"), self._logged("commits")
        last_offset = offsets[-1] if offsets else -1
        last_commit = commits[-1] if commits else -1
        start = last_offset if last_offset > last_commit else last_offset + 1
        ran: list[int] = []
        for batch_id in range(start, len(self.batches)):
            if batch_id > last_offset:
                atomic_write(
                    self._fs,
                    join(self._root, "offsets", str(batch_id)),
                    self._offsets_entry(batch_id),
                )
            writer.write(self.query_id, batch_id, self.batches[batch_id], self.checkpoint)
            atomic_write(self._fs, join(self._root, "commits", str(batch_id)), b"v1")
            ran.append(batch_id)
        writer.close()  # a clean stop: no liveness record left behind
        return ran
