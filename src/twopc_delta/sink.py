"""The Delta sink: tasks write Parquet data files, the driver commits a batch's files in
one Delta commit carrying the batch's app transaction.

Phase 1 (each task) writes the batch's rows as the table's columns, one file per partition
value, into a directory of the attempt's own under the table's root
(:mod:`twopc_delta._layout`), with pyarrow; ``pre_commit`` closes and syncs the files and
records the attempt's committable next to the table. The driver commits a whole batch in
one call (:meth:`DeltaSink.commit_units`): every file of the batch as add actions in **one
Delta commit**, with the app transaction ``(app_id(sink id, query id), batch id)`` and the
batch's details in the commit's info (:mod:`twopc_delta._markers`); a commit that finds
its batch's version writes nothing. A commit that loses to a concurrent writer (deltalake's
conflict check) is planned again on the new version after reading the app transaction
again, never re-applied blindly. ``mode="upsert"``: :mod:`twopc_delta._upsert`.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
from deltalake import DeltaTable, Field
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError, DeltaProtocolError
from deltalake.transaction import (
    CommitProperties,
    Transaction,
    create_table_with_add_actions,
)

from twopc import (
    CommitError,
    CommitOutcome,
    CommitsOnDriver,
    CommitStateUnknownError,
    Committable,
    Footprint,
    Inspection,
    KeepsMarkers,
    KeepsSourceOffsets,
    PermanentSinkError,
    RecoveryScope,
    Sink,
    SparkOutput,
    SparkWrite,
    StoredBatch,
    TargetMarker,
    TaskContext,
    TransientSinkError,
    WritesWithSpark,
)
from twopc.spark_output import write_path_refusal
from twopc.table_formats import (
    AttemptId,
    AttemptRecords,
    GaveWay,
    RecordEntry,
    check_keys,
    commit_by_batch,
)
from twopc_delta._datafiles import (
    FileWriter,
    PartitionValues,
    WrittenFile,
    check_partition_types,
    conform,
    split_by_partition,
)
from twopc_delta._layout import attempt_data_dir, rewrite_data_dir
from twopc_delta._log import TableInfo, read_log
from twopc_delta._markers import app_id, batch_commits, commit_metadata, find_batch
from twopc_delta._options import MODES, SCHEMA_EVOLUTION, WRITE_PATHS, check_options
from twopc_delta._payload import DeltaPayload
from twopc_delta._records import records_of
from twopc_delta._spark_phase1 import SparkPhase1
from twopc_delta._table import TableAccess, arrow_schema
from twopc_delta._upsert import KeyLog, Rewrite, last_rows_win, plan_rewrite

__all__ = ["MODES", "SCHEMA_EVOLUTION", "WRITE_PATHS", "DeltaPayload", "DeltaSink", "app_id"]

_log = logging.getLogger("twopc.delta")


@dataclass
class DeltaTransaction:
    """One task's open data files. Only the task that created it uses it."""

    ctx: TaskContext
    attempt: AttemptId
    writer: FileWriter | None = None
    records: AttemptRecords | None = None
    target: pa.Schema | None = None
    """The table's columns (``None``: the table does not exist yet, the data's columns)."""
    partition_by: tuple[str, ...] = ()
    schema: pa.Schema | None = None
    """The data's schema (first batch); every later batch of the task must match it."""
    written: pa.Schema | None = None
    """The columns the task's files hold, partition columns included."""
    keys: KeyLog | None = None
    rows: int = 0
    gave_way: bool = False


class _LostRace(Exception):
    """Another writer committed first; nothing of this commit landed."""


def _file_key(values: PartitionValues) -> str:
    return json.dumps(sorted(values.items()))


class DeltaSink(
    Sink[DeltaTransaction], CommitsOnDriver, KeepsMarkers, KeepsSourceOffsets, WritesWithSpark
):
    """Exactly-once writes into a Delta Lake table, one Delta commit per batch.

    Args:
        table_uri: The table's root: a local path or a URL deltalake and fsspec both read
            (``s3://bucket/events``).
        mode: ``"append"`` or ``"upsert"`` (one row per key, the batch's last row wins;
            copy-on-write).
        key_columns: Upsert keys (required with ``mode="upsert"``).
        partition_by: Partition columns of a table the sink creates (strings, integers,
            booleans, dates).
        create_table: Create a missing table from the first batch's columns, in the
            batch's own commit.
        schema_evolution: ``"add_columns"`` adds the data's new columns (nullable).
        storage_options: Options for deltalake and fsspec (credentials, endpoint); never
            logged.
        configuration: Table properties of a table the sink creates
            (``{"delta.logRetentionDuration": "interval 60 days"}``).
        commit_retries: How often a commit that lost to a concurrent writer is planned
            and tried again on the table's new version.
        write_path: Where phase 1 runs from ``twopc.foreach_batch`` and
            ``twopc.write_batch``: ``"auto"`` (Spark's own Parquet writer, one job per
            batch, when it can write the table, else Python tasks), ``"spark"`` (always
            Spark's; a table it cannot write is a ConfigurationError) or ``"python"``.
    """

    backend_name: ClassVar[str] = "delta"

    def __init__(
        self,
        table_uri: str,
        *,
        mode: str = "append",
        key_columns: Sequence[str] = (),
        partition_by: Sequence[str] = (),
        create_table: bool = False,
        schema_evolution: str = "none",
        storage_options: Mapping[str, str] | None = None,
        configuration: Mapping[str, str] | None = None,
        commit_retries: int = 10,
        write_path: str = "auto",
    ) -> None:
        check_options(
            table_uri=table_uri,
            mode=mode,
            key_columns=key_columns,
            partition_by=partition_by,
            create_table=create_table,
            schema_evolution=schema_evolution,
            storage_options=storage_options,
            commit_retries=commit_retries,
            configuration=configuration,
            write_path=write_path,
        )
        self.table_uri = table_uri
        self.write_path = write_path
        self.mode = mode
        self.key_columns = tuple(key_columns)
        self.add_columns = schema_evolution == "add_columns"
        self.commit_retries = commit_retries
        self.access = TableAccess(
            uri=table_uri,
            storage_options={str(k): str(v) for k, v in (storage_options or {}).items()},
            create_table=create_table,
            partition_by=tuple(partition_by),
            configuration={str(k): str(v) for k, v in (configuration or {}).items()},
        )

    # -- identity --------------------------------------------------------------------------

    def describe(self) -> str:
        return f"delta table {self.table_uri}"

    def __repr__(self) -> str:
        return f"DeltaSink(table_uri={self.table_uri!r}, mode={self.mode!r})"

    def partition_columns(self) -> tuple[str, ...]:
        return self.key_columns if self.mode == "upsert" else ()

    def load_table(self) -> DeltaTable | None:
        """The table as its log holds it now (deltalake's ``DeltaTable``), or ``None`` when
        it does not exist: for reading it back (``load_table().to_pyarrow_table()``)."""
        return self.access.load()

    @staticmethod
    def app_id(sink_id: str, query_id: str) -> str:
        """The Delta app id (``txnAppId``) of a query writing a sink id: its batches are
        committed with version = batch id."""
        return app_id(sink_id, query_id)

    def _records(self, sink_id: str) -> AttemptRecords:
        return records_of(self.access.place, sink_id)

    # -- phase 1 ---------------------------------------------------------------------------

    def begin_transaction(self, ctx: TaskContext) -> DeltaTransaction:
        return DeltaTransaction(ctx, AttemptId.of(ctx))

    def invoke(self, txn: DeltaTransaction, batch: pa.RecordBatch) -> None:
        if txn.writer is None:
            self._start(txn, batch.schema)
        elif txn.schema is not None and not txn.schema.equals(batch.schema):
            raise PermanentSinkError(
                f"schema changed inside one task: {txn.schema} then {batch.schema}"
            )
        assert txn.writer is not None
        if batch.num_rows == 0:
            return
        rows = batch
        if txn.target is not None:
            rows = conform(batch, txn.target, add_columns=self.add_columns, table=self.table_uri)
        if txn.written is None:
            txn.written = self._checked_schema(rows.schema)
        if txn.keys is not None:
            check_keys(self.key_columns, rows, txn.rows, f"Delta table {self.table_uri}")
        for values, piece, positions in split_by_partition(rows, txn.partition_by):
            txn.writer.write(values, piece)
            if txn.keys is not None:
                txn.keys.add(rows, positions, _file_key(values), txn.rows)
        txn.rows += rows.num_rows

    def _checked_schema(self, schema: pa.Schema) -> pa.Schema:
        """The files' columns, refused when Delta has no type for one."""
        try:
            DeltaSchema.from_arrow(schema)
        except Exception as exc:
            raise PermanentSinkError(
                f"Delta table {self.table_uri} cannot take the data's columns: {exc}"
            ) from None
        return schema

    def _start(self, txn: DeltaTransaction, schema: pa.Schema) -> None:
        """The task's first batch: find the table (or note that the commit creates it),
        check that the sink can write it, mark the attempt as started, open the writer."""
        try:
            info = read_log(self.access.place)
        except PermissionError as exc:
            raise self.access.error("cannot read", exc) from None
        except (OSError, ValueError, KeyError) as exc:
            raise self.access.error("cannot read the log of", exc) from None
        if info is None:
            if not self.access.create_table:
                self.access.require_log()
            txn.partition_by = self.access.partition_by
            check_partition_types(schema, txn.partition_by, self.table_uri)
        else:
            self.access.check_writable(info, upsert=self.mode == "upsert")
            txn.target = info.arrow_schema()
            txn.partition_by = info.partition_columns
            check_partition_types(txn.target, txn.partition_by, self.table_uri)
        txn.schema = schema
        if self.mode == "upsert":
            txn.keys = KeyLog(self.key_columns)
        txn.records = self._records(txn.ctx.sink_id)
        try:
            txn.records.mark_started(txn.attempt)
        except PermissionError as exc:
            raise PermanentSinkError(
                f"cannot write to the location of Delta table {self.table_uri}: permission "
                f"denied ({exc})"
            ) from None
        except OSError as exc:
            raise TransientSinkError(
                f"cannot write to the location of Delta table {self.table_uri}: {exc}"
            ) from None
        place = self.access.place
        txn.writer = FileWriter(
            place.fs,
            attempt_data_dir(place.path, txn.ctx.sink_id, txn.attempt),
            attempt_data_dir("", txn.ctx.sink_id, txn.attempt),
        )

    def pre_commit(self, txn: DeltaTransaction) -> Committable:
        if txn.writer is None or txn.records is None or txn.written is None:
            # no rows: nothing was written, nothing to find again
            if txn.writer is not None:
                txn.writer.discard()
            if txn.records is not None:
                txn.records.forget(txn.attempt)
            return Committable.for_task(txn.ctx, DeltaPayload(self.table_uri, ()))
        try:
            files = txn.writer.close_all()
            if txn.keys is not None:
                files = last_rows_win(
                    txn.writer, txn.keys, files, lambda f: _file_key(f.partition_values)
                )
        except PermissionError as exc:
            raise PermanentSinkError(
                f"cannot write to the location of Delta table {self.table_uri}: {exc}"
            ) from None
        schema = DeltaSchema.from_arrow(txn.written).to_json()
        payload = DeltaPayload(self.table_uri, tuple(files), schema, self.partition_columns())
        committable = Committable.for_task(txn.ctx, payload)
        try:
            txn.records.mark_prepared(txn.attempt, committable)
        except GaveWay:
            txn.gave_way = True
            raise
        except OSError as exc:
            raise TransientSinkError(f"cannot record the prepared attempt: {exc}") from None
        return committable

    def abort(self, txn: DeltaTransaction) -> None:
        if txn.writer is not None:
            txn.writer.discard()
        if txn.records is None or txn.gave_way:
            return
        try:
            self._remove_attempt(txn.ctx.sink_id, txn.attempt)
        except OSError as exc:
            _log.warning("twopc delta: %s left for the sweep: %s", txn.attempt, exc)

    def _remove_attempt(self, sink_id: str, attempt: AttemptId) -> None:
        """Delete an attempt's data files, then its records."""
        place = self.access.place
        directory = attempt_data_dir(place.path, sink_id, attempt)
        if place.fs.exists(directory):
            place.fs.rm(directory, recursive=True)
        self._records(sink_id).forget(attempt)

    # -- phase 1 by Spark's own writer (WritesWithSpark) ----------------------------------

    def _spark(self) -> SparkPhase1:
        return SparkPhase1(self.access, self.mode, self.add_columns)

    def spark_write_refusal(self) -> str | None:
        return write_path_refusal(
            self.write_path, lambda: self._spark().refusals(), "delta", self.table_uri
        )

    def spark_write_required(self) -> bool:
        return self.write_path == "spark"

    def plan_spark_write(self, ctx: TaskContext, columns: Sequence[str]) -> SparkWrite:
        write, info = self._spark().plan(ctx, columns)
        self._planned: tuple[AttemptId, TableInfo] | None = (AttemptId.of(ctx), info)
        return write

    def spark_written(self, ctx: TaskContext, write: SparkWrite) -> list[SparkOutput]:
        """The job's output described against the table its plan saw (the job wrote that
        table's columns)."""
        planned = getattr(self, "_planned", None)  # absent in a copy unpickled in a task
        info = planned[1] if planned is not None and planned[0] == AttemptId.of(ctx) else None
        if info is None:
            info = read_log(self.access.place)
            if info is None:
                self.access.require_log()
        assert info is not None
        self._planned = None
        return self._spark().written(ctx, info)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for the tasks without the driver's plan."""
        state = dict(self.__dict__)
        state.pop("_planned", None)
        return state

    # -- phase 2 ---------------------------------------------------------------------------

    def commit_units(self, committables: Sequence[Committable]) -> list[list[Committable]]:
        """The whole batch in one call: one Delta commit per batch."""
        return [list(committables)] if committables else []

    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        return commit_by_batch(committables, self._commit_batch)

    def _commit_batch(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        """Commit committables of one batch in one Delta commit; a commit that lost to
        another writer is tried again after reading the app transaction again."""
        first = committables[0]
        payloads = [DeltaPayload.of(c) for c in committables]
        for payload in payloads:
            if payload.table != self.table_uri:
                raise PermanentSinkError(
                    f"batch {first.batch_id} was prepared for Delta table {payload.table}, "
                    f"not {self.table_uri}: restart with the table it was prepared for"
                )
        app = app_id(first.sink_id, first.query_id)
        for attempt in range(self.commit_retries + 1):
            table = self.access.load()
            if table is None:
                if not any(p.files for p in payloads):
                    # an empty batch before any row created the table: nothing to commit
                    return [CommitOutcome.COMMITTED] * len(committables)
                try:
                    self._create(committables, payloads)
                except _LostRace as lost:
                    self._wait_after_lost_race(first, attempt, lost)
                    continue
                self._forget(committables)
                return [CommitOutcome.COMMITTED] * len(committables)
            held = self._held(table, app, first)
            todo = [
                i for i, c in enumerate(committables) if held is None or c.partition not in held
            ]
            if todo:
                try:
                    self._commit_once(
                        table,
                        [committables[i] for i in todo],
                        [payloads[i] for i in todo],
                        count=len(committables),
                    )
                except _LostRace as lost:
                    self._wait_after_lost_race(first, attempt, lost)
                    continue
            already = [i for i in range(len(committables)) if i not in todo]
            self._drop_duplicates(held or {}, [committables[i] for i in already])
            self._forget(committables)
            outcomes = [CommitOutcome.ALREADY_COMMITTED] * len(committables)
            for i in todo:
                outcomes[i] = CommitOutcome.COMMITTED
            return outcomes
        raise TransientSinkError(
            f"the commit of batch {first.batch_id} to Delta table {self.table_uri} lost to "
            f"other writers {self.commit_retries + 1} times; nothing of it is visible, and the "
            "commit is tried again (raise commit_retries for a table with many writers)"
        )

    def _held(self, table: DeltaTable, app: str, first: Committable) -> dict[int, int] | None:
        """What the table holds of ``first``'s batch: ``None`` when nothing, else the
        attempts committed per partition. Every partition counts as held when a later batch
        committed (batches commit whole and in order) or the log no longer tells; its
        attempts are then those the log still shows (-1 where it does not)."""
        version = table.transaction_version(app)
        if version is None or version < first.batch_id:
            return None
        found = find_batch(table, first.sink_id, first.query_id, first.batch_id)
        if found is None:
            return _Everything()
        if version > first.batch_id:
            return _Everything(found)
        return found

    def _drop_duplicates(
        self, held: Mapping[int, int], committables: Sequence[Committable]
    ) -> None:
        """Committables of partitions the table already holds from another attempt (a batch
        run again from a checkpoint put back from a copy): their files are nobody's."""
        for c in committables:
            committed = held.get(c.partition, -1)
            if committed < 0 or committed == c.attempt:
                continue
            _log.info(
                "twopc delta: batch %d partition %d is in the table already, from attempt %d: "
                "removing the files of attempt %d",
                c.batch_id,
                c.partition,
                committed,
                c.attempt,
            )
            self._remove_attempt(c.sink_id, AttemptId.of(c))

    def _wait_after_lost_race(self, first: Committable, attempt: int, lost: _LostRace) -> None:
        wait = min(0.05 * (2**attempt), 2.0) * random.uniform(0.75, 1.25)
        _log.info(
            "twopc delta: batch %d of %s lost the commit to another writer (%s); planning it "
            "again on the new version in %.2f s (%d/%d)",
            first.batch_id,
            self.table_uri,
            lost,
            wait,
            attempt + 1,
            self.commit_retries,
        )
        time.sleep(wait)

    def _properties(self, committables: Sequence[Committable], count: int) -> CommitProperties:
        first = committables[0]
        meta = commit_metadata(
            first.sink_id,
            first.query_id,
            first.batch_id,
            attempts={c.partition: c.attempt for c in committables},
            count=count,
            offsets=first.source_offsets,
        )
        return CommitProperties(
            custom_metadata=meta,
            app_transactions=[Transaction(app_id(first.sink_id, first.query_id), first.batch_id)],
        )

    def _create(
        self, committables: Sequence[Committable], payloads: Sequence[DeltaPayload]
    ) -> None:
        """Create the table with the batch's files in its first commit. Raises
        :class:`_LostRace` when another writer created it first."""
        first = committables[0]
        files = [f for p in payloads for f in p.files]
        self._check_files_exist(first, files)
        schema = _merged_schema([p.schema for p in payloads if p.schema])
        try:
            create_table_with_add_actions(
                self.table_uri,
                schema,
                [f.add_action() for f in files],
                mode="error",
                partition_by=list(self.access.partition_by) or None,
                configuration=dict(self.access.configuration) or None,
                storage_options=dict(self.access.storage_options) or None,
                commit_properties=self._properties(committables, len(committables)),
            )
        except (DeltaError, OSError) as exc:
            if self.access.load() is not None:
                raise _LostRace(
                    f"the table was created meanwhile: {self.access.clean(exc)}"
                ) from None
            raise self.access.error(f"cannot create (batch {first.batch_id})", exc) from None
        _log.info(
            "twopc delta: batch %d created %s: %d file(s), %d row(s)",
            first.batch_id,
            self.table_uri,
            len(files),
            sum(f.rows for f in files),
        )

    def _commit_once(
        self,
        table: DeltaTable,
        committables: Sequence[Committable],
        payloads: Sequence[DeltaPayload],
        *,
        count: int,
    ) -> None:
        """One Delta commit of the files, their upsert's removes and the app transaction.
        Raises :class:`_LostRace` when another writer committed first (nothing landed)."""
        first = committables[0]
        files = [f for p in payloads for f in p.files]
        self._check_files_exist(first, files)
        table = self._with_new_columns(table, first, [p.schema for p in payloads if p.schema])
        self.access.check_writable(TableInfo.of(table), upsert=self.mode == "upsert")
        records = self._records(first.sink_id)
        rewrite = self._plan_rewrite(table, first, files) if self.mode == "upsert" else Rewrite()
        actions: list[Any] = [f.add_action() for f in files]
        actions += rewrite.removed
        actions += [f.add_action() for f in rewrite.added]
        try:
            table.create_write_transaction(
                actions,
                "append",
                table.schema(),
                partition_by=list(table.metadata().partition_columns) or None,
                commit_properties=self._properties(committables, count),
            )
        except CommitFailedError as exc:
            self._drop_rewrite(records, first, rewrite)
            raise _LostRace(self.access.clean(exc)) from None
        except DeltaProtocolError as exc:
            self._drop_rewrite(records, first, rewrite)
            raise PermanentSinkError(
                f"Delta table {self.table_uri} refused batch {first.batch_id}: "
                f"{self.access.clean(exc)}"
            ) from None
        except Exception as exc:
            self._after_unknown(first, exc)  # landed, or raises
        if rewrite.directory:
            records.forget_rewrite(first.query_id, first.batch_id, rewrite.rewrite_id)
        _log.info(
            "twopc delta: batch %d committed to %s: %d file(s), %d row(s)%s",
            first.batch_id,
            self.table_uri,
            len(files),
            sum(f.rows for f in files),
            f", {len(rewrite.removed)} file(s) rewritten" if rewrite.removed else "",
        )

    def _with_new_columns(
        self, table: DeltaTable, first: Committable, schemas: Sequence[str]
    ) -> DeltaTable:
        """The table with the files' new columns added (nullable), in a commit of their own
        before the data's: a column nobody wrote yet is null for every reader."""
        names = set(arrow_schema(table).names)
        new: dict[str, Field] = {}
        for text in schemas:
            for column in DeltaSchema.from_json(text).fields:
                if column.name not in names:
                    new.setdefault(column.name, column)
        if not new:
            return table
        if not self.add_columns:
            raise PermanentSinkError(
                f"batch {first.batch_id} has column(s) {', '.join(map(repr, new))} that Delta "
                f"table {self.table_uri} does not have (schema_evolution='add_columns' adds them)"
            )
        try:
            table.alter.add_columns(
                [Field(c.name, c.type, nullable=True, metadata=c.metadata) for c in new.values()]
            )
        except DeltaError as exc:
            raise _LostRace(f"adding columns: {self.access.clean(exc)}") from None
        _log.info(
            "twopc delta: added column(s) %s to %s for batch %d",
            ", ".join(new),
            self.table_uri,
            first.batch_id,
        )
        return self.access.require()

    def _after_unknown(self, first: Committable, exc: Exception) -> None:
        """The commit failed without saying whether it landed: ask the app transaction.
        Returns when it landed; raises otherwise."""
        cause = self.access.clean(exc)
        try:
            table = self.access.require()
        except TransientSinkError:
            raise CommitStateUnknownError(
                f"the commit of batch {first.batch_id} to Delta table {self.table_uri} failed "
                f"({cause}) and the table cannot be read to tell whether it landed; the "
                "commit is tried again, which writes nothing if it did"
            ) from None
        version = table.transaction_version(app_id(first.sink_id, first.query_id))
        if version is not None and version >= first.batch_id:
            _log.info(
                "twopc delta: batch %d's commit reported %s, but the table shows it committed",
                first.batch_id,
                cause,
            )
            return
        raise self.access.error(f"cannot commit batch {first.batch_id} to", exc) from None

    def _check_files_exist(self, first: Committable, files: Sequence[WrittenFile]) -> None:
        place = self.access.place
        for written in files:
            if not place.fs.exists(place.join(written.path)):
                raise CommitError(
                    f"the data file {written.path} of batch {first.batch_id} is gone from "
                    f"Delta table {self.table_uri}: the table's location was changed outside "
                    "twopc (a VACUUM with too short a retention?)"
                )

    def _plan_rewrite(
        self, table: DeltaTable, first: Committable, files: Sequence[WrittenFile]
    ) -> Rewrite:
        records = self._records(first.sink_id)
        place = self.access.place

        def directory_of(rewrite_id: str) -> tuple[str, str]:
            args = (first.sink_id, first.query_id, first.batch_id, rewrite_id)
            return rewrite_data_dir(place.path, *args), rewrite_data_dir("", *args)

        return plan_rewrite(
            table,
            place,
            files,
            names=self.key_columns,
            directory_of=directory_of,
            on_first_write=lambda rewrite: records.mark_rewrite(
                first.query_id, first.batch_id, rewrite.rewrite_id
            ),
        )

    def _drop_rewrite(self, records: AttemptRecords, first: Committable, rewrite: Rewrite) -> None:
        """A commit that did not land: its rewritten files are nobody's."""
        if not rewrite.directory:
            return
        fs = self.access.place.fs
        if fs.exists(rewrite.directory):
            fs.rm(rewrite.directory, recursive=True)
        records.forget_rewrite(first.query_id, first.batch_id, rewrite.rewrite_id)

    def _forget(self, committables: Sequence[Committable]) -> None:
        """Remove the records of committed attempts (their data files stay: the table
        references them)."""
        if committables:  # one batch: one sink id
            self._records(committables[0].sink_id).forget_committed(committables)

    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        if not committables:
            return
        table = self.access.load()
        seen: dict[tuple[str, str, int], dict[int, int] | None] = {}
        for c in committables:
            attempt = AttemptId.of(c)
            key = (c.sink_id, c.query_id, c.batch_id)
            if key not in seen:
                app = app_id(c.sink_id, c.query_id)
                seen[key] = self._held(table, app, c) if table is not None else None
            held = seen[key]
            committed = None if held is None else held.get(c.partition, -1)
            if committed is not None and committed in (-1, c.attempt):
                _log.warning(
                    "twopc delta: not deleting the files of %s: the table shows %s",
                    attempt,
                    "that attempt committed" if committed == c.attempt else "its batch committed",
                )
                self._records(c.sink_id).forget(attempt)
                continue
            self._remove_attempt(c.sink_id, attempt)

    # -- recovery --------------------------------------------------------------------------

    def recover(self, sink_id: str) -> list[Committable]:
        return self._records(sink_id).prepared()

    def sweep(self, sink_id: str, keep: Sequence[Committable] = ()) -> int:
        """Delete the files of attempts that started but never prepared, and of upsert
        rewrites whose commit never landed."""
        records = self._records(sink_id)
        return records.sweep(
            keep,
            lambda attempt: self._remove_attempt(sink_id, attempt),
            lambda entry: self._sweep_rewrite(records, entry),
        )

    def _sweep_rewrite(self, records: AttemptRecords, entry: RecordEntry) -> None:
        """A rewrite record a crash left: its files are the table's if the table
        references them, else nobody's."""
        assert entry.rewrite_id is not None
        place = self.access.place
        args = (records.sink_id, entry.query_id, entry.batch_id, entry.rewrite_id)
        directory = rewrite_data_dir(place.path, *args)
        relative = rewrite_data_dir("", *args)
        table = self.access.load()
        referenced = False
        if table is not None:
            paths = pa.table(table.get_add_actions()).column("path").to_pylist()
            referenced = any(str(p).startswith(f"{relative}/") for p in paths)
        if not referenced and place.fs.exists(directory):
            place.fs.rm(directory, recursive=True)
        records.forget_path(entry.path)

    def committed_partitions(
        self, scope: RecoveryScope, batch_id: int, footprint: Footprint
    ) -> set[int] | None:
        table = self.access.load()
        if table is None:
            return set()
        version = table.transaction_version(app_id(scope.sink_id, scope.query_id))
        if version is None or version < batch_id:
            return set()
        if version == batch_id:
            found = find_batch(table, scope.sink_id, scope.query_id, batch_id)
            if found is not None:
                return set(found)
        return set(range(footprint.partitions))

    def stored_offsets(self, sink_id: str) -> list[StoredBatch]:
        """The newest batch of every query, as the log's commit infos keep it."""
        table = self.access.load()
        if table is None:
            return []
        newest: dict[str, StoredBatch] = {}
        for commit in batch_commits(table, sink_id):
            if commit.query_id in newest:
                continue
            newest[commit.query_id] = StoredBatch(
                commit.query_id,
                commit.batch_id,
                frozenset(commit.attempts),
                commit.count,
                commit.offsets,
                commit.committed_at,
            )
        return [newest[q] for q in sorted(newest)]

    def inspect(self, sink_id: str) -> Inspection:
        """Prepared attempts, attempts that never prepared, and the table's markers."""
        pending = self._records(sink_id).pending()
        table = self.access.load()
        if table is None:
            return Inspection(
                pending=tuple(pending),
                markers=(),
                notes=(f"Delta table {self.table_uri} does not exist (yet)",),
            )
        markers = tuple(
            TargetMarker(b.query_id, partition, b.batch_id)
            for b in self.stored_offsets(sink_id)
            for partition in sorted(b.partitions)
        )
        return Inspection(pending=tuple(pending), markers=markers)


class _Everything(dict[int, int]):
    """Every partition committed; the attempts are those it holds, -1 for the others."""

    def __contains__(self, key: object) -> bool:
        return True

    def get(self, key: int, default: Any = None) -> Any:
        return super().get(key, -1)


def _merged_schema(texts: Sequence[str]) -> DeltaSchema:
    """The union of the tasks' columns, in the order they first appear."""
    fields: dict[str, Field] = {}
    for text in texts:
        for column in DeltaSchema.from_json(text).fields:
            fields.setdefault(column.name, column)
    return DeltaSchema(list(fields.values()))
