"""Targets of a chaos run: a fresh namespace per run, and the checks, read from the system.

Each target creates the run's namespace (output directory, table or topic), reads back
what a reader sees (ids and how often), lists what a crash may have left (staged files,
prepared transactions, open Kafka transactions), says whether its service answers, and
drops the namespace. Nothing here looks at twopc's own bookkeeping.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from tests.harness.kafka_topics import TIMEOUT
from tests.harness.outputs import read_ids
from tests.harness.services import parse_mysql_dsn
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.sql_sink_cases import gtrid_prefix, staging_prefix
from twopc._coordination.liveness import HEARTBEAT_NAME

MARKER_TABLE = "twopc_markers"  # the SQL sinks' default marker table
T = TypeVar("T")


class Target(ABC):
    """One backend as the checks see it."""

    backend: str
    service: str | None = None

    @abstractmethod
    def prepare(self, run_id: str, mode: str, run_dir: Path, kafka_partitions: int) -> SinkRecipe:
        """Create the run's namespace; the sink spec that writes into it."""

    @abstractmethod
    def committed(self, spec: SinkRecipe) -> Counter[int]:
        """Every id a reader sees, with how often it sees it."""

    @abstractmethod
    def leftovers(self, spec: SinkRecipe) -> list[str]:
        """What a crash left behind (empty when clean)."""

    def alive(self) -> bool:
        """Whether the service answers a real request."""
        return True

    def endpoint(self) -> tuple[str, int] | None:
        """The service's ``(host, port)``; None without a service."""
        return None

    def accepts_connections(self) -> bool:
        """Whether anything listens on the service's port (a cheap "is it down?")."""
        where = self.endpoint()
        if where is None:
            return False
        try:
            socket.create_connection(where, timeout=2).close()
        except OSError:
            return False
        return True

    def forget_markers(self, spec: SinkRecipe) -> int:
        """Delete the run's commit markers from the target, as an expiry or an operator
        would; returns how many (0 where the sink keeps none)."""
        return 0

    @abstractmethod
    def cleanup(self, spec: SinkRecipe) -> None: ...


class FilesTarget(Target):
    """Parquet under the run directory, read with ``pyarrow.dataset`` (hidden files skipped)."""

    backend = "files"

    def prepare(self, run_id: str, mode: str, run_dir: Path, kafka_partitions: int) -> SinkRecipe:
        return SinkRecipe("files", mode, run_id, str(run_dir / "out"))

    def committed(self, spec: SinkRecipe) -> Counter[int]:
        return read_ids(spec.address)

    def leftovers(self, spec: SinkRecipe) -> list[str]:
        """Any file in the staging area; any temporary (dot) file anywhere in the output.

        The writer's liveness record (``.heartbeat.json`` next to the commit log) is not a
        leftover: a crashed driver leaves it on purpose (``twopc status`` reports it as
        stale), and a restart that finds every batch committed has no reason to touch it.
        """
        root = Path(spec.address)
        if not root.exists():
            return []
        staged = [p for p in (root / "_twopc_staging").rglob("*") if p.is_file()]
        temporary = [p for p in root.rglob(".*") if p.is_file() and p.name != HEARTBEAT_NAME]
        return [f"staged or temporary file {p.relative_to(root)}" for p in staged + temporary]

    def cleanup(self, spec: SinkRecipe) -> None:
        shutil.rmtree(spec.address, ignore_errors=True)


class SqlTarget(Target):
    """A table ``(id BIGINT, payload VARCHAR(40))`` on PostgreSQL or MariaDB."""

    def __init__(self, backend: str, dsn: str) -> None:
        self.backend, self.dsn = backend, dsn
        self.service = "postgres" if backend == "postgres" else "mariadb"

    # -- one statement on a fresh autocommit connection; identifiers quoted by `ident`

    def _query(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.backend == "postgres":
            import psycopg

            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                cursor = conn.execute(statement, params or None)
                return list(cursor.fetchall()) if cursor.description else []
        import pymysql

        conn = pymysql.connect(
            **parse_mysql_dsn(self.dsn).connect_kwargs(), autocommit=True, connect_timeout=5
        )
        try:
            with conn.cursor() as cursor:
                cursor.execute(statement, params or None)
                return list(cursor.fetchall()) if cursor.description else []
        finally:
            conn.close()

    def ident(self, name: str) -> str:
        """``name`` quoted as an identifier (psycopg's own quoting on PostgreSQL)."""
        if self.backend == "postgres":
            from psycopg import sql

            return sql.Identifier(name).as_string(None)
        return "`" + name.replace("`", "``") + "`"

    def prepare(self, run_id: str, mode: str, run_dir: Path, kafka_partitions: int) -> SinkRecipe:
        table = run_id.replace("-", "_")
        self._query(f"CREATE TABLE {self.ident(table)} (id BIGINT, payload VARCHAR(40))")
        return SinkRecipe(self.backend, mode, run_id, self.dsn, table)

    def committed(self, spec: SinkRecipe) -> Counter[int]:
        rows = self._query(f"SELECT id FROM {self.ident(spec.table)}")
        return Counter(int(r[0]) for r in rows)

    def prepared(self, sink_id: str) -> list[str]:
        """Prepared transactions of the sink id (pg_prepared_xacts / XA RECOVER)."""
        prefix = gtrid_prefix(sink_id)
        if self.backend == "postgres":
            rows = self._query(
                "SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, %s)", (prefix,)
            )
            return [str(r[0]) for r in rows]
        found = []
        for _fmt, gtrid_length, bqual_length, data in self._query("XA RECOVER"):
            raw = data.decode() if isinstance(data, bytes) else str(data)
            gtrid, rest = raw[: int(gtrid_length)], raw[int(gtrid_length) :]
            if gtrid.startswith(prefix):
                found.append(f"{gtrid}:{rest[: int(bqual_length)]}")
        return found

    def staging_tables(self, sink_id: str) -> list[str]:
        """Staging tables of the sink id that outlived their transaction."""
        schema = "current_schema()" if self.backend == "postgres" else "DATABASE()"
        rows = self._query(
            "SELECT table_name FROM information_schema.tables "
            f"WHERE table_schema = {schema} AND table_name LIKE %s",
            (staging_prefix(sink_id).replace("_", "\\_") + "%",),
        )
        return [str(r[0]) for r in rows]

    def leftovers(self, spec: SinkRecipe) -> list[str]:
        return [f"prepared transaction {g}" for g in self.prepared(spec.sink_id)] + [
            f"staging table {t}" for t in self.staging_tables(spec.sink_id)
        ]

    def alive(self) -> bool:
        return self._query("SELECT 1") == [(1,)]

    def endpoint(self) -> tuple[str, int] | None:
        parts = urlsplit(self.dsn)
        return parts.hostname or "127.0.0.1", parts.port or 0

    def forget_markers(self, spec: SinkRecipe) -> int:
        rows = self._query(
            f"SELECT count(*) FROM {self.ident(MARKER_TABLE)} WHERE sink_id = %s", (spec.sink_id,)
        )
        self._query(f"DELETE FROM {self.ident(MARKER_TABLE)} WHERE sink_id = %s", (spec.sink_id,))
        return int(rows[0][0])

    def cleanup(self, spec: SinkRecipe) -> None:
        if self.backend == "postgres":
            # a failed test may leave prepared transactions, whose locks would hold the DROP
            from psycopg import sql

            for gid in self.prepared(spec.sink_id):
                self._query(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)).as_string())
        self._query(f"DROP TABLE IF EXISTS {self.ident(spec.table)}")
        if self._query(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = %s",
            (MARKER_TABLE,),
        )[0][0]:
            self._query(
                f"DELETE FROM {self.ident(MARKER_TABLE)} WHERE sink_id = %s", (spec.sink_id,)
            )


class KafkaTarget(Target):
    """A topic per run, read with a ``read_committed`` consumer."""

    backend = "kafka"
    service = "kafka"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def prepare(self, run_id: str, mode: str, run_dir: Path, kafka_partitions: int) -> SinkRecipe:
        from tests.harness.kafka_topics import create_topic

        topic = create_topic(self.bootstrap, run_id, partitions=kafka_partitions)
        return SinkRecipe("kafka", mode, run_id, self.bootstrap, topic)

    def committed(self, spec: SinkRecipe) -> Counter[int]:
        from tests.harness.kafka_topics import committed_keys

        return Counter({int(k): n for k, n in committed_keys(self.bootstrap, spec.table).items()})

    def open_transactions(self, topic: str) -> list[str]:
        """Partitions whose last stable offset lags the high watermark: an open transaction
        stalls ``read_committed`` readers there."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        client = self._admin()
        partitions = sorted(client.list_topics(topic, timeout=TIMEOUT).topics[topic].partitions)
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        wanted = {TopicPartition(topic, p): latest for p in partitions}

        def ends(level: Any) -> dict[int, int]:
            futures = client.list_offsets(wanted, isolation_level=level, request_timeout=TIMEOUT)
            return {tp.partition: int(f.result(TIMEOUT).offset) for tp, f in futures.items()}

        stable, high = ends(IsolationLevel.READ_COMMITTED), ends(IsolationLevel.READ_UNCOMMITTED)
        return [
            f"open transaction on {topic}[{p}]: last stable offset {stable[p]} < {high[p]}"
            for p in partitions
            if stable[p] < high[p]
        ]

    def leftovers(self, spec: SinkRecipe) -> list[str]:
        # Commit markers are written just after commit_transaction returns: give them a
        # moment. A transaction left open stays open until transaction.timeout.ms (60 s).
        deadline = time.monotonic() + 10
        while True:
            found = self.open_transactions(spec.table)
            if not found or time.monotonic() > deadline:
                return found
            time.sleep(0.3)

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        # log_level 4: no info lines ("purging unserved events") in the campaign's output
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 4})

    def alive(self) -> bool:
        client = self._admin()
        return bool(client.list_topics(timeout=10).brokers)

    def endpoint(self) -> tuple[str, int] | None:
        host, _, port = self.bootstrap.split(",")[0].rpartition(":")
        return host, int(port)

    def forget_markers(self, spec: SinkRecipe) -> int:
        """Delete the run's marker groups (``<prefix>.<sink id>.<query id>.p<n>``), as the
        broker does ``offsets.retention.minutes`` after their last commit."""
        client = self._admin()
        listing = client.list_consumer_groups(request_timeout=TIMEOUT).result(TIMEOUT)
        names = [str(g.group_id) for g in listing.valid if f".{spec.sink_id}." in str(g.group_id)]
        if names:
            for future in client.delete_consumer_groups(names, request_timeout=TIMEOUT).values():
                future.result(TIMEOUT)
        return len(names)

    def cleanup(self, spec: SinkRecipe) -> None:
        client = self._admin()  # keep the handle alive until the futures resolve
        for future in client.delete_topics([spec.table]).values():
            future.result(TIMEOUT)


class S3FilesTarget(Target):
    """Parquet on the S3 API of ``scripts/services`` (S3Proxy), written by the files sink
    with multipart uploads the commit completes; read with pyarrow's own S3 filesystem."""

    backend = "files"
    service = "s3"

    def __init__(self, env: dict[str, str]) -> None:
        self.endpoint_url = env["S3_ENDPOINT_URL"]
        self.bucket = env["S3_BUCKET"]
        self.key = env["S3_ACCESS_KEY_ID"]
        self.secret = env["S3_SECRET_ACCESS_KEY"]

    def storage_options(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "secret": self.secret,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"},
        }

    def prepare(self, run_id: str, mode: str, run_dir: Path, kafka_partitions: int) -> SinkRecipe:
        options = {"storage_options": self.storage_options(), "commit_by": "complete_upload"}
        return SinkRecipe(
            "files", mode, run_id, f"s3://{self.bucket}/{run_id}", options=json.dumps(options)
        )

    def _arrow(self) -> Any:
        from pyarrow import fs as pafs

        return pafs.S3FileSystem(
            access_key=self.key,
            secret_key=self.secret,
            endpoint_override=self.endpoint_url.removeprefix("http://"),
            scheme="http",
            region="us-east-1",
        )

    def _objects(self, spec: SinkRecipe) -> list[str]:
        from pyarrow import fs as pafs

        prefix = spec.address.removeprefix("s3://")
        selector = pafs.FileSelector(prefix, recursive=True, allow_not_found=True)
        infos = self._arrow().get_file_info(selector)
        return sorted(i.path for i in infos if i.type == pafs.FileType.File)

    def visible_objects(self, spec: SinkRecipe) -> list[str]:
        """Objects a reader of the output picks up (none under a ``_`` or ``.`` name)."""
        prefix = spec.address.removeprefix("s3://")
        return [
            p
            for p in self._objects(spec)
            if not any(part.startswith(("_", ".")) for part in p[len(prefix) + 1 :].split("/"))
        ]

    def committed(self, spec: SinkRecipe) -> Counter[int]:
        import pyarrow.dataset as ds

        data = self.visible_objects(spec)
        if not data:
            return Counter()
        table = ds.dataset(data, filesystem=self._arrow(), format="parquet").to_table()
        return Counter(table.column("id").to_pylist())

    def leftovers(self, spec: SinkRecipe) -> list[str]:
        """Staged objects and multipart uploads still open under the output."""
        import s3fs

        prefix = spec.address.removeprefix("s3://")
        staged = [p for p in self._objects(spec) if "/_twopc_staging/" in p]
        s3 = s3fs.S3FileSystem(**self.storage_options())
        answer = s3.call_s3(
            "list_multipart_uploads", Bucket=self.bucket, Prefix=prefix.split("/", 1)[1] + "/"
        )
        uploads = [u["Key"] for u in answer.get("Uploads") or []]
        return [f"staged object {p}" for p in staged] + [f"open upload {k}" for k in uploads]

    def alive(self) -> bool:
        """The bucket answers a signed request (a new client: no pooled connection to a
        store that was killed)."""
        import s3fs

        s3 = s3fs.S3FileSystem(
            skip_instance_cache=True,
            config_kwargs={"connect_timeout": 2, "retries": {"max_attempts": 1}},
            **self.storage_options(),
        )
        s3.call_s3("head_bucket", Bucket=self.bucket)
        return True

    def endpoint(self) -> tuple[str, int] | None:
        where = urlsplit(self.endpoint_url)
        return (where.hostname or "127.0.0.1", where.port or 80)

    def cleanup(self, spec: SinkRecipe) -> None:
        import s3fs

        s3 = s3fs.S3FileSystem(**self.storage_options())
        prefix = spec.address.removeprefix("s3://")
        if s3.exists(prefix):
            s3.rm(prefix, recursive=True)


class IcebergTarget(Target):
    """An Iceberg table per run, in a warehouse under the run directory; its catalog is the
    embedded SQLite file (mode ``sqlite``), pyiceberg's SQL catalog on the PostgreSQL of
    ``scripts/services`` (mode ``postgres``) or the Iceberg REST catalog of
    ``scripts/services`` (mode ``rest``: the table's location is the server's warehouse).
    Read back with a pyiceberg scan; leftovers are files under the data path no snapshot
    references and the sink's attempt records."""

    backend = "iceberg"

    def __init__(self, env: dict[str, str], mode: str = "sqlite") -> None:
        self.mode = mode
        self.dsn = env.get("POSTGRES_DSN", "") if mode == "postgres" else ""
        self.rest_uri = env.get("ICEBERG_REST_URI", "") if mode == "rest" else ""
        self.service = {"postgres": "postgres", "rest": "iceberg-rest"}.get(mode)

    def catalog_properties(self, warehouse: Path) -> dict[str, str]:
        if self.rest_uri:
            return {"type": "rest", "uri": self.rest_uri}
        if self.mode != "postgres":
            return {}
        uri = self.dsn.replace("postgresql://", "postgresql+psycopg://", 1)
        return {"type": "sql", "uri": uri, "warehouse": f"file://{warehouse}"}

    def prepare(self, run_id: str, mode: str, run_dir: Path, kafka_partitions: int) -> SinkRecipe:
        warehouse = run_dir / "warehouse"
        warehouse.mkdir(parents=True, exist_ok=True)
        table = f"r_{run_id.replace('-', '_')}.events"
        properties = self.catalog_properties(warehouse)
        options = {"catalog_properties": properties} if properties else {}
        return SinkRecipe(
            "iceberg", mode, run_id, str(warehouse), table, options=json.dumps(options)
        )

    def _sink(self, spec: SinkRecipe) -> Any:
        from tests.harness.sink_recipe import build_sink

        return build_sink(spec)

    def for_spark_writer(self, spec: SinkRecipe) -> SinkRecipe:
        """The run's sink on Spark's own write path: its table created now with the test
        query's columns (that path writes tables that exist), ``write_path="spark"``."""
        import pyarrow as pa

        self._sink(spec).access.for_data(pa.schema([("id", pa.int64()), ("payload", pa.string())]))
        options = {**json.loads(spec.options or "{}"), "write_path": "spark"}
        return replace(spec, options=json.dumps(options))

    def committed(self, spec: SinkRecipe) -> Counter[int]:
        table = self._sink(spec).load_table()
        if table is None:
            return Counter()
        ids = table.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist()
        return Counter(int(i) for i in ids)

    def leftovers(self, spec: SinkRecipe) -> list[str]:
        table = self._sink(spec).load_table()
        if table is None:
            return []
        location = Path(table.location().removeprefix("file://"))
        referenced = {
            p.removeprefix("file://") for p in table.inspect.all_files()["file_path"].to_pylist()
        }
        data = location / "data"
        # every file: a Spark write job's leftovers (_SUCCESS, .crc checksums) count too
        unreferenced = [
            f"data file no snapshot references: {p.relative_to(location)}"
            for p in sorted(data.rglob("*"))
            if p.is_file() and str(p) not in referenced
        ]
        records = location / "twopc"
        left = [
            f"attempt record {p.relative_to(location)}"
            for p in sorted(records.rglob("*"))
            if p.is_file()
        ]
        return unreferenced + left

    def alive(self) -> bool:
        if self.rest_uri:
            import urllib.request

            with urllib.request.urlopen(f"{self.rest_uri}/v1/config", timeout=5) as response:
                return response.status == 200
        if not self.dsn:
            return True
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)

    def endpoint(self) -> tuple[str, int] | None:
        if not (self.dsn or self.rest_uri):
            return None
        parts = urlsplit(self.dsn or self.rest_uri)
        return parts.hostname or "127.0.0.1", parts.port or 0

    def cleanup(self, spec: SinkRecipe) -> None:
        sink = self._sink(spec)
        if self.dsn or self.rest_uri:
            catalog = sink.access.catalog_object()
            namespace = spec.table.rsplit(".", 1)[0]
            with contextlib.suppress(Exception):
                catalog.drop_table(spec.table)
            with contextlib.suppress(Exception):
                catalog.drop_namespace(namespace)
        shutil.rmtree(spec.address, ignore_errors=True)


class GroupTarget(Target):
    """A ``twopc.SinkGroup``'s targets, the mode naming the members' backends in order
    (``postgres+mysql``): the first member's service is the run's. A reader sees an id
    only where every member shows it (with its highest count), so a batch one member lacks
    counts as missing; leftovers are every member's."""

    backend = "group"

    def __init__(self, env: dict[str, str], mode: str, *, fork_safe: bool = False) -> None:
        self.targets = [
            (f"m{i}-{b}", make_target(b, env, fork_safe=fork_safe))
            for i, b in enumerate(mode.split("+"))
        ]
        self.service = self.targets[0][1].service

    def prepare(self, run_id: str, mode: str, run_dir: Path, kafka_partitions: int) -> Any:
        from tests.harness.group_recipe import GroupRecipe

        members = []
        for index, (name, target) in enumerate(self.targets):
            member_mode = {"files": "parquet", "kafka": "atomic", "delta": "append"}.get(
                target.backend, "two_phase"
            )
            where = run_dir / name
            spec = target.prepare(f"{run_id}-{index}", member_mode, where, kafka_partitions)
            # a SQL or Delta table holds the input's columns; a Kafka member's input also
            # has a key
            tables = ("postgres", "mysql", "delta")
            columns = ("id", "payload") if target.backend in tables else ()
            members.append((name, spec, columns))
        return GroupRecipe.of(run_id, *members)

    def _pairs(self, spec: Any) -> list[tuple[Target, SinkRecipe]]:
        return [(t, m.sink) for (_, t), m in zip(self.targets, spec.members, strict=True)]

    def committed(self, spec: Any) -> Counter[int]:
        seen = [target.committed(member) for target, member in self._pairs(spec)]
        common = set.intersection(*(set(s) for s in seen))
        return Counter({i: max(s[i] for s in seen) for i in common})

    def leftovers(self, spec: Any) -> list[str]:
        found = []
        for (name, _), (target, member) in zip(self.targets, self._pairs(spec), strict=True):
            found += [f"{name}: {left}" for left in target.leftovers(member)]
        every = [set(target.committed(member)) for target, member in self._pairs(spec)]
        if len({frozenset(s) for s in every}) > 1:
            found.append(f"the members show different ids: {[len(s) for s in every]}")
        return found

    def alive(self) -> bool:
        return self.targets[0][1].alive()

    def endpoint(self) -> tuple[str, int] | None:
        return self.targets[0][1].endpoint()

    def forget_markers(self, spec: Any) -> int:
        return sum(target.forget_markers(member) for target, member in self._pairs(spec))

    def cleanup(self, spec: Any) -> None:
        for target, member in self._pairs(spec):
            target.cleanup(member)


class DeltaTarget(Target):
    """A Delta table per run, under the run directory, written through deltalake. Read back
    with deltalake's reader; leftovers are data files no version of the log references,
    a file the current version references twice or two commits add, and the sink's
    attempt records.

    ``fork_safe``: read in a forked child (:func:`tests.harness.procs.call_in_fork`), so
    that deltalake's runtime never starts in this process; the chaos campaign forks its
    local drivers from its own process, and deltalake panics in a child forked from a
    process that used it."""

    backend = "delta"

    def __init__(self, *, fork_safe: bool = False) -> None:
        self.fork_safe = fork_safe

    def _read(self, function: Callable[[], T]) -> T:
        from tests.harness.procs import call_in_fork

        return call_in_fork(function) if self.fork_safe else function()

    def prepare(self, run_id: str, mode: str, run_dir: Path, kafka_partitions: int) -> SinkRecipe:
        return SinkRecipe("delta", mode or "append", run_id, str(run_dir / "delta-table"))

    def for_spark_writer(self, spec: SinkRecipe) -> SinkRecipe:
        """The run's sink on Spark's own write path: its table created now with the test
        query's columns (that path writes tables that exist), ``write_path="spark"``."""
        self._read(lambda: _create_delta_table(spec.address))
        options = {**json.loads(spec.options or "{}"), "write_path": "spark"}
        return replace(spec, options=json.dumps(options))

    def committed(self, spec: SinkRecipe) -> Counter[int]:
        from tests.harness.delta import ids

        return self._read(lambda: ids(spec.address))

    def leftovers(self, spec: SinkRecipe) -> list[str]:
        return self._read(lambda: _delta_leftovers(spec.address))

    def cleanup(self, spec: SinkRecipe) -> None:
        shutil.rmtree(spec.address, ignore_errors=True)


def _create_delta_table(uri: str) -> None:
    """An empty Delta table with the test query's columns."""
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(uri, pa.schema([("id", pa.int64()), ("payload", pa.string())]).empty_table())


def _delta_leftovers(uri: str) -> list[str]:
    from tests.harness.delta import (
        added_twice,
        records_left,
        referenced,
        unreferenced_data_files,
    )

    twice = sorted(p for p, n in Counter(referenced(uri)).items() if n > 1)
    return (
        [f"data file no version references: {p}" for p in unreferenced_data_files(uri)]
        + [f"data file referenced twice: {p}" for p in twice]
        + [f"data file added by two commits: {p}" for p in added_twice(uri)]
        + [f"attempt record {p}" for p in records_left(uri)]
    )


def make_target(
    backend: str, env: dict[str, str], mode: str = "", *, fork_safe: bool = False
) -> Target:
    """The target of a backend, addressed with ``scripts/services env`` settings (``s3``:
    the files backend on the S3 API; ``group``: the members ``mode`` names; ``iceberg``:
    the catalog ``mode`` names, ``sqlite`` or ``postgres``). ``fork_safe``: a Delta table
    (a group's too) is read in a forked child (:class:`DeltaTarget`)."""
    makers: dict[str, Callable[[], Target]] = {
        "group": lambda: GroupTarget(env, mode, fork_safe=fork_safe),
        "files": FilesTarget,
        "s3": lambda: S3FilesTarget(env),
        "postgres": lambda: SqlTarget("postgres", env["POSTGRES_DSN"]),
        "mysql": lambda: SqlTarget("mysql", env["MYSQL_DSN"]),
        "kafka": lambda: KafkaTarget(env["KAFKA_BOOTSTRAP_SERVERS"]),
        "iceberg": lambda: IcebergTarget(env, mode or "sqlite"),
        "delta": lambda: DeltaTarget(fork_safe=fork_safe),
    }
    if backend in makers:
        return makers[backend]()
    raise ValueError(f"unknown backend {backend!r}")
