"""The Iceberg sink: tasks write Parquet data files, the driver appends a batch's files in
one snapshot whose summary names the batch.

Phase 1 (each task) writes the batch's rows as the table's columns, split by its partition
spec and rolled at a target size, into a directory of the attempt's own under the table's
data path (:mod:`twopc_iceberg._layout`); ``pre_commit`` closes and syncs the files and
records the attempt's committable next to the table. The driver commits a whole batch in
one call (:meth:`IcebergSink.commit_units`): every file of the batch in **one snapshot**
and, in the same catalog commit, the sink's marker (:mod:`twopc_iceberg._markers`); a
commit that finds its batch in the marker writes nothing. A lost compare-and-swap (another
writer committed first) is retried on the new head after reading the marker again, never
re-applied blindly. ``mode="upsert"``: :mod:`twopc_iceberg._upsert`.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.partitioning import PartitionKey
from pyiceberg.table import Table, TableProperties

from twopc import (
    CommitError,
    CommitOutcome,
    CommitsOnDriver,
    CommitStateUnknownError,
    Committable,
    ConfigurationError,
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
from twopc_iceberg._catalogs import catalog_properties, public_properties
from twopc_iceberg._datafiles import (
    FileRoller,
    WrittenFile,
    conform,
    file_schema,
    split_by_partition,
)
from twopc_iceberg._layout import attempt_data_dir, rewrite_data_dir
from twopc_iceberg._markers import (
    NO_MARKER,
    Marker,
    added_files,
    marker_property,
    markers_of,
    read_marker,
)
from twopc_iceberg._options import (
    MODES,
    SCHEMA_EVOLUTION,
    check_choice,
    parse_partition_by,
    s3_storage_options,
)
from twopc_iceberg._payload import IcebergPayload
from twopc_iceberg._records import records_of
from twopc_iceberg._spark_phase1 import SparkPhase1
from twopc_iceberg._spark_write import WRITE_PATHS
from twopc_iceberg._tables import TableAccess
from twopc_iceberg._transaction import batch_transaction
from twopc_iceberg._upsert import (
    Rewrite,
    key_columns_of,
    keys_written,
    last_rows_win,
    plan_rewrite,
)

__all__ = ["MODES", "SCHEMA_EVOLUTION", "WRITE_PATHS", "IcebergPayload", "IcebergSink"]

_log = logging.getLogger("twopc.iceberg")

NAME_MAPPING = TableProperties.DEFAULT_NAME_MAPPING


@dataclass
class IcebergTransaction:
    """One task's open data files. Only the task that created it uses it."""

    ctx: TaskContext
    attempt: AttemptId
    roller: FileRoller | None = None
    table: Table | None = None
    records: AttemptRecords | None = None
    schema: pa.Schema | None = None
    """The data's schema (first batch); every later batch of the task must match it."""
    key_columns: tuple[str, ...] = ()
    keys: list[pa.Table] = field(default_factory=list)
    """Upsert: the key columns of every row written, with its file and running number."""
    partitions: dict[str, PartitionKey | None] = field(default_factory=dict)
    rows: int = 0
    gave_way: bool = False


class _LostRace(Exception):
    """Another writer committed first; nothing of this commit landed."""


class IcebergSink(
    Sink[IcebergTransaction], CommitsOnDriver, KeepsMarkers, KeepsSourceOffsets, WritesWithSpark
):
    """Exactly-once writes into an Apache Iceberg table, one snapshot per batch.

    Args:
        table: The table's identifier, ``"namespace.table"``.
        warehouse: A local directory for the embedded catalog (pyiceberg's SQL catalog on
            ``<warehouse>/twopc-catalog.db``), or the ``warehouse`` property of the catalog
            that ``catalog_properties`` describe.
        catalog: The catalog's name (pyiceberg's configuration may define it).
        catalog_properties: What ``pyiceberg.catalog.load_catalog`` gets (``type``,
            ``uri``, ``s3.endpoint`` ...); credentials in them are never logged.
        mode: ``"append"`` or ``"upsert"`` (one row per key, the batch's last row wins).
        key_columns: Upsert keys; default the table's identifier fields.
        create_table: Create a missing table from the first batch's columns.
        partition_by: The partition spec of a table the sink creates (``"region"``,
            ``"day(ts)"``, ``"bucket(16, id)"``, ``"truncate(4, name)"``).
        table_properties: Properties of a table the sink creates.
        schema_evolution: ``"add_columns"`` adds the data's new columns (nullable).
        target_file_size: Bytes after which a data file is rolled; default the table's
            ``write.target-file-size-bytes`` (512 MiB).
        commit_retries: How often a commit that lost the catalog's compare-and-swap to
            another writer is tried again on the new head.
        storage_options: fsspec options for the data files; default from the catalog's
            ``s3.*`` properties.
        write_path: Where phase 1 runs under ``twopc.foreach_batch`` and
            ``twopc.write_batch``: ``"auto"`` (Spark's own Parquet writer where it can
            write the table, else Python tasks), ``"spark"`` (Spark's writer, or a
            :class:`~twopc.ConfigurationError` saying why it cannot) or ``"python"``.
    """

    backend_name: ClassVar[str] = "iceberg"

    def __init__(
        self,
        table: str,
        *,
        warehouse: str | None = None,
        catalog: str = "default",
        catalog_properties: Mapping[str, str] | None = None,
        mode: str = "append",
        key_columns: Sequence[str] = (),
        create_table: bool = False,
        partition_by: Sequence[str] = (),
        table_properties: Mapping[str, str] | None = None,
        schema_evolution: str = "none",
        target_file_size: int | None = None,
        commit_retries: int = 10,
        storage_options: Mapping[str, Any] | None = None,
        write_path: str = "auto",
    ) -> None:
        _check_options(table, mode, schema_evolution, key_columns, target_file_size)
        check_choice("write_path", write_path, WRITE_PATHS)
        if not isinstance(commit_retries, int) or commit_retries < 0:
            raise ConfigurationError(
                f"iceberg sink: commit_retries must be 0 or more, not {commit_retries!r}"
            )
        if partition_by and not create_table:
            raise ConfigurationError(
                "iceberg sink: partition_by is the spec of a table the sink creates; it "
                "needs create_table=True (an existing table keeps its own spec)"
            )
        properties = _catalog_properties(warehouse, catalog_properties or {})
        self.table = table
        self.mode = mode
        self.key_columns = tuple(key_columns)
        self.target_file_size = target_file_size
        self.commit_retries = commit_retries
        self.write_path = write_path
        self._loaded: tuple[AttemptId | None, Table] | None = None
        """The table as the Spark path last loaded it: for that run's staging (with its
        attempt), then as its commit's first base (attempt ``None``); never pickled."""
        self.access = TableAccess(
            table=table,
            catalog=catalog,
            properties=properties,
            storage_options=dict(
                storage_options if storage_options is not None else s3_storage_options(properties)
            ),
            create_table=create_table,
            partition_by=parse_partition_by(partition_by),
            table_properties={str(k): str(v) for k, v in (table_properties or {}).items()},
            add_columns=schema_evolution == "add_columns",
            retries=commit_retries,
        )

    # -- identity --------------------------------------------------------------------------

    def describe(self) -> str:
        return f"iceberg table {self.table} (catalog {self.access.catalog!r})"

    def __repr__(self) -> str:
        return (
            f"IcebergSink(table={self.table!r}, catalog={self.access.catalog!r}, "
            f"mode={self.mode!r}, "
            f"catalog_properties={public_properties(self.access.properties)!r})"
        )

    def partition_columns(self) -> tuple[str, ...]:
        return self.key_columns if self.mode == "upsert" else ()

    def load_table(self) -> Table | None:
        """The table as its catalog holds it now (pyiceberg's ``Table``), or ``None`` when
        it does not exist: for reading it back (``load_table().scan().to_arrow()``)."""
        return self.access.load()

    def _records(self, table: Table, sink_id: str) -> AttemptRecords:
        return records_of(self.access.home(table), sink_id)

    # -- phase 1 ---------------------------------------------------------------------------

    def begin_transaction(self, ctx: TaskContext) -> IcebergTransaction:
        return IcebergTransaction(ctx, AttemptId.of(ctx))

    def invoke(self, txn: IcebergTransaction, batch: pa.RecordBatch) -> None:
        if txn.roller is None:
            self._start(txn, batch.schema)
        elif txn.schema is not None and not txn.schema.equals(batch.schema):
            raise PermanentSinkError(
                f"schema changed inside one task: {txn.schema} then {batch.schema}"
            )
        assert txn.roller is not None
        assert txn.table is not None
        if batch.num_rows == 0:
            return
        table = txn.table
        rows = conform(batch, table.schema(), txn.roller.arrow_schema)
        if self.mode == "upsert":
            check_keys(txn.key_columns, rows, txn.rows, f"table {self.table}")
        for key, piece in split_by_partition(rows, table.spec(), table.schema()):
            path = txn.roller.write(key, piece)
            txn.partitions.setdefault(path, key)
            if self.mode == "upsert":
                txn.keys.append(keys_written(txn.key_columns, piece, path, txn.rows))
            txn.rows += piece.num_rows

    def _start(self, txn: IcebergTransaction, schema: pa.Schema) -> None:
        """The task's first batch: find (or create) the table, follow new columns, mark
        the attempt as started, open the file roller."""
        table = self.access.for_data(schema)
        txn.schema, txn.table = schema, table
        if self.mode == "upsert":
            txn.key_columns = key_columns_of(table, self.key_columns, self.table)
        txn.records = self._records(table, txn.ctx.sink_id)
        try:
            txn.records.mark_started(txn.attempt)
        except PermissionError as exc:
            raise PermanentSinkError(
                f"cannot write to the location of table {self.table}: permission denied ({exc})"
            ) from None
        except OSError as exc:
            raise TransientSinkError(
                f"cannot write to the location of table {self.table}: {exc}"
            ) from None
        data = self.access.data(table)
        txn.roller = FileRoller(
            fs=data.fs,
            directory=attempt_data_dir(data.path, txn.ctx.sink_id, txn.attempt),
            url_prefix=data.prefix,
            schema=table.schema(),
            arrow_schema=file_schema(table.schema()),
            properties=dict(table.properties),
            spec_id=table.spec().spec_id,
            target_size=self.access.target_size(table, self.target_file_size),
        )

    def pre_commit(self, txn: IcebergTransaction) -> Committable:
        if txn.roller is None or txn.records is None:
            # no rows: nothing was written, nothing to find again
            return Committable.for_task(txn.ctx, IcebergPayload(self.table, ()))
        files = txn.roller.close_all()
        if txn.keys:
            files = last_rows_win(txn.roller, txn.keys, files, txn.partitions)
        payload = IcebergPayload(self.table, tuple(files), txn.key_columns)
        committable = Committable.for_task(txn.ctx, payload)
        try:
            txn.records.mark_prepared(txn.attempt, committable)
        except GaveWay:
            txn.gave_way = True
            raise
        except OSError as exc:
            raise TransientSinkError(f"cannot record the prepared attempt: {exc}") from None
        return committable

    def abort(self, txn: IcebergTransaction) -> None:
        if txn.roller is not None:
            txn.roller.discard()
        if txn.table is None or txn.gave_way:
            return
        try:
            self._remove_attempt(txn.table, txn.ctx.sink_id, txn.attempt)
        except OSError as exc:
            _log.warning("twopc iceberg: %s left for the sweep: %s", txn.attempt, exc)

    def _remove_attempt(self, table: Table, sink_id: str, attempt: AttemptId) -> None:
        """Delete an attempt's data files, then its records."""
        data = self.access.data(table)
        directory = attempt_data_dir(data.path, sink_id, attempt)
        if data.fs.exists(directory):
            data.fs.rm(directory, recursive=True)
        self._records(table, sink_id).forget(attempt)

    # -- phase 1 by Spark's own writer (WritesWithSpark) ----------------------------------

    def _spark(self) -> SparkPhase1:
        return SparkPhase1(self.access, self.table, self.mode, self.target_file_size)

    def spark_write_refusal(self) -> str | None:
        return write_path_refusal(
            self.write_path, lambda: self._spark().refusals(), "iceberg", self.table
        )

    def spark_write_required(self) -> bool:
        return self.write_path == "spark"

    def plan_spark_write(self, ctx: TaskContext, columns: Sequence[str]) -> SparkWrite:
        table = self.access.require()
        self._loaded = (AttemptId.of(ctx), table)
        return self._spark().plan(ctx, columns, table)

    def spark_written(self, ctx: TaskContext, write: SparkWrite) -> list[SparkOutput]:
        """The job's output described against the table its plan saw (the job wrote that
        table's columns and spec), which is also the first commit attempt's base."""
        loaded = getattr(self, "_loaded", None)  # absent in a copy unpickled in a task
        same_run = loaded is not None and loaded[0] == AttemptId.of(ctx)
        table = loaded[1] if loaded is not None and same_run else self.access.require()
        outputs = self._spark().written(ctx, write, table)
        self._loaded = (None, table)
        return outputs

    def _base(self) -> Table:
        """The table to commit on: the one this process loaded last for the batch, once
        (a commit on a stale base loses the compare-and-swap and loads it again), else
        loaded now."""
        loaded = getattr(self, "_loaded", None)
        self._loaded = None
        return loaded[1] if loaded is not None and loaded[0] is None else self.access.require()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for the tasks without the driver's loaded table (it holds the catalog's
        connections)."""
        state = dict(self.__dict__)
        state.pop("_loaded", None)
        return state

    # -- phase 2 ---------------------------------------------------------------------------

    def commit_units(self, committables: Sequence[Committable]) -> list[list[Committable]]:
        """The whole batch in one call: one snapshot per batch."""
        return [list(committables)] if committables else []

    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        return commit_by_batch(committables, self._commit_batch)

    def _commit_batch(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        """Commit committables of one batch in one snapshot; a lost compare-and-swap is
        tried again after reading the marker again."""
        first = committables[0]
        payloads = [IcebergPayload.of(c) for c in committables]
        for payload in payloads:
            if payload.table != self.table:
                raise ConfigurationError(
                    f"batch {first.batch_id} was prepared for table {payload.table}, not "
                    f"{self.table}: restart with the table it was prepared for"
                )
        if not any(p.files for p in payloads) and self.access.load() is None:
            # an empty batch before any row created the table: nothing to commit
            return [CommitOutcome.COMMITTED] * len(committables)
        for attempt in range(self.commit_retries + 1):
            table = self._base() if attempt == 0 else self.access.require()
            marker = read_marker(table, first.sink_id, first.query_id) or NO_MARKER
            todo = [
                i for i, c in enumerate(committables) if not marker.holds(c.batch_id, c.partition)
            ]
            if todo:
                try:
                    self._commit_once(
                        table,
                        marker.after(
                            first.batch_id,
                            {committables[i].partition: committables[i].attempt for i in todo},
                            count=len(committables),
                            offsets=first.source_offsets,
                        ),
                        [committables[i] for i in todo],
                        [payloads[i] for i in todo],
                    )
                except _LostRace as lost:
                    self._wait_after_lost_race(first, attempt, lost)
                    continue
            already = [i for i in range(len(committables)) if i not in todo]
            self._drop_duplicates(
                table, marker, [committables[i] for i in already], [payloads[i] for i in already]
            )
            self._forget(table, committables)
            outcomes = [CommitOutcome.ALREADY_COMMITTED] * len(committables)
            for i in todo:
                outcomes[i] = CommitOutcome.COMMITTED
            return outcomes
        raise TransientSinkError(
            f"the commit of batch {first.batch_id} to table {self.table} lost the catalog's "
            f"compare-and-swap {self.commit_retries + 1} times to other writers; nothing of "
            "it is visible, and the commit is tried again (raise commit_retries for a table "
            "with many concurrent writers)"
        )

    def _drop_duplicates(
        self,
        table: Table,
        marker: Marker,
        committables: Sequence[Committable],
        payloads: Sequence[IcebergPayload],
    ) -> None:
        """Committables of partitions the table already holds: when another attempt's files
        are the ones committed (a batch run again from a checkpoint put back from a copy),
        these files are nobody's, and go. Kept when the table cannot tell."""
        for committable, payload in zip(committables, payloads, strict=True):
            if not payload.files or self._committed(table, marker, committable, payload):
                continue
            attempt = AttemptId.of(committable)
            _log.info(
                "twopc iceberg: batch %d partition %d is in the table already, from another "
                "attempt: removing the files of attempt %d",
                committable.batch_id,
                committable.partition,
                committable.attempt,
            )
            self._remove_attempt(table, committable.sink_id, attempt)

    @staticmethod
    def _committed(
        table: Table, marker: Marker, committable: Committable, payload: IcebergPayload
    ) -> bool:
        """Whether this committable's files are the ones the table holds (``True`` when it
        cannot tell: nothing is deleted on a guess)."""
        attempt = marker.committed_attempt(committable.batch_id, committable.partition)
        if attempt is not None:
            return attempt == committable.attempt
        added = added_files(table, committable.sink_id, committable.query_id, committable.batch_id)
        return added is None or payload.files[0].path in added

    def _wait_after_lost_race(self, first: Committable, attempt: int, lost: _LostRace) -> None:
        wait = min(0.05 * (2**attempt), 2.0) * random.uniform(0.75, 1.25)
        _log.info(
            "twopc iceberg: batch %d of %s lost the commit race to another writer (%s); "
            "trying again on the new head in %.2f s (%d/%d)",
            first.batch_id,
            self.table,
            lost,
            wait,
            attempt + 1,
            self.commit_retries,
        )
        time.sleep(wait)

    def _commit_once(
        self,
        table: Table,
        after: Marker,
        committables: Sequence[Committable],
        payloads: Sequence[IcebergPayload],
    ) -> None:
        """One catalog commit of the data files and the marker as it is ``after`` the
        commit. Raises :class:`_LostRace` when another writer committed first (nothing
        landed)."""
        first = committables[0]
        files = [f for p in payloads for f in p.files]
        self._check_files_exist(first, files)
        summary = after.summary(first.sink_id, first.query_id, (c.partition for c in committables))
        rewrite = self._plan_rewrite(table, first, files) if self.mode == "upsert" else Rewrite()
        txn = batch_transaction(table)
        # the snapshot first: it is planned on the table's metadata as loaded (a staged
        # property would make the transaction copy the whole metadata to plan it)
        if rewrite.deleted:
            with txn.update_snapshot(snapshot_properties=summary).overwrite() as overwrite:
                for old in rewrite.deleted:
                    overwrite.delete_data_file(old)
                for written in [*files, *rewrite.added]:
                    overwrite.append_data_file(written.data_file())
        elif files:
            with txn.update_snapshot(snapshot_properties=summary).fast_append() as append:
                for written in files:
                    append.append_data_file(written.data_file())
        properties = {marker_property(first.sink_id, first.query_id): after.to_property()}
        if table.metadata.name_mapping() is None and not all(f.field_ids for f in files):
            # files without field ids (Spark's writer): readers match their columns by name
            properties[NAME_MAPPING] = table.schema().name_mapping.model_dump_json()
        txn.set_properties(properties)
        records = self._records(table, first.sink_id)
        try:
            txn.commit_transaction()
        except CommitFailedException as exc:
            self._drop_rewrite(table, records, first, rewrite)
            raise _LostRace(str(exc)) from None
        except Exception as exc:
            self._after_unknown(first, exc)  # landed, or raises
        if rewrite.directory:
            records.forget_rewrite(first.query_id, first.batch_id, rewrite.rewrite_id)
        _log.info(
            "twopc iceberg: batch %d committed to %s: %d file(s), %d row(s)%s",
            first.batch_id,
            self.table,
            len(files),
            sum(f.rows for f in files),
            f", {len(rewrite.deleted)} file(s) rewritten" if rewrite.deleted else "",
        )

    def _after_unknown(self, first: Committable, exc: Exception) -> None:
        """The catalog commit failed without saying whether it landed: ask the marker.
        Returns when it landed; raises otherwise (the rewrite's files stay for the sweep,
        which tells by the marker whether the table holds them)."""
        cause = self.access.clean(exc)
        try:
            table = self.access.require()
        except TransientSinkError:
            raise CommitStateUnknownError(
                f"the commit of batch {first.batch_id} to table {self.table} failed ({cause}) "
                "and the catalog cannot be asked whether it landed; the commit is tried "
                "again, which writes nothing if it did"
            ) from None
        marker = read_marker(table, first.sink_id, first.query_id)
        if marker is not None and marker.holds(first.batch_id, first.partition):
            _log.info(
                "twopc iceberg: batch %d's commit reported %s, but the table shows it committed",
                first.batch_id,
                cause,
            )
            return
        raise TransientSinkError(
            f"the commit of batch {first.batch_id} to table {self.table} failed: {cause}"
        ) from None

    def _check_files_exist(self, first: Committable, files: Sequence[WrittenFile]) -> None:
        for written in files:
            place = self.access.place(written.path)
            if not place.fs.exists(place.path):
                raise CommitError(
                    f"the data file {written.path} of batch {first.batch_id} is gone: the "
                    "table's data path was changed outside twopc (an orphan-file clean-up "
                    "with too short a retention?)"
                )

    def _plan_rewrite(
        self, table: Table, first: Committable, files: Sequence[WrittenFile]
    ) -> Rewrite:
        records = self._records(table, first.sink_id)
        return plan_rewrite(
            table,
            place_of=self.access.place,
            data=self.access.data(table),
            batch=(first.sink_id, first.query_id, first.batch_id),
            files=files,
            names=key_columns_of(table, self.key_columns, self.table),
            target_size=self.access.target_size(table, self.target_file_size),
            on_first_write=lambda rewrite: records.mark_rewrite(
                first.query_id, first.batch_id, rewrite.rewrite_id, first.partition
            ),
        )

    def _drop_rewrite(
        self, table: Table, records: AttemptRecords, first: Committable, rewrite: Rewrite
    ) -> None:
        """A commit that did not land: its rewritten files are nobody's."""
        if not rewrite.directory:
            return
        data = self.access.data(table)
        if data.fs.exists(rewrite.directory):
            data.fs.rm(rewrite.directory, recursive=True)
        records.forget_rewrite(first.query_id, first.batch_id, rewrite.rewrite_id)

    def _forget(self, table: Table, committables: Sequence[Committable]) -> None:
        """Remove the records of committed attempts (their data files stay: the table
        references them)."""
        if committables:  # one batch: one sink id
            self._records(table, committables[0].sink_id).forget_committed(committables)

    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        if not committables:
            return
        table = self.access.load()
        if table is None:
            return
        markers = markers_of(table, committables[0].sink_id)
        for c in committables:
            attempt = AttemptId.of(c)
            marker = markers.get(c.query_id, NO_MARKER)
            if marker.committed_attempt(c.batch_id, c.partition) == c.attempt:
                _log.warning(
                    "twopc iceberg: not deleting the files of %s: the table shows that "
                    "attempt committed",
                    attempt,
                )
                self._records(table, c.sink_id).forget(attempt)
                continue
            self._remove_attempt(table, c.sink_id, attempt)

    # -- recovery --------------------------------------------------------------------------

    def recover(self, sink_id: str) -> list[Committable]:
        table = self.access.load()
        if table is None:
            return []
        return self._records(table, sink_id).prepared()

    def sweep(self, sink_id: str, keep: Sequence[Committable] = ()) -> int:
        """Delete the files of attempts that started but never prepared, and of upsert
        rewrites whose commit never landed."""
        table = self.access.load()
        if table is None:
            return 0
        records = self._records(table, sink_id)
        markers: dict[str, Marker] | None = None

        def sweep_rewrite(entry: RecordEntry) -> None:
            nonlocal markers
            if markers is None:
                markers = markers_of(table, sink_id)  # read at the first rewrite record
            self._sweep_rewrite(table, records, entry, markers.get(entry.query_id, NO_MARKER))

        return records.sweep(
            keep, lambda attempt: self._remove_attempt(table, sink_id, attempt), sweep_rewrite
        )

    def _sweep_rewrite(
        self, table: Table, records: AttemptRecords, entry: RecordEntry, marker: Marker
    ) -> None:
        """A rewrite record a crash left: its files are the table's if its batch
        committed, else nobody's."""
        assert entry.rewrite_id is not None
        if not marker.holds(entry.batch_id, records.rewrite_partition(entry)):
            data = self.access.data(table)
            directory = rewrite_data_dir(
                data.path, records.sink_id, entry.query_id, entry.batch_id, entry.rewrite_id
            )
            if data.fs.exists(directory):
                data.fs.rm(directory, recursive=True)
        records.forget_path(entry.path)

    def committed_partitions(
        self, scope: RecoveryScope, batch_id: int, footprint: Footprint
    ) -> set[int] | None:
        table = self.access.load()
        if table is None:
            return set()
        marker = read_marker(table, scope.sink_id, scope.query_id)
        if marker is None or marker.batch_id < batch_id:
            return set()
        if marker.batch_id > batch_id:
            return set(range(footprint.partitions))
        return set(marker.partitions)

    def stored_offsets(self, sink_id: str) -> list[StoredBatch]:
        """The newest batch of every query, as the table's markers keep it (the property,
        completed from the snapshot summaries)."""
        table = self.access.load()
        if table is None:
            return []
        return [
            StoredBatch(query_id, m.batch_id, m.partitions, m.count, m.offsets, m.committed_at)
            for query_id, m in sorted(markers_of(table, sink_id).items())
        ]

    def inspect(self, sink_id: str) -> Inspection:
        """Prepared attempts, attempts that never prepared, and the table's markers."""
        table = self.access.load()
        if table is None:
            return Inspection(
                notes=(f"table {self.table} does not exist (yet): nothing to recover",),
                markers=(),
            )
        pending = self._records(table, sink_id).pending()
        markers = tuple(
            TargetMarker(query_id, partition, marker.batch_id)
            for query_id, marker in sorted(markers_of(table, sink_id).items())
            for partition in sorted(marker.partitions)
        )
        return Inspection(pending=tuple(pending), markers=markers)


def _check_options(
    table: object,
    mode: object,
    schema_evolution: object,
    key_columns: object,
    target_file_size: object,
) -> None:
    if not isinstance(table, str) or "." not in table.strip("."):
        raise ConfigurationError(f"iceberg sink: table must be 'namespace.table', not {table!r}")
    check_choice("mode", mode, MODES)
    check_choice("schema_evolution", schema_evolution, SCHEMA_EVOLUTION)
    if isinstance(key_columns, str):
        raise ConfigurationError(
            f"iceberg sink: key_columns must be a list of columns, not {key_columns!r}"
        )
    if key_columns and mode != "upsert":
        raise ConfigurationError("iceberg sink: key_columns only apply to mode='upsert'")
    if target_file_size is not None and (
        not isinstance(target_file_size, int) or target_file_size < 1024
    ):
        raise ConfigurationError(
            f"iceberg sink: target_file_size must be at least 1024 bytes, not {target_file_size!r}"
        )


def _catalog_properties(warehouse: object, given: object) -> dict[str, str]:
    if not isinstance(given, Mapping):
        raise ConfigurationError(
            f"iceberg sink: catalog_properties must be a mapping, not {type(given).__name__}"
        )
    if warehouse is not None and not isinstance(warehouse, str):
        raise ConfigurationError(f"iceberg sink: warehouse must be a path, not {warehouse!r}")
    return catalog_properties(warehouse, given)
