"""``format("twopc")``: twopc as a Python data source (``pyspark.sql.datasource``), for
``df.writeStream.format("twopc")`` and ``df.write.format("twopc")``.

How Spark drives it, and what follows from it:

- ``streamWriter()``/``writer()`` run on the driver's host before each batch's tasks; the
  writer finishes any batch that was decided but not committed (a replay's tasks must not
  meet decided work still prepared) and is pickled to the executors.
- ``write()`` is phase 1 of one partition on an executor; it returns the task's report.
- ``commit(messages, batch_id)`` and ``abort(...)`` run in a fresh Python process on the
  driver's host: nothing survives between batches, so every rule reads the commit log.
  Spark may call ``commit`` again for a batch it could not record; the commit log makes
  that a skipped replay.

Options are :func:`twopc.create_sink`'s keyword options as strings, plus ``sink`` (the
backend), ``sink_id`` and twopc's own (``commit_log``, ``commit_log_options``,
``write_id`` for batch writes, ``faults``: a fault plan as in ``TWOPC_FAULTS``,
``commit_parallelism`` as for :func:`twopc.foreach_batch`, and every
``progress_*`` option: the progress reporter of a streaming query, see
:func:`_progress_reporter`).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from twopc._contract.boundary import leaving_sink, leaving_twopc
from twopc._contract.paths import CommitPath, check_roles
from twopc._contract.sink_options import PROGRESS_PREFIX, json_object, sink_from_options
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.coordinator import Coordinator
from twopc._coordination.deciding import DEFAULT_COMMIT_PARALLELISM, check_commit_parallelism
from twopc._coordination.phase1 import Phase1Task
from twopc._coordination.reported import ReportedBatches
from twopc._coordination.reports import TaskOutcome, TaskReport
from twopc._engines.batch_write import BATCH_ID, batch_query_id, check_batch_sink, validate_write_id
from twopc._engines.checkpoint import (
    input_fingerprint,
    planned_batch,
    planned_input,
    query_id_of,
    why_no_query_id,
)
from twopc._engines.writer import resolve_commit_log, validate_sink_id
from twopc.errors import BackendNotFoundError, ConfigurationError, TwoPCError
from twopc.faults import FaultPlan
from twopc.plugins import registry
from twopc.progress import ProgressReporter, kafka_offsets_of
from twopc.protocol import Sink, WritesWithSpark

__all__ = ["TwopcDataSource", "TwopcMessage"]

_log = logging.getLogger("twopc")

FORMAT_NAME = "twopc"
_BATCH_ID_KEY = "streaming.sql.batchId"


@dataclass(frozen=True)
class TwopcMessage(WriterCommitMessage):
    """What one task sends the driver: its phase-1 report, as text."""

    report: str


@dataclass(frozen=True)
class _Setup:
    """Everything a writer needs, resolved on the driver from the options; picklable."""

    sink: Sink[Any]
    sink_id: str
    commit_log: str
    commit_log_options: dict[str, Any] | None
    checkpoint: str | None
    query_id: str | None
    batch_id: int | None  # batch writes only
    faults: FaultPlan | None
    progress: ProgressReporter | None = None
    concurrent_attempts: bool = True
    """Whether copies of a task may run side by side (``speculation``, default true: the
    writer cannot see Spark's settings)."""
    commit_parallelism: int = DEFAULT_COMMIT_PARALLELISM
    replayed_batch: int | None = None
    """A streaming batch found decided where it was planned: its tasks write nothing."""
    run_token: int = field(default_factory=lambda: int(time.time()) & 0xFFFF)
    """Set where the writer is planned, on the driver, and shipped with it to the tasks:
    it tells this run's task attempts from an earlier run's (Spark counts task attempt ids
    from 0 again after a restart). Seconds, wrapping after about 18 hours."""

    @classmethod
    def from_options(cls, options: Mapping[str, str], *, streaming: bool) -> _Setup:
        lowered = {key.lower(): value for key, value in options.items()}
        backend = lowered.get("sink")
        if not backend:
            raise ConfigurationError(
                'format("twopc") needs .option("sink", "<backend>") (one of the names '
                '`twopc plugins` lists) and .option("sink_id", "<stable name>")'
            )
        sink_id = validate_sink_id(lowered.get("sink_id", ""))
        with leaving_twopc(sink_id):  # names the sink in every error below
            return cls._for_sink(options, lowered, backend, sink_id, streaming=streaming)

    @classmethod
    def _for_sink(
        cls,
        options: Mapping[str, str],
        lowered: Mapping[str, str],
        backend: str,
        sink_id: str,
        *,
        streaming: bool,
    ) -> _Setup:
        checkpoint = lowered.get("checkpointlocation") or None
        sink = sink_from_options(backend, options)
        check_roles(sink)
        if isinstance(sink, WritesWithSpark) and sink.spark_write_required():
            raise ConfigurationError(
                f"{sink.describe()}: its options insist on Spark's own writer for phase 1, "
                'but format("twopc") writes in Python tasks (its writer runs per '
                "partition); use twopc.foreach_batch(...) or twopc.write_batch(...), or let "
                "the sink choose",
            )
        log_options = _json_object(lowered.get("commit_log_options"), "commit_log_options")
        url, log_options = resolve_commit_log(
            sink, sink_id, lowered.get("commit_log") or None, log_options, checkpoint
        )
        if streaming:
            query_id = query_id_of(checkpoint) if checkpoint else None
            batch_id = None
            if sink.single_task:
                raise ConfigurationError(
                    f'{sink.describe()} writes each batch in one task, which format("twopc") '
                    "cannot arrange; use twopc.foreach_batch(...) for it",
                )
        else:
            check_batch_sink(sink, sink_id)
            if sink.single_task:
                raise ConfigurationError(
                    f'{sink.describe()} writes a batch in one task, which format("twopc") '
                    "cannot arrange; use twopc.write_batch(...) for it",
                )
            write_id = lowered.get("write_id")
            if not write_id:
                raise ConfigurationError(
                    'a batch write with format("twopc") needs .option("write_id", KEY): its '
                    "idempotency key (a date, a job run id); writing the same key again "
                    "writes nothing",
                )
            batch_id = BATCH_ID
            query_id = batch_query_id(sink_id, validate_write_id(write_id, sink_id))
        faults = lowered.get("faults")
        plan = FaultPlan.parse(faults) if faults else FaultPlan.from_env()
        progress = _progress_reporter(lowered, sink_id, streaming=streaming)
        speculation = _speculation(lowered.get("speculation"))
        parallelism = _commit_parallelism(lowered.get("commit_parallelism"))
        return cls(
            sink,
            sink_id,
            url,
            log_options,
            checkpoint,
            query_id,
            batch_id,
            plan,
            progress,
            concurrent_attempts=speculation,
            commit_parallelism=parallelism,
        )

    def batches(self) -> ReportedBatches:
        """The coordinator's flow for batches whose tasks ran first, new in every process
        Spark calls the writer from."""
        coordinator = Coordinator(
            self.sink,
            self.sink_id,
            CommitLog(self.commit_log, self.commit_log_options),
            faults=self.faults,
            progress=self.progress,
            commit_parallelism=self.commit_parallelism,
        )
        return ReportedBatches(coordinator)

    def attempt_id(self, task_attempt_id: int) -> int:
        """A task attempt's id, unique across runs of the query: the run token in the high
        bits, Spark's task attempt id in the low 15 (31 bits in all: markers store it as a
        32-bit integer)."""
        return (self.run_token << 15) | (task_attempt_id & 0x7FFF)

    def phase1(self, query_id: str, batch_id: int, iterator: Iterator[pa.RecordBatch]) -> Any:
        from pyspark import TaskContext as SparkTaskContext

        context = SparkTaskContext.get()
        if batch_id == self.replayed_batch:
            return self.skip_replayed(context, iterator)
        partition = context.partitionId() if context else 0
        # the batch's offsets, which partition 0 stores with its marker (a task does not
        # know its batch's partition count: the decision confirms a whole batch)
        offsets = (
            kafka_offsets_of(self.checkpoint, batch_id)
            if partition == 0 and self.checkpoint
            else None
        )
        task = Phase1Task(
            self.sink,
            self.sink_id,
            query_id,
            batch_id,
            CommitPath.of(self.sink),
            faults=self.faults,
            concurrent_attempts=self.concurrent_attempts,
            source_offsets=offsets,
        )
        report = task.run(
            partition,
            context.attemptNumber() if context else 0,
            iterator,
            attempt_id=self.attempt_id(context.taskAttemptId() if context else 0),
        )
        return TwopcMessage(report.dumps())

    def skip_replayed(self, context: Any, iterator: Iterator[pa.RecordBatch]) -> Any:
        """The task of a batch decided before: read the partition (Spark checks that every
        partition of a stateful query was evaluated) and write nothing."""
        for _ in iterator:
            pass
        partition = context.partitionId() if context else 0
        attempt = context.attemptNumber() if context else 0
        report = TaskReport(partition, attempt, TaskOutcome.ALREADY_COMMITTED, None)
        return TwopcMessage(report.dumps())


class TwopcDataSource(DataSource):
    """``format("twopc")``: streaming and batch writes through any twopc backend."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def streamWriter(self, schema: Any, overwrite: bool) -> _StreamWriter:
        if overwrite:
            raise ConfigurationError(
                'format("twopc") appends or upserts each batch; the complete output mode '
                "would write the whole result again every batch: use append or update"
            )
        setup = _Setup.from_options(self.options, streaming=True)
        with leaving_twopc(setup.sink_id):
            if setup.query_id is None:
                raise ConfigurationError(_no_query_id(setup.checkpoint))
            if not _planned_for_commit():
                setup = _plan_batch(setup)
            if setup.progress is not None:  # refused before any task writes
                setup.progress.check(setup.sink_id)
        return _StreamWriter(setup)

    def writer(self, schema: Any, overwrite: bool) -> _BatchWriter:
        if overwrite:
            raise ConfigurationError(
                'format("twopc") appends or upserts: use mode("append"), not overwrite'
            )
        setup = _Setup.from_options(self.options, streaming=False)
        with leaving_twopc(setup.sink_id):
            _finish_decided(setup)
        return _BatchWriter(setup)


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, setup: _Setup) -> None:
        self.setup = setup

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TwopcMessage:
        from pyspark import TaskContext as SparkTaskContext

        context = SparkTaskContext.get()
        batch = context.getLocalProperty(_BATCH_ID_KEY) if context else None
        if batch is None:
            raise ConfigurationError(
                "the task does not know its micro-batch (no streaming.sql.batchId)",
                sink_id=self.setup.sink_id,
            )
        assert self.setup.query_id is not None
        message: TwopcMessage = self.setup.phase1(self.setup.query_id, int(batch), iterator)
        return message

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        setup = self.setup
        assert setup.query_id is not None
        # the input's fingerprint, and the batch's Kafka offsets: stored with the output
        # (and reported, with progress)
        planned = planned_input(setup.checkpoint, batchId)
        fingerprint, offsets = planned.fingerprint, planned.offsets
        if setup.progress is not None and setup.checkpoint and offsets is None:
            _log.warning(
                "twopc sink=%s batch %d: progress is reported, but the checkpoint holds "
                "no source offsets twopc reads (a Kafka source's) for the batch; nothing "
                "is published",
                setup.sink_id,
                batchId,
            )
        with leaving_twopc(setup.sink_id, batchId):
            setup.batches().commit(
                setup.query_id,
                batchId,
                _reports(messages),
                input_fingerprint=fingerprint,
                source_offsets=offsets,
            )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        assert self.setup.query_id is not None
        _abort(self.setup, self.setup.query_id, batchId, messages)


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, setup: _Setup) -> None:
        self.setup = setup

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TwopcMessage:
        setup = self.setup
        assert setup.query_id is not None
        assert setup.batch_id is not None
        message: TwopcMessage = setup.phase1(setup.query_id, setup.batch_id, iterator)
        return message

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        setup = self.setup
        assert setup.query_id is not None
        assert setup.batch_id is not None
        with leaving_twopc(setup.sink_id, setup.batch_id):
            setup.batches().commit(setup.query_id, setup.batch_id, _reports(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        assert self.setup.query_id is not None
        assert self.setup.batch_id is not None
        _abort(self.setup, self.setup.query_id, self.setup.batch_id, messages)


def _progress_reporter(
    options: Mapping[str, str], sink_id: str, *, streaming: bool
) -> ProgressReporter | None:
    """The progress reporter a streaming query's ``progress_*`` options describe, built by
    the plugin that provides its kind: ``progress_kind`` (default: the one kind installed),
    ``progress_options`` (a JSON object of client settings, e.g. credentials), and every
    other ``progress_<key>`` as the reporter's ``<key>`` (for a Kafka consumer group:
    ``progress_group`` and ``progress_bootstrap_servers``). ``None`` without any."""
    given = {
        key[len(PROGRESS_PREFIX) :]: value
        for key, value in options.items()
        if key.startswith(PROGRESS_PREFIX)
    }
    if not given:
        return None
    if not streaming:
        raise ConfigurationError(
            "the progress_* options report a streaming query's source offsets; a batch write "
            "has none: drop them"
        )
    config = _json_object(given.pop("options", None), "progress_options") or {}
    with leaving_sink(sink_id, wrap=ConfigurationError, what="the progress_* options: "):
        kind = given.pop("kind", None) or _only_progress_kind()
        return registry().create_progress_reporter({**given, "kind": kind}, config)


def _only_progress_kind() -> str:
    kinds = registry().progress_kinds()
    if len(kinds) == 1:
        return kinds[0]
    if not kinds:
        raise BackendNotFoundError(
            "the progress_* options need a progress reporter, and no installed plugin "
            "provides one (`twopc plugins` lists the plugins)"
        )
    raise ConfigurationError(
        f"several progress reporters are installed ({', '.join(kinds)}): choose one with "
        '.option("progress_kind", ...)'
    )


def _no_query_id(checkpoint: str | None) -> str:
    """Why a streaming writer has no query id: no ``checkpointLocation`` option, or one
    whose metadata file twopc cannot read (which, and why)."""
    if checkpoint is None:
        return (
            'format("twopc") needs the query\'s checkpoint: set .option("checkpointLocation", '
            "...) on the writeStream (the query id is read from its metadata file)"
        )
    return (
        f'format("twopc") cannot read the query id from the checkpointLocation {checkpoint!r} '
        f"that is set: {why_no_query_id(checkpoint)}. twopc reads the checkpoint through "
        "fsspec on the driver's host, without Spark's Hadoop settings: the location must be "
        "a path or URL fsspec reads there (a local or mounted path, or s3://, gs://, abfs:// "
        "with the fsspec package and credentials of that store)"
    )


def _commit_parallelism(value: str | None) -> int:
    """The ``commit_parallelism`` option, as for :func:`twopc.foreach_batch`."""
    if value is None:
        return DEFAULT_COMMIT_PARALLELISM
    try:
        number = int(value.strip())
    except ValueError:
        number = -1
    if str(number) != value.strip():
        raise ConfigurationError(
            f"option 'commit_parallelism' must be a whole number from 1 to 256, not {value!r}"
        )
    return check_commit_parallelism(number)


def _speculation(value: str | None) -> bool:
    """The ``speculation`` option: whether Spark may run speculative copies of the write's
    tasks (``spark.speculation``). The writer cannot read Spark's settings, so it assumes
    so unless told ``false``."""
    if value is None:
        return True
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ConfigurationError(
            f"option 'speculation' must be 'true' or 'false' (spark.speculation of the query), "
            f"not {value!r}"
        )
    return lowered == "true"


def _planned_for_commit() -> bool:
    """Whether Spark asks for the writer in the process that then calls its ``commit`` or
    ``abort`` (pyspark's ``python_streaming_sink_runner``), after the batch's tasks ran.
    Spark calls ``streamWriter()`` twice per micro-batch, there and where it plans the
    tasks, and passes nothing that tells the two apart; only the planning call may run the
    checks that must come before the tasks write, so the caller is read off the stack."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith("python_streaming_sink_runner.py"):
            return True
        frame = frame.f_back
    return False


def _plan_batch(setup: _Setup) -> _Setup:
    """Before the tasks of the batch Spark is planning (the newest in the checkpoint's
    offset log): finish decided batches, check the batch may be written, and mark it
    replayed if it is decided already, so its tasks write nothing."""
    assert setup.query_id is not None
    batch = planned_batch(setup.checkpoint) if setup.checkpoint else None
    if batch is None:  # the offset log cannot be read: the commit makes the checks
        _finish_decided(setup)
        return setup
    fingerprint = input_fingerprint(setup.checkpoint, batch) if setup.checkpoint else None
    decided = setup.batches().plan(setup.query_id, batch, input_fingerprint=fingerprint)
    if not decided:
        return setup
    _log.info(
        "twopc sink=%s: batch %d of query %s is committed already; its replay writes nothing",
        setup.sink_id,
        batch,
        setup.query_id,
    )
    return replace(setup, replayed_batch=batch)


def _finish_decided(setup: _Setup) -> None:
    finished = setup.batches().finish_decided()
    if finished:
        _log.info("twopc sink=%s: finished %d decided batch(es)", setup.sink_id, finished)


def _abort(
    setup: _Setup, query_id: str, batch_id: int, messages: list[WriterCommitMessage | None]
) -> None:
    try:
        with leaving_twopc(setup.sink_id, batch_id):
            setup.batches().abort(query_id, batch_id, _reports(messages))
    except TwoPCError:
        # Spark is already failing the batch; its own error is the one users need. What
        # this left, the next batch's clean-up or `twopc recover` removes.
        _log.exception("twopc sink=%s batch %d: aborting failed", setup.sink_id, batch_id)


def _reports(messages: list[WriterCommitMessage | None]) -> list[TaskReport | None]:
    return [TaskReport.loads(m.report) if isinstance(m, TwopcMessage) else None for m in messages]


def _json_object(value: str | None, name: str) -> dict[str, Any] | None:
    if not value:
        return None
    try:
        return json_object(value)
    except ValueError as exc:
        raise ConfigurationError(f"option {name!r} must be a JSON object: {exc}") from exc
