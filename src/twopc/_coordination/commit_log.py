"""The coordinator's durable decision log, on any fsspec filesystem.

Layout under the log's root (one directory per streaming query id, so a new checkpoint
never collides with an old one)::

    <root>/<query_id>/<batch:020d>.runs.json       each run of the batch, recorded before phase 1
    <root>/<query_id>/<batch:020d>.decision.json   the decision: every committable of the batch
    <root>/<query_id>/<batch:020d>.done            phase 2 finished
    <root>/<query_id>/.heartbeat.json              the running writer's liveness record

A decision is written atomically before the first commit; ``done`` after the last. A
decision without ``done`` is work that recovery must finish. The runs record says what each
run of the batch used (partition count, naming options, the input's fingerprint), so that a
restart in another shape still finds and aborts what an earlier run left, and a replay over
other input is recognised instead of skipped. Hidden names (the heartbeat,
a crashed atomic write's temporary file) are never read as batches.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from twopc._coordination.liveness import HEARTBEAT_NAME, Heartbeat, HeartbeatState
from twopc._coordination.records import (
    LOG_FORMAT,
    BatchRun,
    BatchState,
    Decision,
    LogListing,
    checked_entry,
)
from twopc.errors import ConfigurationError, UnsupportedFormatError
from twopc.protocol import Committable
from twopc.storage import (
    TEMP_PREFIX,
    atomic_write,
    create_exclusive,
    filesystem_for,
    fsync_directory,
    fsync_file,
    is_local,
    join,
)

__all__ = ["CommitLog"]

_DECISION_SUFFIX = ".decision.json"
_DONE_SUFFIX = ".done"
_RUNS_SUFFIX = ".runs.json"


class CommitLog:
    """Decisions and completions for one sink id, stored under ``url``."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url
        self._fs, self._root = filesystem_for(url, storage_options)
        self._syncing: list[_Sync] = []
        """Runs records whose fsync runs in the background (``record_run(defer_sync=True)``);
        every decision waits for them first."""

    def __repr__(self) -> str:
        return f"CommitLog({self.url!r})"

    def _path(self, query_id: str, batch_id: int, suffix: str) -> str:
        return join(self._root, query_id, f"{batch_id:020d}{suffix}")

    def record_decision(self, decision: Decision) -> None:
        """Durably record the decision to commit; must precede the first commit. Runs
        records written with a deferred sync are made durable first (their names by the
        decision's own directory sync, which follows)."""
        self.wait_for_syncs()
        if not decision.decided_at:
            decision = replace(decision, decided_at=time.time())
        self._fs.makedirs(join(self._root, decision.query_id), exist_ok=True)
        path = self._path(decision.query_id, decision.batch_id, _DECISION_SUFFIX)
        if create_exclusive(self._fs, path, decision.to_bytes()):
            return
        # never overwritten: a decision is there already
        existing = self.decision(decision.query_id, decision.batch_id)
        if existing is not None and _attempts(existing) == _attempts(decision):
            return  # the same decision (a write that reported a failure but landed)
        raise ConfigurationError(
            f"batch {decision.batch_id} of query {decision.query_id} was decided by another "
            "writer, with other task attempts: two queries (or two runs of one) write this "
            "sink id with the same checkpoint. Stop the other one; this run's work is left "
            "undecided and the next recovery aborts it",
            sink_id=decision.sink_id,
            batch_id=decision.batch_id,
        )

    def record_run(
        self,
        query_id: str,
        batch_id: int,
        run: BatchRun,
        known: Sequence[BatchRun] | None = None,
        *,
        defer_sync: bool = False,
    ) -> list[BatchRun]:
        """Add ``run`` to the batch's runs record unless an equal-shaped run is there;
        returns every run of the batch, oldest first. Must precede phase 1. ``known``: the
        runs already read (saves reading them again).

        ``defer_sync``: the record is visible at once and its fsync runs in the background,
        while phase 1 runs; the batch's decision waits for it. For sinks whose work no
        process can commit before the decision (the driver path): if the machine loses
        power before the decision, their prepared work is undecided, and recovery aborts it
        whether or not its run was recorded."""
        runs = list(known) if known is not None else self.runs(query_id, batch_id)
        if any(_same_record(r, run) for r in runs):
            return runs
        runs.append(run)
        self._write_runs(query_id, batch_id, runs, defer_sync=defer_sync)
        return runs

    def _write_runs(
        self, query_id: str, batch_id: int, runs: Sequence[BatchRun], *, defer_sync: bool = False
    ) -> None:
        self._fs.makedirs(join(self._root, query_id), exist_ok=True)
        body = {"format": LOG_FORMAT, "runs": [r.to_json() for r in runs]}
        path = self._path(query_id, batch_id, _RUNS_SUFFIX)
        data = json.dumps(body, sort_keys=True, indent=1).encode()
        deferred = defer_sync and is_local(self._fs)
        atomic_write(self._fs, path, data, durable=not deferred)
        if deferred:
            self._syncing.append(_Sync(path))

    def wait_for_syncs(self) -> None:
        """Wait for the runs records whose fsync was deferred; raises if one failed."""
        syncing, self._syncing = self._syncing, []
        for sync in syncing:
            sync.wait()

    def replace_run(self, query_id: str, batch_id: int, old: BatchRun, new: BatchRun) -> None:
        """Replace the recorded ``old`` run by ``new`` (a partition count learnt only from
        phase 1's reports); appends ``new`` if ``old`` is not there."""
        runs = [new if _same_record(r, old) else r for r in self.runs(query_id, batch_id)]
        if not any(_same_record(r, new) for r in runs):
            runs.append(new)
        self._write_runs(query_id, batch_id, runs)

    def runs(self, query_id: str, batch_id: int) -> list[BatchRun]:
        """Every recorded run of the batch, oldest first; empty when none was recorded
        (a batch written by an earlier version, or pruned)."""
        path = self._path(query_id, batch_id, _RUNS_SUFFIX)
        try:
            raw = self._fs.cat_file(path)
        except FileNotFoundError:
            return []
        with _naming(path, query_id, batch_id):
            body = checked_entry(raw, "runs record")
            try:
                return [BatchRun.from_json(r) for r in body.get("runs", [])]
            except (KeyError, TypeError, ValueError) as exc:
                raise UnsupportedFormatError(f"a runs record is incomplete ({exc!r})") from exc

    def listing(self) -> LogListing:
        """One pass over the log: its root, then each query's directory, once. Give it to
        :meth:`batch_state`, :meth:`pending` and :meth:`newest_runs` to read all three
        without listing again (``format("twopc")``'s commit, in a fresh process per batch)."""
        return LogListing(
            {q: frozenset(self._batch_files(q, exists=True)) for q in self.query_ids()}
        )

    def batch_state(
        self, query_id: str, batch_id: int, listing: LogListing | None = None
    ) -> BatchState:
        """Everything the coordinator checks before it skips or writes a batch, from one
        listing of the query's directory (or ``listing``) plus the batch's own files where
        they exist."""
        names = self._names(query_id, listing)
        stem = f"{batch_id:020d}"
        decided = _batches(names, _DECISION_SUFFIX)
        decision = (
            self.decision(query_id, batch_id) if f"{stem}{_DECISION_SUFFIX}" in names else None
        )
        runs = self.runs(query_id, batch_id) if f"{stem}{_RUNS_SUFFIX}" in names else []
        return BatchState(
            decision=decision,
            done=f"{stem}{_DONE_SUFFIX}" in names,
            runs=runs,
            newest_decided=max(decided) if decided else None,
            finished=tuple(sorted(set(decided) & set(_batches(names, _DONE_SUFFIX)))),
            decided=tuple(sorted(decided)),
        )

    def newest_runs(
        self, listing: LogListing | None = None
    ) -> dict[str, tuple[int, list[BatchRun]]]:
        """For each query id, its newest batch that has a runs record, with those runs.

        Only the newest batch of a query can have left open work behind: a batch starts
        after the one before it committed or was aborted by recovery."""
        found: dict[str, tuple[int, list[BatchRun]]] = {}
        for query_id in self._query_ids(listing):
            batches = _batches(self._names(query_id, listing), _RUNS_SUFFIX)
            if batches:
                newest = max(batches)
                found[query_id] = (newest, self.runs(query_id, newest))
        return found

    def mark_done(self, query_id: str, batch_id: int) -> None:
        """Record that phase 2 finished. The marker is empty: on a local disk it is created
        in place (nothing to tear, so no temporary file and rename), without an fsync of its
        own: the next decision's directory fsync makes it durable. It only saves work: a
        ``done`` lost to a power loss makes the next recovery finish the decided batch
        again, which is idempotent."""
        path = self._path(query_id, batch_id, _DONE_SUFFIX)
        if not is_local(self._fs):
            atomic_write(self._fs, path, b"")
            return
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o666))

    def exists(self) -> bool:
        """Whether any query has written here: ``twopc recover`` refuses to act on prepared
        work from a log that does not exist (a mistyped ``--checkpoint``)."""
        return bool(self.query_ids())

    def knows_batch(self, query_id: str, batch_id: int) -> bool:
        """Whether the log recorded a run or a decision of the batch. Every run is recorded
        before its phase 1, so prepared work of a batch the log does not know was written
        by a query that keeps its decisions elsewhere: only such a log can prove the batch
        undecided."""
        return any(
            self._fs.exists(self._path(query_id, batch_id, suffix))
            for suffix in (_RUNS_SUFFIX, _DECISION_SUFFIX)
        )

    def decision(self, query_id: str, batch_id: int) -> Decision | None:
        path = self._path(query_id, batch_id, _DECISION_SUFFIX)
        try:
            raw = self._fs.cat_file(path)
        except FileNotFoundError:
            return None
        with _naming(path, query_id, batch_id):
            return Decision.from_bytes(raw)

    def decisions_for(
        self,
        committables: Iterable[Committable],
        on_read: Callable[[int, int], None] | None = None,
    ) -> dict[tuple[str, int], Decision | None]:
        """The decision of each (query id, batch id) the committables belong to, each read
        once; ``None`` where no decision was recorded. Recovery and ``twopc status`` decide
        with it whether prepared work commits (the decision names it) or aborts.
        ``on_read(done, total)`` follows the committables, for progress on a terminal."""
        found: dict[tuple[str, int], Decision | None] = {}
        items = list(committables)
        for done, committable in enumerate(items, 1):
            key = (committable.query_id, committable.batch_id)
            if key not in found:
                found[key] = self.decision(*key)
            if on_read is not None:
                on_read(done, len(items))
        return found

    def is_done(self, query_id: str, batch_id: int) -> bool:
        return bool(self._fs.exists(self._path(query_id, batch_id, _DONE_SUFFIX)))

    def query_ids(self) -> list[str]:
        if not self._fs.exists(self._root):
            return []
        return sorted(
            _basename(entry["name"])
            for entry in self._fs.ls(self._root, detail=True)
            if entry["type"] == "directory" and not _basename(entry["name"]).startswith(".")
        )

    def _query_ids(self, listing: LogListing | None) -> list[str]:
        return sorted(listing.names) if listing is not None else self.query_ids()

    def _names(self, query_id: str, listing: LogListing | None) -> frozenset[str]:
        if listing is not None:
            return listing.names.get(query_id, frozenset())
        return frozenset(self._batch_files(query_id))

    def _batch_files(self, query_id: str, *, exists: bool = False) -> list[str]:
        """The names in a query's directory; ``exists``: it was just listed, do not check."""
        names = _list_names(self._fs, join(self._root, query_id), exists=exists)
        # Skip hidden names: a crash can leave an atomic write's temporary file behind.
        return [n for n in names if not n.startswith(".")]

    def decided_batches(self, query_id: str) -> list[int]:
        names = self._batch_files(query_id)
        return sorted(
            int(n[: -len(_DECISION_SUFFIX)]) for n in names if n.endswith(_DECISION_SUFFIX)
        )

    def done_batches(self, query_id: str) -> list[int]:
        """Batches whose phase 2 finished (within the log's retention), oldest first."""
        names = self._batch_files(query_id)
        return sorted(int(n[: -len(_DONE_SUFFIX)]) for n in names if n.endswith(_DONE_SUFFIX))

    # -- liveness -------------------------------------------------------------------------

    def write_heartbeat(self, heartbeat: Heartbeat) -> None:
        """Record that a writer runs this query (see :mod:`twopc._coordination.liveness`).
        Twice a batch, and only a hint (a crash leaves a stale record, which is recognised
        as such); readers never see half of it. The record at a batch's start is not
        synced; the one at its end is: on ext4, renaming unsynced data over an existing
        file makes the filesystem write it back at once (``auto_da_alloc``), and Spark's
        own commit log, written just after ``foreachBatch`` returns, waited ~15 ms a batch
        for it, more than the syncs cost (<1 ms on an idle disk). At the start, the
        batch's own synced records follow anyway."""
        directory = join(self._root, heartbeat.query_id)
        self._fs.makedirs(directory, exist_ok=True)
        atomic_write(
            self._fs,
            join(directory, HEARTBEAT_NAME),
            heartbeat.to_bytes(),
            durable=heartbeat.state is not HeartbeatState.WRITING,
        )

    def remove_heartbeat(self, query_id: str) -> None:
        path = join(self._root, query_id, HEARTBEAT_NAME)
        if self._fs.exists(path):
            self._fs.rm_file(path)

    def heartbeats(self) -> list[Heartbeat]:
        """Every query's liveness record; unreadable ones are skipped."""
        found = []
        for query_id in self.query_ids():
            try:
                raw = self._fs.cat_file(join(self._root, query_id, HEARTBEAT_NAME))
            except FileNotFoundError:
                continue
            try:
                found.append(Heartbeat.from_bytes(raw))
            except (ValueError, KeyError, UnsupportedFormatError):
                continue
        return found

    def remove_temporaries(self) -> int:
        """Delete the temporary files of atomic writes a crash interrupted (local
        filesystems only; others write in one call). Safe because only the query's own
        driver writes here, and it calls this before writing."""
        if not is_local(self._fs):
            return 0
        removed = 0
        for query_id in self.query_ids():
            directory = join(self._root, query_id)
            for path in self._fs.ls(directory, detail=False):
                if _basename(path).startswith(TEMP_PREFIX):
                    with contextlib.suppress(FileNotFoundError):
                        self._fs.rm_file(path)
                        removed += 1
        return removed

    def pending(
        self,
        listing: LogListing | None = None,
        on_read: Callable[[int, int], None] | None = None,
    ) -> list[Decision]:
        """Decisions whose phase 2 has not been marked done, across every query id (as
        ``listing`` saw the log, when given). ``on_read(done, total)`` follows the reads of
        those decisions, for progress on a terminal."""
        undone: list[tuple[str, int]] = []
        for query_id in self._query_ids(listing):
            names = self._names(query_id, listing)
            for name in sorted(names):
                if not name.endswith(_DECISION_SUFFIX):
                    continue
                stem = name[: -len(_DECISION_SUFFIX)]
                if f"{stem}{_DONE_SUFFIX}" not in names:
                    undone.append((query_id, int(stem)))
        found: list[Decision] = []
        for done, (query_id, batch_id) in enumerate(undone, 1):
            decision = self.decision(query_id, batch_id)
            if decision is not None:
                found.append(decision)
            if on_read is not None:
                on_read(done, len(undone))
        return found

    def withdraw_decision(self, decision: Decision) -> None:
        """Remove the conditional decision of a batch whose last resource did not commit
        (fenced first, so it never will): the batch is undecided again and its replay
        records a decision of its own. Only conditional decisions are ever withdrawn."""
        if decision.last_resource is None:
            raise ConfigurationError(
                f"batch {decision.batch_id} of query {decision.query_id} has an "
                "unconditional decision; it cannot be withdrawn",
                sink_id=decision.sink_id,
                batch_id=decision.batch_id,
            )
        path = self._path(decision.query_id, decision.batch_id, _DECISION_SUFFIX)
        with contextlib.suppress(FileNotFoundError):
            self._fs.rm_file(path)
        if is_local(self._fs):
            fsync_directory(os.path.dirname(path))

    def forget(self, query_id: str, batch_ids: Sequence[int]) -> None:
        """Delete entries of finished batches (log retention)."""
        for batch_id in batch_ids:
            for suffix in (_DECISION_SUFFIX, _DONE_SUFFIX, _RUNS_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    self._fs.rm_file(self._path(query_id, batch_id, suffix))


@contextlib.contextmanager
def _naming(path: str, query_id: str, batch_id: int) -> Iterator[None]:
    """Say which file of which batch could not be read: an operator must find it to
    repair or remove it (a torn write on a filesystem without atomic renames, a disk
    error, an edit by hand)."""
    try:
        yield
    except UnsupportedFormatError as exc:
        raise UnsupportedFormatError(
            f"{exc.cause_message} (file {path}: batch {batch_id} of query {query_id}). "
            "Restore the file from a backup, or run the twopc version that wrote it; see "
            "'A damaged commit log' in docs/operations.md",
            batch_id=batch_id,
        ) from exc


def _list_names(fs: Any, directory: str, *, exists: bool = False) -> list[str]:
    """The names in ``directory`` (empty when it does not exist; ``exists``: it was just
    listed). On a local disk ``os.listdir``: fsspec's ``ls`` normalises every entry's path,
    which cost more than the rest of a batch's log work once the log held its retention."""
    if is_local(fs):
        try:
            return os.listdir(directory)
        except FileNotFoundError:
            return []
    if not exists and not fs.exists(directory):
        return []
    return [_basename(p) for p in fs.ls(directory, detail=False)]


class _Sync:
    """The fsync of one file in a thread of its own, which ends with it (no thread stays
    behind for the local engine's forked tasks to inherit)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="twopc-fsync", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            fsync_file(self.path)
        except BaseException as exc:  # handed to the waiting decision
            self._error = exc

    def wait(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


def _same_record(a: BatchRun, b: BatchRun) -> bool:
    return (a.footprint, a.input, a.path) == (b.footprint, b.input, b.path)


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _attempts(decision: Decision) -> set[tuple[int, int]]:
    return {(c.partition, c.attempt) for c in decision.committables}


def _batches(names: Iterable[str], suffix: str) -> list[int]:
    return [int(n[: -len(suffix)]) for n in names if n.endswith(suffix)]
