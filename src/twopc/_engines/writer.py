"""What the Spark adapter and the local engine share: a coordinator plus metrics history."""

from __future__ import annotations

import logging
import os
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from twopc._contract.boundary import as_twopc_error
from twopc._contract.paths import check_roles
from twopc._contract.retry import RetryPolicy
from twopc._coordination.batch_metrics import BatchMetrics, BatchStatus
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.coordinator import Coordinator, DecidedBatch
from twopc._coordination.deciding import DEFAULT_COMMIT_PARALLELISM, check_commit_parallelism
from twopc._coordination.engine import BatchEngine
from twopc._coordination.liveness import Heartbeat, HeartbeatState, own_process_start, this_host
from twopc._engines.background import BackgroundCommit
from twopc.errors import ConfigurationError, TwoPCError
from twopc.faults import FaultPlan
from twopc.groups import SinkGroup
from twopc.progress import ProgressReporter, SourceOffsets
from twopc.protocol import Sink, TracksWriters, WriterRecord
from twopc.storage import join

__all__ = [
    "BatchWriter",
    "MetricsCallback",
    "StartedBatch",
    "WriterOptions",
    "resolve_commit_log",
    "validate_sink_id",
]

_log = logging.getLogger("twopc")


def _as_heartbeat(record: WriterRecord) -> Heartbeat:
    """A target's writer record judged as a liveness record is (host, process, age)."""
    return Heartbeat(
        sink_id=record.sink_id,
        query_id=record.query_id,
        host=record.host,
        pid=record.pid,
        started_at=record.updated_at,
        updated_at=record.updated_at,
        batch_id=-1,
        state=HeartbeatState.UNKNOWN,
        process_start=record.process_start,
    )


MetricsCallback = Callable[[BatchMetrics], None]


@dataclass(frozen=True)
class WriterOptions:
    """What every entry point's writer takes besides the sink and its id, passed down as
    one object (the public functions' keywords of the same names say what each means)."""

    commit_log: str | None = None
    storage_options: dict[str, Any] | None = None
    retry: RetryPolicy | None = None
    faults: FaultPlan | None = None
    on_metrics: MetricsCallback | None = None
    history: int = 100
    progress: ProgressReporter | None = None
    commit_parallelism: int = DEFAULT_COMMIT_PARALLELISM

    def __post_init__(self) -> None:
        check_commit_parallelism(self.commit_parallelism)


WRITER_RECORD_EVERY = 60.0
"""Seconds between two records of a running writer in a :class:`~twopc.TracksWriters`
target: well within the 300 s after which a record from another host counts as stopped."""

_SINK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def validate_sink_id(sink_id: str) -> str:
    """Sink ids appear in paths, transaction ids and table rows: keep them plain."""
    if not isinstance(sink_id, str) or not _SINK_ID.match(sink_id):
        raise ConfigurationError(
            f"invalid sink_id {sink_id!r}: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return sink_id


def _validate_member_ids(group: SinkGroup, sink_id: str) -> None:
    """A group's members write under ``<sink id>.<member>``: each must be a sink id too."""
    for name, member_id in group.member_ids(sink_id).items():
        if not _SINK_ID.match(member_id):
            raise ConfigurationError(
                f"group member {name!r} would write under sink id {member_id!r}, longer than "
                "the 64 characters a sink id may have: shorten the group's sink_id or the "
                "member's name"
            )


def resolve_commit_log(
    sink: Sink[Any],
    sink_id: str,
    commit_log: str | None = None,
    storage_options: dict[str, Any] | None = None,
    checkpoint_root: str | None = None,
) -> tuple[str, dict[str, Any] | None]:
    """Where a sink's commit log lives: the explicit URL, else the sink's default (files:
    next to the data), else ``<checkpoint>/twopc/<sink_id>``. The writer and the command
    line resolve it the same way."""
    if commit_log:
        return commit_log, storage_options
    default = sink.default_commit_log(sink_id)
    if default:
        return default, storage_options or sink.default_commit_log_options()
    if checkpoint_root:
        return join(checkpoint_root, "twopc", sink_id), storage_options
    raise ConfigurationError(
        "cannot tell where to keep the commit log: pass commit_log='<durable path>' "
        "(for example a directory next to the query's checkpoint)"
    )


@dataclass(frozen=True)
class StartedBatch:
    """A batch :meth:`BatchWriter.start` began: decided (``outcome`` is the
    :class:`DecidedBatch` to finish), or a replay that was skipped (its metrics)."""

    coordinator: Coordinator
    query_id: str
    batch_id: int
    outcome: BatchMetrics | DecidedBatch
    write_id: str | None = None


class BatchWriter:
    """Runs the coordinator for each batch and keeps the recent metrics.

    ``metrics`` holds the metrics of the last ``history`` batches (newest last);
    ``on_metrics`` is called after every batch, also for skipped replays. A liveness
    record next to the commit log says, while the query runs, that it does (``twopc
    recover`` refuses to act then); :meth:`close` removes it.
    """

    def __init__(self, sink: Sink[Any], sink_id: str, options: WriterOptions | None = None) -> None:
        check_roles(sink)
        options = options or WriterOptions()
        self.sink = sink
        self.sink_id = validate_sink_id(sink_id)
        if isinstance(sink, SinkGroup):
            _validate_member_ids(sink, self.sink_id)
        self.options = options
        self._faults = options.faults if options.faults is not None else FaultPlan.from_env()
        self.progress = options.progress
        self.metrics: deque[BatchMetrics] = deque(maxlen=options.history)
        self._coordinator: Coordinator | None = None
        self._started_at = time.time()
        self._queries: set[str] = set()
        self._writer_recorded: dict[str, float] = {}
        """When this writer last recorded itself in the target, per query (monotonic)."""
        self._committing: BackgroundCommit | None = None
        """The previous batch's phase 2, while it runs in the background."""
        self._other_writers = 0
        """Running writers of other queries met at a query's first batch, for the metrics
        of the batch that met them."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(sink={self.sink.describe()!r}, sink_id={self.sink_id!r})"

    @property
    def last_metrics(self) -> BatchMetrics | None:
        return self.metrics[-1] if self.metrics else None

    def coordinator(self, checkpoint_root: Callable[[], str | None]) -> Coordinator:
        """The coordinator, created on first use once the commit log location is known."""
        if self._coordinator is None:
            url, options = self._resolve_commit_log(checkpoint_root)
            _log.info("twopc sink=%s: commit log at %s", self.sink_id, url)
            self._coordinator = Coordinator(
                self.sink,
                self.sink_id,
                CommitLog(url, options),
                retry=self.options.retry,
                faults=self._faults,
                progress=self.progress,
                commit_parallelism=self.options.commit_parallelism,
            )
        return self._coordinator

    def _resolve_commit_log(
        self, checkpoint_root: Callable[[], str | None]
    ) -> tuple[str, dict[str, Any] | None]:
        url = self.options.commit_log
        needs_root = not url and not self.sink.default_commit_log(self.sink_id)
        return resolve_commit_log(
            self.sink,
            self.sink_id,
            url,
            self.options.storage_options,
            checkpoint_root() if needs_root else None,
        )

    def _heartbeat(
        self, coordinator: Coordinator, query_id: str, batch_id: int, state: HeartbeatState
    ) -> None:
        """Best effort: a lost heartbeat must not fail a batch whose data is fine."""
        record = Heartbeat(
            sink_id=self.sink_id,
            query_id=query_id,
            host=this_host(),
            pid=os.getpid(),
            started_at=self._started_at,
            updated_at=time.time(),
            batch_id=batch_id,
            state=state,
            process_start=own_process_start(),
        )
        try:
            coordinator.commit_log.write_heartbeat(record)
            self._queries.add(query_id)
        except Exception:
            _log.warning(
                "twopc sink=%s: writing the liveness record failed", self.sink_id, exc_info=True
            )

    def _refuse_a_second_writer(self, log: CommitLog, query_id: str, batch_id: int) -> None:
        """Refuse to write while another query writes this sink id: two checkpoints whose
        batch ids would interleave in one output (the docs forbid it). Judged, when this
        writer meets a query id first, by the other query's liveness record in the commit
        log (shared by both: the files sink's log next to its data, or one ``commit_log=``
        given to both) and, for a :class:`~twopc.TracksWriters` sink, by the record the
        target keeps. A record of this very process may belong to a query stopped in the
        same session, which cannot be told apart from a running one: only logged."""
        for other, where in self._writers_of_other_queries(log, query_id):
            liveness = other.assess()
            if not liveness.running:
                continue
            self._other_writers += 1
            if other.host == this_host() and other.pid == os.getpid():
                _log.warning(
                    "twopc sink=%s: query %s of this process also wrote this sink id; if it "
                    "still runs, stop one of them",
                    self.sink_id,
                    other.query_id,
                )
                continue
            raise ConfigurationError(
                f"another query writes sink id {self.sink_id!r} right now: query "
                f"{other.query_id} on {other.host} (pid {other.pid}; {liveness.reason}), "
                f"recorded in {where}. Two queries (two checkpoints) must not write one "
                "sink id: stop the other query, or give this one its own sink_id. If the "
                "other query is stopped, its record is stale: see 'Is the query running?' "
                "in docs/operations.md",
                sink_id=self.sink_id,
                batch_id=batch_id,
            )

    def _writers_of_other_queries(
        self, log: CommitLog, query_id: str
    ) -> list[tuple[Heartbeat, str]]:
        """Records of other queries of this sink id: the commit log's liveness records and
        the target's writer records, each with where it was found."""
        found = [
            (h, f"the commit log {log.url}")
            for h in log.heartbeats()
            if h.sink_id == self.sink_id and h.query_id != query_id
        ]
        if isinstance(self.sink, TracksWriters):
            try:
                records = self.sink.writers(self.sink_id)
            except Exception:
                _log.warning(
                    "twopc sink=%s: reading the target's writer records failed",
                    self.sink_id,
                    exc_info=True,
                )
                # a stalled target: recording this writer now would wait out its
                # timeout a second time; the next batch records it
                self._writer_recorded[query_id] = time.monotonic()
                records = []
            found += [
                (_as_heartbeat(r), f"the target ({self.sink.describe()})")
                for r in records
                if r.sink_id == self.sink_id and r.query_id != query_id
            ]
        return found

    def _record_writer(self, query_id: str) -> None:
        """Best effort, like the liveness record: the target's record of this writer, at a
        query's first batch and then at most every :data:`WRITER_RECORD_EVERY` seconds (a
        statement, often a connection, per batch would cost more than the rest of the
        coordination; a record from another host counts as running for 300 s)."""
        if not isinstance(self.sink, TracksWriters):
            return
        last = self._writer_recorded.get(query_id)
        now = time.monotonic()
        if last is not None and now - last < WRITER_RECORD_EVERY:
            return
        self._writer_recorded[query_id] = now
        record = WriterRecord(
            self.sink_id, query_id, this_host(), os.getpid(), time.time(), own_process_start()
        )
        try:
            self.sink.record_writer(record)
        except Exception:
            _log.warning(
                "twopc sink=%s: recording this writer in the target failed",
                self.sink_id,
                exc_info=True,
            )

    def close(self) -> None:
        """Wait for a batch committing in the background, then remove this writer's
        liveness records: the query stopped cleanly. Call it after ``query.stop()``; a
        crashed process leaves its record, which ``twopc status`` recognises as stale.
        Raises the background commit's error, if it failed (the batch is decided: a
        restart, or ``twopc recover``, finishes it)."""
        failed = self.wait_for_commit()
        self._remove_liveness()
        if failed is not None:
            raise failed

    def _remove_liveness(self) -> None:
        if self._coordinator is None:
            return
        for query_id in sorted(self._queries):
            try:
                self._coordinator.commit_log.remove_heartbeat(query_id)
                if isinstance(self.sink, TracksWriters):
                    self.sink.remove_writer(self.sink_id, query_id)
            except Exception:
                _log.warning("twopc sink=%s: removing the liveness record failed", self.sink_id)
        self._queries.clear()
        self._writer_recorded.clear()

    def run(
        self,
        query_id: str,
        batch_id: int,
        engine: BatchEngine,
        checkpoint_root: Callable[[], str | None],
        *,
        run_id: str = "",
        input_fingerprint: str | None = None,
        source_offsets: SourceOffsets | None = None,
        write_id: str | None = None,
    ) -> BatchMetrics:
        """Write one batch through the coordinator, keeping the liveness record and the
        metrics; ``write_id``: the key of a batch write, stamped on its metrics. The one
        place a batch's errors are stamped with the sink and the batch: whatever leaves is a
        twopc error naming both, and a batch that started and failed has failed metrics.
        :meth:`start` and :meth:`finish` (or :meth:`finish_in_background`) in one call."""
        started = self.start(
            query_id,
            batch_id,
            engine,
            checkpoint_root,
            run_id=run_id,
            input_fingerprint=input_fingerprint,
            source_offsets=source_offsets,
            write_id=write_id,
        )
        return self.finish(started)

    def start(
        self,
        query_id: str,
        batch_id: int,
        engine: BatchEngine,
        checkpoint_root: Callable[[], str | None],
        *,
        run_id: str = "",
        input_fingerprint: str | None = None,
        source_offsets: SourceOffsets | None = None,
        write_id: str | None = None,
    ) -> StartedBatch:
        """The batch up to its durable decision (or its replay skipped)."""
        started: Coordinator | None = None  # set once the batch started: it fails with metrics
        try:
            coordinator = self.coordinator(checkpoint_root)
            if query_id not in self._queries:
                try:
                    self._refuse_a_second_writer(coordinator.commit_log, query_id, batch_id)
                except ConfigurationError as refused:
                    # refused before it began: failed metrics, but no liveness record
                    self._record_failed(coordinator, query_id, batch_id, refused, write_id)
                    raise
            self._heartbeat(coordinator, query_id, batch_id, HeartbeatState.WRITING)
            self._record_writer(query_id)
            started = coordinator
            outcome = coordinator.start_batch(
                query_id,
                batch_id,
                engine,
                run_id=run_id,
                input_fingerprint=input_fingerprint,
                source_offsets=source_offsets,
            )
        except Exception as exc:
            error = self._failed(exc, started, query_id, batch_id, write_id)
            if error is exc:
                raise
            raise error from exc
        return StartedBatch(coordinator, query_id, batch_id, outcome, write_id)

    def finish(self, started: StartedBatch) -> BatchMetrics:
        """The rest of a batch :meth:`start` began: phase 2 of a decided batch, then its
        metrics and liveness record."""
        outcome = started.outcome
        if isinstance(outcome, DecidedBatch):
            return self._finish(started, outcome)
        return self._done(started, outcome)

    def finish_in_background(self, started: StartedBatch) -> None:
        """:meth:`finish` in a thread (``background_commit``): the batch's decision is
        durable, so this returns at once. The next batch (:meth:`wait_for_commit`) and
        :meth:`close` wait for it; one that failed is finished by the next recovery."""
        if isinstance(started.outcome, DecidedBatch):
            self._committing = BackgroundCommit(
                self.sink_id, started.batch_id, lambda: self.finish(started)
            )
        else:
            self.finish(started)

    def wait_for_commit(self) -> TwoPCError | None:
        """Wait for the phase 2 running in the background, if any; its error, if it
        failed (logged; the decided batch is finished by the next recovery)."""
        committing, self._committing = self._committing, None
        return committing.wait() if committing is not None else None

    def _finish(self, started: StartedBatch, batch: DecidedBatch) -> BatchMetrics:
        try:
            metrics = started.coordinator.finish_batch(batch)
        except Exception as exc:
            error = self._failed(
                exc, started.coordinator, started.query_id, started.batch_id, started.write_id
            )
            if error is exc:
                raise
            raise error from exc
        return self._done(started, metrics)

    def _failed(
        self,
        exc: Exception,
        coordinator: Coordinator | None,
        query_id: str,
        batch_id: int,
        write_id: str | None,
    ) -> TwoPCError:
        """The batch's error as a twopc error; a batch that started gets failed metrics."""
        error = as_twopc_error(exc, self.sink_id, batch_id)
        if coordinator is not None:
            self._heartbeat(coordinator, query_id, batch_id, HeartbeatState.FAILED)
            self._record_failed(coordinator, query_id, batch_id, error, write_id)
        return error

    def _done(self, started: StartedBatch, metrics: BatchMetrics) -> BatchMetrics:
        self._heartbeat(
            started.coordinator, started.query_id, started.batch_id, HeartbeatState.IDLE
        )
        if started.write_id is not None:
            metrics = replace(metrics, write_id=started.write_id)
        metrics = self._with_writer_figures(started.coordinator, metrics)
        self._record(metrics)
        return metrics

    def _record_failed(
        self,
        coordinator: Coordinator,
        query_id: str,
        batch_id: int,
        error: TwoPCError,
        write_id: str | None,
    ) -> None:
        failed = BatchMetrics(
            self.sink_id,
            query_id,
            batch_id,
            status=BatchStatus.FAILED,
            backend=self.sink.backend_name,
            commit_retries=coordinator.decider.retries.take(),
            finished_at=time.time(),
            error=str(error),
            write_id=write_id,
        )
        self._record(self._with_writer_figures(coordinator, failed))

    def _with_writer_figures(self, coordinator: Coordinator, metrics: BatchMetrics) -> BatchMetrics:
        """What the writer knows besides the batch: the work in doubt now, and the other
        writers its query met (counted once, on the batch that met them). Read from
        memory: no call to the commit log or the target."""
        in_doubt = coordinator.decider.in_doubt.now()
        other_writers, self._other_writers = self._other_writers, 0
        return replace(
            metrics,
            in_doubt=in_doubt.units,
            in_doubt_since=in_doubt.since,
            other_writers=other_writers,
        )

    def _record(self, metrics: BatchMetrics) -> None:
        self.metrics.append(metrics)
        on_metrics = self.options.on_metrics
        if on_metrics is None:
            return
        try:
            on_metrics(metrics)
        except Exception:
            # The batch is already decided; a broken callback must not fail the query.
            _log.exception("twopc sink=%s: on_metrics callback failed", self.sink_id)
