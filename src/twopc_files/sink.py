"""The files sink: tasks write hidden staged files, the driver promotes them by rename.

Phase 1 (each task) writes its rows under its own hidden staging directory and, in
``pre_commit``, closes the files and writes ``_committable.json`` there: the list of staged
files and the final names they get. The coordinator's decision for the batch (the manifest,
``_twopc/<sink_id>/<query>/<batch>.decision.json``) lists every partition's files. Phase 2
renames staged files to their final, deterministic names; a file already at its final name
and gone from staging was promoted before, so commit is idempotent.

Where Spark's own writer can write the format and the filesystem (the JVM write path,
:class:`~twopc.WritesWithSpark`), phase 1 is one Spark write job into a hidden directory of
the batch's run instead; the driver then moves the files of each Spark partition into that
partition's staging directory, under the same names and with the same ``_committable.json``
as a task would have written, so that everything after phase 1 is the same on both paths.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import IO, Any, ClassVar, cast

import pyarrow as pa

from twopc import (
    CommitError,
    CommitOutcome,
    CommitsOnDriver,
    Committable,
    ConfigurationError,
    Inspection,
    Payload,
    PendingWork,
    PermanentSinkError,
    Sink,
    SinkError,
    SparkOutput,
    SparkWrite,
    TaskContext,
    TransientSinkError,
    UnsupportedFormatError,
    WorkKind,
    WritesWithSpark,
)
from twopc.storage import (
    atomic_write,
    create_exclusive,
    filesystem_for,
    fsync_files,
    is_local,
    join,
)
from twopc_files._batch_log import HADOOP_SCHEMES, LoggedFile, SparkBatchLog, file_uri
from twopc_files._formats import (
    FORMATS,
    JSON_NON_FINITE,
    FormatWriter,
    NonFiniteValueError,
    non_finite_message,
    open_format_writer,
    write_options_problem,
)
from twopc_files._layout import (
    COMMITTABLE_FILE,
    LOG_DIR,
    SPARK_JOB_PREFIX,
    STAGED_SUFFIX,
    STAGING_DIR,
    STARTED_FILE,
    attempt_dir,
    final_name,
    name_token,
    spark_job_dir,
    split_by_partition,
)
from twopc_files._multipart import MultipartFile, MultipartStore, Part, is_multipart_capable
from twopc_files._options import (
    check_filesystem,
    check_flag,
    check_mapping,
    check_partition_by,
    check_target_file_size,
)
from twopc_files._schemas import (
    RECORD_FILE,
    SCHEMA_PREFIX,
    conflict,
    data_schema,
    decode,
    encode,
    is_schema_file,
    schema_file,
)
from twopc_files._spark_write import (
    AUTO_PROTOCOLS,
    HADOOP_PROTOCOLS,
    SPARK_FORMATS,
    WRITE_PATHS,
    SparkFile,
    parse_spark_file,
    protocol_of,
    spark_option_values,
    translate_write_options,
)

__all__ = ["COMMIT_METHODS", "FORMATS", "WRITE_PATHS", "FilesPayload", "FilesSink", "StagedFile"]

COMMIT_METHODS = ("auto", "move", "complete_upload")
"""How the files sink's commit makes files visible (``FilesSink(commit_by=...)``)."""

_log = logging.getLogger("twopc.files")

_STAGING_THREADS = 8
"""Threads that stage a Spark write job's splits side by side on the driver."""
_RECORD_LOCK = threading.Lock()
"""Held while a commit merges a schema into the output's record: the driver commits a
batch's partitions in several threads (read, merge and write must not interleave)."""


@dataclass
class _CommitCall:
    """What one ``commit`` call's promotions leave to its end: the directories to sync
    (each once) and the staging areas to remove after that sync."""

    moved_into: set[str] = field(default_factory=set)
    stagings: list[str] = field(default_factory=list)


_COMMIT_CALLS = threading.local()
"""The ``_CommitCall`` of the commit running in this thread (the driver commits shares of
a batch in several threads at once), if any."""

_DEFAULT_FILE_SIZE = 128 * 1024 * 1024


@dataclass(frozen=True)
class StagedFile:
    """One file a task wrote: where it is staged and the final name commit gives it.

    A file written as a multipart upload (``commit_by="complete_upload"``) is not staged:
    ``upload_id`` and ``parts`` say which open upload, at the final name, the commit
    completes, and ``staged`` is empty."""

    staged: str
    final: str
    rows: int
    bytes: int
    upload_id: str | None = None
    parts: tuple[Part, ...] = ()


@dataclass(frozen=True)
class FilesPayload(Payload):
    """A task's committable: its staging directory and its files."""

    version: ClassVar[int] = 3
    reads: ClassVar[tuple[int, ...]] = (1, 2, 3)
    """Version 2 added the multipart upload of each file (``upload_id``, ``parts``),
    version 3 the fingerprint of the files' schema (``schema``)."""

    staging: str
    files: tuple[StagedFile, ...]
    schema: str = ""
    """The fingerprint of the files' schema, held in ``<staging>/_schema-<fingerprint>``;
    ``""`` when nothing was checked (no rows, ``check_schemas=False``, CSV or JSON from
    Spark's writer)."""

    @classmethod
    def from_json(cls, data: Any, version: int) -> FilesPayload:
        files = []
        for raw in data["files"]:
            fields = dict(raw)
            fields["parts"] = tuple(
                Part(int(p["number"]), str(p["etag"])) for p in fields.get("parts", ())
            )
            files.append(StagedFile(**fields))
        return cls(str(data["staging"]), tuple(files), str(data.get("schema", "")))


@dataclass
class _OpenFile:
    staged: str
    final: str
    handle: IO[bytes] | MultipartFile
    writer: FormatWriter
    rows: int = 0


@dataclass
class _Directory:
    """Rolling output for one Hive directory of one task."""

    seq: int = 0
    current: _OpenFile | None = None


@dataclass
class FilesTransaction:
    """One task's open files. Only the task that created it uses it."""

    ctx: TaskContext
    staging: str
    directories: dict[str, _Directory] = field(default_factory=dict)
    done: list[StagedFile] = field(default_factory=list)
    schema: pa.Schema | None = None
    """Schema of the first batch; every later batch of the task must match it."""
    gave_way: bool = False
    """Another process prepared this same attempt first: abort must leave its staging."""
    rows: int = 0
    """Rows invoked so far (to number a bad row in messages)."""
    schema_file: str = ""
    """The name of the attempt's schema file, once its schema is checked."""


class FilesSink(Sink[FilesTransaction], CommitsOnDriver, WritesWithSpark):
    """Exactly-once file output on any fsspec filesystem.

    Args:
        path: output directory, a local path or an fsspec URL (``s3://bucket/out``).
        format: ``parquet`` (default), ``csv``, ``json`` (JSON lines), ``orc`` or ``arrow``
            (IPC file).
        partition_by: columns for Hive-style directories (``col=value/``), removed from the
            files like Spark does.
        target_file_size: roll to a new file once a file reaches this many bytes.
        storage_options: fsspec options (credentials are never logged or shown in repr).
        write_options: passed to the format writer (e.g. ``{"compression": "zstd"}`` for
            Parquet, ``{"include_header": False}`` for CSV).
        commit_by: how the commit makes files visible. ``move``: tasks write hidden staged
            files, the commit moves them (a rename on local disks and HDFS, a copy and a
            delete on object stores). ``complete_upload``: tasks write each file as a
            multipart upload at its final name and leave it open, the commit completes it
            (S3 and S3-compatible stores through s3fs; no copy). ``auto`` (default):
            ``complete_upload`` where the filesystem is s3fs, else ``move``.
        batch_log: also keep Spark's file sink log (``_spark_metadata``) in the output,
            one log batch per committed batch, so Spark's readers see each batch whole or
            not at all. One writer per output path.
        batch_log_scheme: the URI scheme the batch log gives files on a remote store; Spark
            sees them only when it reads the output by the same scheme. Default: what
            open-source Spark reads (``s3a`` for ``s3://`` paths, the filesystem's protocol
            elsewhere); ``s3`` for readers whose ``s3://`` is a filesystem (EMR). Spark's
            writer writes to that scheme too, on the Spark write path.
        write_path: where phase 1 runs under ``twopc.foreach_batch`` and
            ``twopc.write_batch``. ``spark``: Spark's own writer writes the batch in one job,
            no Python worker touches the rows. ``python``: Python tasks write it with pyarrow
            (``mapInArrow``). ``auto`` (default): ``spark`` where Spark's writer serves the
            options (formats ``parquet``, ``orc``, ``csv``, ``json`` on local disks and HDFS,
            ``write_options`` it has a counterpart for, the default ``target_file_size``),
            else ``python``; the choice and its reason are logged once per writer.
            ``format("twopc")`` and ``twopc.local`` always run Python tasks.
        spark_options: options for Spark's writer on the Spark write path (e.g.
            ``{"maxRecordsPerFile": 1000000}``), after those derived from ``write_options``.
        json_non_finite: what ``format="json"`` does with NaN and infinities, which JSON
            cannot hold (Python's ``json`` writes ``NaN``, which strict readers refuse):
            ``"error"`` (default) fails the batch naming the row and column, ``"null"``
            writes ``null``. On the Spark path Spark's writer writes them as the strings
            ``"NaN"``, ``"Infinity"``; ``"null"`` therefore keeps ``auto`` on the Python path.
        check_schemas: refuse a batch whose columns readers could not merge with the other
            partitions of the batch or with what the output already holds (a column whose
            type changes); ``False`` writes it anyway.
    """

    backend_name = "files"

    def __init__(
        self,
        path: str,
        *,
        format: str = "parquet",
        partition_by: Sequence[str] = (),
        target_file_size: int = 128 * 1024 * 1024,
        storage_options: dict[str, Any] | None = None,
        write_options: dict[str, Any] | None = None,
        commit_by: str = "auto",
        batch_log: bool = False,
        batch_log_scheme: str = "",
        write_path: str = "auto",
        spark_options: dict[str, Any] | None = None,
        json_non_finite: str = "error",
        check_schemas: bool = True,
    ) -> None:
        _choice("write_path", write_path, WRITE_PATHS)
        _choice("commit_by", commit_by, COMMIT_METHODS)
        if not isinstance(path, str) or not path:
            raise ConfigurationError("files sink: path must be a non-empty string")
        check_filesystem(path)
        _choice("format", format, sorted({*FORMATS, *SPARK_FORMATS}))
        self.path = path
        self.format = format
        self.partition_by = check_partition_by(partition_by)
        if not isinstance(batch_log_scheme, str) or (
            batch_log_scheme and not re.fullmatch(r"[a-z][a-z0-9+.-]*", batch_log_scheme)
        ):
            raise ConfigurationError(
                f"files sink: batch_log_scheme {batch_log_scheme!r} is not a URI scheme "
                "(such as 's3a' or 's3')"
            )
        self.target_file_size = check_target_file_size(target_file_size)
        self.storage_options = check_mapping("storage_options", storage_options)
        self.write_options = check_mapping("write_options", write_options)
        self.commit_by = commit_by
        self.batch_log = check_flag("batch_log", batch_log)
        self.batch_log_scheme = batch_log_scheme
        self.write_path = write_path
        _choice("json_non_finite", json_non_finite, JSON_NON_FINITE)
        self.json_non_finite = json_non_finite
        self.check_schemas = check_flag("check_schemas", check_schemas)
        try:
            self.spark_options = spark_option_values(check_mapping("spark_options", spark_options))
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"files sink: spark_options: {exc}") from None
        self._check_combinations()
        self._fs: Any = None
        self._fs_pid = 0
        self._root = ""
        self._recorded: set[str] = set()
        """Schema fingerprints this process has merged into the output's schema record."""

    def _check_combinations(self) -> None:
        """Options that contradict each other, or that would do nothing."""
        if self.spark_options and self.write_path == "python":
            raise ConfigurationError(
                "files sink: spark_options are for Spark's writer, but write_path='python'"
            )
        if self.write_path == "python" and self.format not in FORMATS:
            raise ConfigurationError(
                f"files sink: format {self.format!r} is written by Spark's own writer only, "
                "but write_path='python'"
            )
        if self.write_options and self.format == "json":
            raise ConfigurationError(
                "files sink: write_options do nothing with format='json' (twopc's JSON lines "
                "writer and Spark's take none); remove them"
            )
        if self.json_non_finite != "error" and self.format != "json":
            raise ConfigurationError(
                f"files sink: json_non_finite={self.json_non_finite!r} applies to "
                f"format='json' only, not {self.format!r}"
            )
        if self.commit_by == "complete_upload" and protocol_of(self.path) not in ("s3", "s3a"):
            raise ConfigurationError(
                "files sink: commit_by='complete_upload' completes S3 multipart uploads: it "
                f"needs an s3:// path (s3fs), not {protocol_of(self.path)}://"
            )
        problem = write_options_problem(self.format, self.write_options)
        if problem is not None:
            raise ConfigurationError(
                f"files sink: write_options {sorted(self.write_options)}: the {self.format} "
                f"writer refuses them ({problem})"
            )
        if self.spark_write_required() and (refusals := self._spark_refusals(auto=False)):
            why = "write_path='spark'" if self.write_path == "spark" else f"format {self.format!r}"
            raise ConfigurationError(
                f"files sink: {why} needs Spark's own writer, which cannot write this "
                f"output: {'; '.join(refusals)}"
            )

    def __repr__(self) -> str:
        return (
            f"FilesSink(path={self.path!r}, format={self.format!r}, "
            f"partition_by={list(self.partition_by)!r})"
        )

    def describe(self) -> str:
        return f"files {self.format} at {self.path}"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fs"] = None  # filesystems are re-created in each process
        state["_recorded"] = set()
        return state

    @property
    def fs(self) -> Any:
        """The output's filesystem, made in this process: a forked task (the local
        engine's) makes its own, since an s3fs client refuses to run in a fork of the
        process that created it."""
        if self._fs is None or self._fs_pid != os.getpid():
            self._fs, self._root = filesystem_for(self.path, self.storage_options)
            self._fs_pid = os.getpid()
        return self._fs

    @property
    def root(self) -> str:
        _ = self.fs
        return self._root

    @property
    def uploads(self) -> MultipartStore | None:
        """The multipart client when files are committed by completing uploads."""
        capable = is_multipart_capable(self.fs)
        moved = not capable or self.write_path == "spark"  # Spark's files are staged files
        if self.commit_by == "move" or (self.commit_by == "auto" and moved):
            return None
        if not capable:
            raise ConfigurationError(
                f"files sink: commit_by='complete_upload' needs an S3 filesystem (s3fs); "
                f"{self.path} is on {type(self.fs).__name__}"
            )
        return MultipartStore(self.fs)

    def _abs(self, relative: str) -> str:
        return join(self.root, relative)

    def default_commit_log(self, sink_id: str) -> str:
        return join(self.path, LOG_DIR, sink_id)

    def default_commit_log_options(self) -> dict[str, Any]:
        return dict(self.storage_options)

    # -- phase 1 by Spark's own writer (WritesWithSpark) ----------------------------------

    def _spark_refusals(self, *, auto: bool) -> list[str]:
        """Why Spark's writer cannot serve this sink's options; with ``auto``, also where it
        could but the Python path is the better choice."""
        reasons = []
        if self.format not in SPARK_FORMATS:
            reasons.append(f"format {self.format!r} is not one Spark's writer writes")
        if self.commit_by == "complete_upload":
            reasons.append(
                "commit_by='complete_upload': Spark's writer cannot leave its files as open "
                "multipart uploads"
            )
        _, untranslated = translate_write_options(self.format, self.write_options)
        if untranslated:
            reasons.append(
                f"write_options {untranslated} have no counterpart in Spark's writer (give "
                "Spark's own options as spark_options)"
            )
        if self.json_non_finite == "null":
            reasons.append(
                "json_non_finite='null': Spark's writer writes NaN and infinities as the "
                'strings "NaN", "Infinity" and "-Infinity"'
            )
        if self.target_file_size != _DEFAULT_FILE_SIZE:
            reasons.append(
                "target_file_size: Spark's writer does not roll files by size "
                "(spark_options={'maxRecordsPerFile': N} rolls them by rows)"
            )
        protocol = protocol_of(self.path)
        if protocol not in HADOOP_PROTOCOLS:
            reasons.append(f"{protocol}:// is a filesystem Spark (Hadoop) does not reach")
        elif auto and protocol not in AUTO_PROTOCOLS:
            reasons.append(
                f"on {protocol}:// every rename is a copy, and Spark's committer and the "
                "staging would copy each file three times more (write_path='spark' to use "
                "it anyway)"
            )
        return reasons

    def spark_write_refusal(self) -> str | None:
        if self.write_path == "python":
            return "write_path='python'"
        # auto weighs the two paths; a format only Spark writes has one
        refusals = self._spark_refusals(auto=not self.spark_write_required())
        if not refusals:
            return None
        if self.spark_options or self.spark_write_required():
            needs = "spark_options are" if self.spark_options else "this sink is"
            raise ConfigurationError(
                f"files sink: {needs} for Spark's writer, which cannot write this output: "
                f"{'; '.join(refusals)}"
            )
        return "; ".join(refusals)

    def spark_write_required(self) -> bool:
        """``write_path="spark"``, or a format only Spark's writer writes (``orc``)."""
        return self.write_path == "spark" or self.format not in FORMATS

    def plan_spark_write(self, ctx: TaskContext, columns: Sequence[str]) -> SparkWrite:
        missing = [c for c in self.partition_by if c not in columns]
        if missing:
            raise PermanentSinkError(
                f"partition_by column(s) {missing} not in the data (columns: {list(columns)})"
            )
        job = spark_job_dir(ctx.sink_id, ctx.query_id, ctx.batch_id, ctx.attempt)
        self._remove(job)  # a run of this very name, from a process that died (possible)
        options, _ = translate_write_options(self.format, self.write_options)
        if self.format == "csv":
            options.setdefault("header", "true")  # as pyarrow writes it by default
        # a fresh directory of its own: no other overwrite semantics apply
        options["partitionOverwriteMode"] = "static"
        options.update(self.spark_options)
        return SparkWrite(self.format, self._hadoop_uri(job), options, self.partition_by)

    def _hadoop_uri(self, relative: str) -> str:
        """The URI Spark's (Hadoop's) filesystems give the object that fsspec sees at
        ``relative`` under the output."""
        if is_local(self.fs):
            return file_uri(self.fs, self._abs(relative))
        protocol, rest = fsspec_split(self.path)
        scheme = self.batch_log_scheme or HADOOP_SCHEMES.get(protocol, protocol)
        return f"{scheme}://{join(rest, relative)}"

    def spark_written(self, ctx: TaskContext, write: SparkWrite) -> list[SparkOutput]:
        """Stage the job's files per Spark partition, as that partition's task would have:
        under its attempt directory, with its final names and a ``_committable.json``;
        then remove the job's directory (Spark's ``_SUCCESS``, checksums)."""
        job = spark_job_dir(ctx.sink_id, ctx.query_id, ctx.batch_id, ctx.attempt)
        by_split: dict[int, list[SparkFile]] = {}
        files = self._spark_files(job)
        for entry in files:
            by_split.setdefault(entry.split, []).append(entry)
        schema = self._spark_schema(files)
        if schema is not None:
            self._check_held(schema)  # one job, one schema: its splits agree
        token = name_token(ctx.sink_id, ctx.query_id)
        splits = range(max(by_split, default=0) + 1)

        def stage(split: int) -> SparkOutput:
            return self._stage_split(
                replace(ctx, partition=split), by_split.get(split, []), token, schema
            )

        # each split's files, footers, syncs and record are its own: staged side by side
        # (one after another, 1,000 splits took 3.1 s of the driver's time; see
        # docs/backends/files.md, "Wide batches")
        with ThreadPoolExecutor(min(_STAGING_THREADS, max(1, len(splits)))) as pool:
            outputs = list(pool.map(stage, splits))
        self._remove(job)
        return outputs

    def _spark_files(self, job: str) -> list[SparkFile]:
        """The data files of a Spark write job's output; its hidden files (``_SUCCESS``,
        ``_temporary/``, ``.crc`` checksums) are not data."""
        self._fresh_listings()
        base = self._abs(job).rstrip("/")
        found = []
        for path, info in sorted(self.fs.find(base, detail=True).items()):
            relative = str(path)[len(base) + 1 :]
            if info.get("type") == "directory" or any(
                part.startswith(("_", ".")) for part in relative.split("/")
            ):
                continue
            entry = parse_spark_file(str(path), relative, int(info.get("size") or 0))
            if entry is None:
                raise SinkError(
                    f"Spark's write job left {relative} in {job}, which is not one of its "
                    "part files: twopc names only files of Spark's file writers"
                )
            found.append(entry)
        return found

    def _spark_schema(self, files: list[SparkFile]) -> pa.Schema | None:
        """The columns of a Spark job's files, from a footer (Parquet, ORC); ``None`` when
        not checked (``check_schemas=False``, CSV and JSON, no file)."""
        written = [f for f in files if f.size]
        if not self.check_schemas or self.format not in ("parquet", "orc") or not written:
            return None
        with self.fs.open(written[0].path, "rb") as handle:
            if self.format == "parquet":
                import pyarrow.parquet as pq

                return data_schema(pq.read_schema(handle), ())
            import pyarrow.orc as paorc

            return data_schema(paorc.ORCFile(handle).schema, ())

    def _stage_split(
        self, ctx: TaskContext, files: list[SparkFile], token: str, schema: pa.Schema | None
    ) -> SparkOutput:
        staging = attempt_dir(ctx.sink_id, ctx.query_id, ctx.batch_id, ctx.partition, ctx.attempt)
        staged: list[StagedFile] = []
        seq: dict[str, int] = {}
        for entry in sorted(files, key=lambda f: (f.directory, f.counter, f.path)):
            number = seq[entry.directory] = seq.get(entry.directory, -1) + 1
            extension = entry.extension or FORMATS[self.format]
            name = final_name(token, ctx.batch_id, ctx.partition, number, extension)
            final = f"{entry.directory}/{name}" if entry.directory else name
            target = f"{staging}/{final}{STAGED_SUFFIX}"
            path = self._abs(target)
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            self.fs.mv(entry.path, path)
            staged.append(StagedFile(target, final, self._rows_in(path), entry.size))
        if staged and is_local(self.fs):
            # pre_commit's promise: what the committable names survives a crash
            paths = [self._abs(done.staged) for done in staged]
            fsync_files(paths, (path.rsplit("/", 1)[0] for path in paths))
        files_ = tuple(sorted(staged, key=lambda f: f.final))
        fingerprint = ""
        if staged and schema is not None:
            self._write_schema(staging, schema)
            fingerprint = schema_file(schema).removeprefix(SCHEMA_PREFIX)
        committable = Committable.for_task(ctx, FilesPayload(staging, files_, fingerprint))
        if staged:
            self._record_prepared(staging, committable.dumps().encode())
        return SparkOutput(
            committable, rows=sum(f.rows for f in files_), bytes=sum(f.bytes for f in files_)
        )

    def _rows_in(self, path: str) -> int:
        """Rows of a file Spark wrote, from its footer (Parquet, ORC); 0 for CSV and JSON,
        which would have to be read whole."""
        if self.format not in ("parquet", "orc") or not self.fs.size(path):
            return 0
        with self.fs.open(path, "rb") as handle:
            if self.format == "parquet":
                import pyarrow.parquet as pq

                return int(pq.read_metadata(handle).num_rows)
            import pyarrow.orc as paorc

            return int(paorc.ORCFile(handle).nrows)

    # -- phase 1 ------------------------------------------------------------------------

    def begin_transaction(self, ctx: TaskContext) -> FilesTransaction:
        if self.format not in FORMATS:
            raise PermanentSinkError(
                f"format {self.format!r} is written by Spark's own writer only "
                "(twopc.foreach_batch or twopc.write_batch), not by Python tasks"
            )
        staging = attempt_dir(ctx.sink_id, ctx.query_id, ctx.batch_id, ctx.partition, ctx.attempt)
        if self.fs.exists(self._abs(staging)):
            # A previous process ran this very attempt (possible outside Spark); start clean.
            self.fs.rm(self._abs(staging), recursive=True)
        if self.uploads is not None:
            # The uploads are open at their final names; this marks the attempt, so that a
            # sweep can tell this query's uploads from other writers' if it never prepares.
            atomic_write(self.fs, self._abs(f"{staging}/{STARTED_FILE}"), b"")
        return FilesTransaction(ctx, staging)

    def invoke(self, txn: FilesTransaction, batch: pa.RecordBatch) -> None:
        missing = [c for c in self.partition_by if c not in batch.schema.names]
        if missing:
            raise PermanentSinkError(
                f"partition_by column(s) {missing} not in the data (columns: {batch.schema.names})"
            )
        # Checked per task, not per open file: a change after a file rolled, in another
        # Hive directory or in a partition column would otherwise go unnoticed.
        if txn.schema is None:
            txn.schema = batch.schema
            if self.check_schemas:
                self._check_schema(txn, batch.schema)
        elif not txn.schema.equals(batch.schema):
            raise PermanentSinkError(
                f"schema changed inside one task: {txn.schema} then {batch.schema}"
            )
        try:
            for directory, piece in split_by_partition(batch, self.partition_by):
                self._write_piece(txn, directory, piece)
        except NonFiniteValueError:
            data = batch.select([n for n in batch.schema.names if n not in self.partition_by])
            raise PermanentSinkError(non_finite_message(data, txn.rows)) from None
        txn.rows += batch.num_rows

    # -- schemas readers can merge (see _schemas) ---------------------------------------

    def _check_schema(self, txn: FilesTransaction, schema: pa.Schema) -> None:
        """The task's columns merge with what the output holds, then (after recording its
        own) with those of the batch's other attempts."""
        ours = data_schema(schema, self.partition_by)
        self._check_held(ours)
        txn.schema_file = schema_file(ours)
        self._write_schema(txn.staging, ours)
        for attempt, other in self._batch_schemas(txn):
            found = conflict(ours, [other])
            if found is not None:
                partition = attempt.split("-", 1)[0].lstrip("0") or "0"
                column, mine, theirs = found
                raise PermanentSinkError(
                    f"{column} is {mine} in this partition but {theirs} in "
                    f"partition {partition} of the same batch; readers cannot merge the two "
                    "types: give every partition the same column types (cast in the query)"
                )

    def _check_held(self, ours: pa.Schema) -> None:
        """``ours`` merges with the schema of everything the output holds."""
        held = self._held_schema()
        found = None if held is None else conflict(ours, [held])
        if found is not None:
            column, mine, theirs = found
            raise PermanentSinkError(
                f"{column} is {mine} in this batch but {theirs} in what the output "
                f"already holds ({RECORD_FILE}); readers (pyarrow.dataset, Spark's "
                f"mergeSchema) cannot merge the two types: cast the column to {theirs} in "
                "the query, write to a new path, or pass check_schemas=False if every "
                "reader converts it"
            )

    def _held_schema(self) -> pa.Schema | None:
        """The unified schema of every batch committed to the output, if recorded."""
        try:
            data = self.fs.cat_file(self._abs(RECORD_FILE))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise TransientSinkError(f"cannot read {RECORD_FILE}: {exc}") from exc
        try:
            return decode(data)
        except (pa.ArrowInvalid, OSError) as exc:
            raise PermanentSinkError(
                f"the output's schema record {RECORD_FILE} cannot be read ({exc}): delete it "
                "(the next commit writes it again, from its batch) or pass "
                "check_schemas=False"
            ) from exc

    def _write_schema(self, staging: str, schema: pa.Schema) -> None:
        """Record an attempt's schema in its staging directory (a hint: not fsynced)."""
        path = self._abs(f"{staging}/{schema_file(schema)}")
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        atomic_write(self.fs, path, encode(schema), durable=False)

    def _batch_schemas(self, txn: FilesTransaction) -> list[tuple[str, pa.Schema]]:
        """The schemas the batch's other attempts recorded, one per distinct schema:
        ``(attempt directory name, schema)``."""
        base = self._abs(txn.staging.rsplit("/", 1)[0])
        found: dict[str, str] = {}
        for path in self._schema_files(base):
            parent, _, name = path.rpartition("/")
            if name != txn.schema_file:
                found.setdefault(name, parent)
        schemas = []
        for name, parent in found.items():
            try:
                data = self.fs.cat_file(f"{parent}/{name}")
            except FileNotFoundError:
                continue  # that attempt was cleaned up since the listing
            schemas.append((parent.rsplit("/", 1)[-1], decode(data)))
        return schemas

    def _schema_files(self, batch: str) -> list[str]:
        """The schema files of every attempt under the batch directory ``batch``. On a
        local disk, two levels of ``os.scandir`` (every task does this: fsspec's ``find``
        costs a ``stat`` per staged file); elsewhere one listing of the batch's prefix.
        Only names that are schema files count: S3Proxy's filesystem store, for one, lists
        an object's temporary file (``<name>-<uuid>``) while another task writes it."""
        if not is_local(self.fs):
            with contextlib.suppress(Exception):
                self.fs.invalidate_cache(batch)
            return [
                str(p) for p in self.fs.find(batch) if is_schema_file(str(p).rsplit("/", 1)[-1])
            ]
        found = []
        with contextlib.suppress(FileNotFoundError), os.scandir(batch) as attempts:
            for attempt in attempts:
                if not attempt.is_dir():
                    continue
                with contextlib.suppress(FileNotFoundError), os.scandir(attempt.path) as entries:
                    found += [
                        f"{batch}/{attempt.name}/{e.name}"
                        for e in entries
                        if is_schema_file(e.name)
                    ]
        return found

    def _widen_record(self, payload: FilesPayload) -> None:
        """Merge a prepared attempt's schema into the output's record before its files
        become visible (idempotent: a repeated commit merges the same schema again)."""
        if not payload.schema or payload.schema in self._recorded:
            return
        with _RECORD_LOCK:
            self._merge_into_record(payload)

    def _merge_into_record(self, payload: FilesPayload) -> None:
        if payload.schema in self._recorded:
            return  # another thread merged it meanwhile
        try:
            ours = decode(
                self.fs.cat_file(self._abs(f"{payload.staging}/{SCHEMA_PREFIX}{payload.schema}"))
            )
        except FileNotFoundError:
            return  # promoted before: the record was widened then
        try:
            held = self._held_schema()
            merged = ours if held is None else pa.unify_schemas([held, ours])
        except (pa.ArrowTypeError, pa.ArrowInvalid, PermanentSinkError) as exc:
            # another writer of the path committed a conflicting schema since the check,
            # or the record is damaged: it is an aid to the check, never a reason to fail
            # a decided commit
            _log.warning("the output's schema record %s is left as it is: %s", RECORD_FILE, exc)
            return
        if held is None or not merged.equals(held):
            atomic_write(self.fs, self._abs(RECORD_FILE), encode(merged))
        self._recorded.add(payload.schema)

    def _write_piece(self, txn: FilesTransaction, directory: str, piece: pa.RecordBatch) -> None:
        state = txn.directories.setdefault(directory, _Directory())
        current = state.current
        if current is not None and not current.writer.schema.equals(piece.schema):
            raise PermanentSinkError(
                f"schema changed inside one task: {current.writer.schema} then {piece.schema}"
            )
        try:
            if current is None:
                current = state.current = self._open(txn, directory, state.seq, piece.schema)
                state.seq += 1
            current.writer.write(piece)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as exc:
            raise PermanentSinkError(f"cannot write {self.format}: {exc}") from exc
        except OSError as exc:
            raise TransientSinkError(
                f"I/O error writing to {txn.staging}/{directory}: {exc}"
            ) from exc
        current.rows += piece.num_rows
        if current.writer.bytes_written() >= self.target_file_size:
            txn.done.append(self._close(current))
            state.current = None

    def _open(
        self, txn: FilesTransaction, directory: str, seq: int, schema: pa.Schema
    ) -> _OpenFile:
        ctx = txn.ctx
        name = final_name(
            name_token(ctx.sink_id, ctx.query_id),
            ctx.batch_id,
            ctx.partition,
            seq,
            FORMATS[self.format],
        )
        final = f"{directory}/{name}" if directory else name
        uploads = self.uploads
        handle: IO[bytes] | MultipartFile
        if uploads is not None:
            # at its final name, but invisible until the commit completes the upload
            staged = ""
            handle = MultipartFile(uploads, self._abs(final))
        else:
            staged = f"{txn.staging}/{final}{STAGED_SUFFIX}"
            path = self._abs(staged)
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            handle = open(path, "wb") if is_local(self.fs) else self.fs.open(path, "wb")  # noqa: SIM115
        try:
            writer = open_format_writer(
                self.format,
                cast(IO[bytes], handle),
                schema,
                dict(self.write_options),
                json_non_finite=self.json_non_finite,
            )
        except BaseException:
            _discard(handle)
            raise
        return _OpenFile(staged, final, handle, writer)

    def _close(self, current: _OpenFile) -> StagedFile:
        current.writer.close()
        size = current.writer.bytes_written()
        handle = current.handle
        if isinstance(handle, MultipartFile):
            handle.close()  # the last part is uploaded; the upload stays open
            return StagedFile(
                "", current.final, current.rows, size, handle.upload_id, tuple(handle.parts)
            )
        if hasattr(handle, "fileno") and is_local(self.fs):
            handle.flush()
            os.fsync(handle.fileno())
        handle.close()
        return StagedFile(current.staged, current.final, current.rows, size)

    def pre_commit(self, txn: FilesTransaction) -> Committable:
        for state in txn.directories.values():
            if state.current is not None:
                txn.done.append(self._close(state.current))
                state.current = None
        files = tuple(sorted(txn.done, key=lambda f: f.final))
        fingerprint = txn.schema_file.removeprefix(SCHEMA_PREFIX)
        payload = FilesPayload(txn.staging, files, fingerprint)
        committable = Committable.for_task(txn.ctx, payload)
        try:
            self._record_prepared(txn.staging, committable.dumps().encode())
        except TransientSinkError:
            txn.gave_way = True
            raise
        return committable

    def _record_prepared(self, staging: str, data: bytes) -> None:
        """Record the prepared attempt, never over another writer's record (a conditional
        PUT on S3): the staging directory is the attempt's own, so something there is this
        write landing twice (a retried request), or a second process running the same
        attempt, whose committable must survive for recovery."""
        self.fs.makedirs(self._abs(staging), exist_ok=True)
        marker = self._abs(f"{staging}/{COMMITTABLE_FILE}")
        if create_exclusive(self.fs, marker, data) or self.fs.cat_file(marker) == data:
            return
        raise TransientSinkError(
            f"another process prepared the same task attempt ({staging}) with other "
            "files; this one gives way (a retry runs as a new attempt)"
        )

    def abort(self, txn: FilesTransaction) -> None:
        for state in txn.directories.values():
            if state.current is not None:
                # Close the format writer before its file: an unclosed pyarrow ParquetWriter
                # otherwise writes its footer to the closed file when garbage-collected and
                # raises from __del__.
                with contextlib.suppress(Exception):
                    state.current.writer.close()
                with contextlib.suppress(Exception):
                    _discard(state.current.handle)
                state.current = None
        self._abort_uploads(txn.done)
        if not txn.gave_way:
            self._remove(txn.staging)

    def _abort_uploads(self, files: Sequence[StagedFile]) -> None:
        uploads = [f for f in files if f.upload_id]
        if not uploads:
            return
        store = MultipartStore(self.fs)
        for entry in uploads:
            assert entry.upload_id is not None
            store.abort(self._abs(entry.final), entry.upload_id)

    # -- phase 2 ------------------------------------------------------------------------

    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        """Promote each committable's files, then sync the directories they moved into,
        each once (the driver hands a call a share of a batch's committables, often into
        the same directory), and only then remove their staging areas."""
        call = _CommitCall()
        _COMMIT_CALLS.current = call
        try:
            outcomes = [self._commit_one(c) for c in committables]
        finally:
            _COMMIT_CALLS.current = None
        try:
            fsync_files((), sorted(call.moved_into))
        except OSError as exc:
            raise TransientSinkError(f"syncing promoted files failed: {exc}") from exc
        for staging in call.stagings:
            self._remove(staging)
        return outcomes

    def commits_concurrently(self) -> bool:
        """Promotions of different committables touch different files; the schema record
        they share is merged under a lock."""
        return True

    def _commit_one(self, committable: Committable) -> CommitOutcome:
        try:
            return self._promote(committable)
        except OSError as exc:
            # Object stores and network filesystems fail transiently; promotion is
            # idempotent, so the coordinator may simply retry it.
            raise TransientSinkError(f"promoting staged files failed: {exc}") from exc

    def _promote(self, committable: Committable) -> CommitOutcome:
        """Move the committable's staged files to their final names, sync the local
        directories they moved into and remove the staging area; inside ``commit`` the
        syncs and removals wait for the end of the call, to sync each directory once."""
        payload = FilesPayload.of(committable)
        self._widen_record(payload)
        moved = 0
        for entry in payload.files:
            if entry.upload_id is not None:
                moved += self._complete(entry)
                continue
            staged, final = self._abs(entry.staged), self._abs(entry.final)
            if self.fs.exists(staged):
                self.fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
                self.fs.mv(staged, final)
                moved += 1
            elif not self.fs.exists(final):
                raise CommitError(
                    f"neither the staged file {entry.staged} nor its final file "
                    f"{entry.final} exists; the staging area was modified outside twopc"
                )
        moved_into = (
            {self._abs(e.final).rsplit("/", 1)[0] for e in payload.files}
            if moved and is_local(self.fs)
            else set()
        )
        had_staging = self.fs.exists(self._abs(payload.staging))
        call: _CommitCall | None = getattr(_COMMIT_CALLS, "current", None)
        if call is None:
            fsync_files((), sorted(moved_into))
            self._remove(payload.staging)
        else:
            call.moved_into.update(moved_into)
            call.stagings.append(payload.staging)
        if moved or had_staging:
            return CommitOutcome.COMMITTED
        return CommitOutcome.ALREADY_COMMITTED

    def batch_committed(self, committables: Sequence[Committable]) -> None:
        """With ``batch_log``: every file of the batch is visible now; list them in one
        log batch of ``_spark_metadata`` (nothing if the batch wrote no file)."""
        if not self.batch_log:
            return
        files = sorted(
            (
                LoggedFile(
                    file_uri(self.fs, self._abs(entry.final), self.batch_log_scheme), entry.bytes
                )
                for committable in committables
                for entry in FilesPayload.of(committable).files
            ),
            key=lambda f: f.uri,
        )
        SparkBatchLog(self.fs, self.root).append(files)

    def _complete(self, entry: StagedFile) -> int:
        """Complete a file's upload: 1 if this made it visible, 0 if it already was."""
        assert entry.upload_id is not None
        try:
            completed = MultipartStore(self.fs).complete(
                self._abs(entry.final), entry.upload_id, entry.parts
            )
        except FileNotFoundError:
            raise CommitError(
                f"the multipart upload {entry.upload_id} of {entry.final} is gone and the "
                "object there is not the one it would have made: the upload was aborted or "
                "expired (a bucket lifecycle rule for incomplete uploads shorter than the "
                "time between phase 1 and the commit?)"
            ) from None
        return int(completed)

    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        for committable in committables:
            try:
                self._abort_uploads(FilesPayload.of(committable).files)
            except UnsupportedFormatError:
                _log.warning(
                    "cannot read the files of batch %d partition %d; its open uploads, if "
                    "any, are left to the sweep",
                    committable.batch_id,
                    committable.partition,
                )
            # derived from the committable's identity: also for a payload this version
            # cannot read, since abort must always succeed
            staging = attempt_dir(
                committable.sink_id,
                committable.query_id,
                committable.batch_id,
                committable.partition,
                committable.attempt,
            )
            self._remove(staging)

    # -- recovery -----------------------------------------------------------------------

    def recover(self, sink_id: str) -> list[Committable]:
        self._fresh_listings()
        pattern = self._abs(f"{STAGING_DIR}/{sink_id}/*/*/*/{COMMITTABLE_FILE}")
        found = (self._read_committable(path) for path in sorted(self.fs.glob(pattern)))
        return [c for c in found if c is not None]

    def _read_committable(self, path: str) -> Committable | None:
        """A prepared attempt's committable; ``None`` (logged) when it cannot be read."""
        try:
            return Committable.loads(self.fs.cat_file(path).decode())
        except (UnsupportedFormatError, UnicodeDecodeError) as exc:
            _log.warning("ignoring unreadable committable %s: %s", path, exc)
            return None

    def _attempt_dirs(self, sink_id: str) -> list[tuple[str, str]]:
        """Every staged attempt directory of ``sink_id``: (full path, path under the root)."""
        base = self._abs(f"{STAGING_DIR}/{sink_id}")
        if not self.fs.exists(base):
            return []
        # _abs() joins with exactly one "/", also when the root is "/" itself.
        prefix = len(self.root.rstrip("/")) + 1
        return [(path, path[prefix:]) for path in sorted(self.fs.glob(f"{base}/*/*/*"))]

    def inspect(self, sink_id: str) -> Inspection:
        """Prepared attempts (a ``_committable.json`` in their staging directory) and
        attempts that never prepared, read without touching them."""
        pending: list[PendingWork] = []
        for attempt, relative in self._attempt_dirs(sink_id):
            marker = f"{attempt}/{COMMITTABLE_FILE}"
            if not self.fs.exists(marker):
                pending.append(self._unprepared(relative, attempt))
            elif (committable := self._read_committable(marker)) is not None:
                pending.append(PendingWork.prepared(committable, relative, self._age(marker)))
        return Inspection(
            pending=tuple(pending),
            markers=None,
            notes=(
                "files: the commit log next to the data (the manifests) is the only record "
                "of committed batches",
            ),
        )

    def _unprepared(self, relative: str, attempt: str) -> PendingWork:
        query_id, batch, task = relative.split("/")[-3:]
        partition, _, attempt_no = task.partition("-")
        spark_job = task.startswith(SPARK_JOB_PREFIX)
        return PendingWork(
            kind=WorkKind.UNPREPARED,
            ident=relative,
            query_id=query_id,
            batch_id=int(batch) if batch.isdigit() else None,
            partition=int(partition) if partition.isdigit() else None,
            attempt=int(attempt_no) if attempt_no.isdigit() else None,
            age_seconds=self._age(attempt),
            detail=(
                "written by a Spark write job that never prepared"
                if spark_job
                else "staged by an attempt that never prepared"
            ),
        )

    def _age(self, path: str) -> float | None:
        try:
            modified = self.fs.modified(path)
        except (NotImplementedError, OSError, ValueError):
            return None
        return max(0.0, time.time() - float(modified.timestamp()))

    def sweep(self, sink_id: str, keep: Sequence[Committable] = ()) -> int:
        """Delete attempt directories that never prepared, then empty parents; abort the
        open uploads of this sink that no prepared attempt owns."""
        kept = {
            attempt_dir(c.sink_id, c.query_id, c.batch_id, c.partition, c.attempt) for c in keep
        }
        self._fresh_listings()
        base = self._abs(f"{STAGING_DIR}/{sink_id}")
        if not self.fs.exists(base):
            return 0
        removed = self._sweep_uploads(sink_id, keep) if self.uploads is not None else 0
        for attempt, relative in self._attempt_dirs(sink_id):
            if relative in kept or self.fs.exists(f"{attempt}/{COMMITTABLE_FILE}"):
                continue
            self._remove(relative)
            removed += 1
        self._remove_empty_dirs(base)
        return removed

    def _sweep_uploads(self, sink_id: str, keep: Sequence[Committable]) -> int:
        """Abort the open uploads under the output whose names carry a token of one of
        this sink's queries (the staging area lists them) and that no prepared attempt
        (a committable in staging, or ``keep``) names."""
        tokens = {
            name_token(sink_id, path.rstrip("/").rsplit("/", 1)[-1])
            for path in self.fs.ls(self._abs(f"{STAGING_DIR}/{sink_id}"), detail=False)
        }
        owned = {f.upload_id for c in [*keep, *self.recover(sink_id)] for f in _files_of(c)}
        aborted = 0
        store = MultipartStore(self.fs)
        for upload in store.open_uploads(self.root.rstrip("/") + "/"):
            name = upload.path.rsplit("/", 1)[-1]
            ours = any(name.startswith(f"part-{token}-") for token in tokens)
            if ours and upload.upload_id not in owned:
                store.abort(upload.path, upload.upload_id)
                aborted += 1
        return aborted

    # -- helpers ------------------------------------------------------------------------

    def _fresh_listings(self) -> None:
        """Forget cached directory listings: tasks in other processes wrote since (s3fs
        and other remote filesystems cache what they listed)."""
        if not is_local(self.fs):
            with contextlib.suppress(Exception):
                self.fs.invalidate_cache()

    def _remove(self, relative: str) -> None:
        path = self._abs(relative)
        if self.fs.exists(path):
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(path, recursive=True)

    def _remove_empty_dirs(self, base: str) -> None:
        for depth in ("*/*", "*"):
            for directory in sorted(self.fs.glob(f"{base}/{depth}"), reverse=True):
                if self._is_empty_dir(directory):
                    with contextlib.suppress(OSError):
                        self.fs.rmdir(directory)

    def _is_empty_dir(self, directory: str) -> bool:
        """Whether ``directory`` is an empty directory to remove. One that was listed but
        cannot be listed itself has nothing to remove: it went meanwhile, or it is one of
        SeaweedFS's emptied directories, which its S3 listings keep showing as a prefix
        (measured) while listing under it answers nothing, so s3fs raises
        ``FileNotFoundError``."""
        try:
            return bool(self.fs.isdir(directory)) and not self.fs.ls(directory, detail=False)
        except FileNotFoundError:
            return False


def fsspec_split(url: str) -> tuple[str, str]:
    """(protocol, the rest) of an fsspec URL; ``file`` for a plain path."""
    protocol, rest = url.split("://", 1) if "://" in url else ("file", url)
    return protocol, rest


def _discard(handle: IO[bytes] | MultipartFile) -> None:
    """Close a file of a failed attempt; an upload is aborted."""
    if isinstance(handle, MultipartFile):
        handle.discard()
    else:
        handle.close()


def _files_of(committable: Committable) -> tuple[StagedFile, ...]:
    try:
        return FilesPayload.of(committable).files
    except UnsupportedFormatError:
        return ()


def _choice(name: str, value: object, choices: Sequence[str]) -> None:
    """``value`` is one of the option's choices."""
    if not isinstance(value, str) or value not in choices:
        raise ConfigurationError(
            f"files sink: unknown {name} {value!r}; use one of {', '.join(choices)}"
        )
