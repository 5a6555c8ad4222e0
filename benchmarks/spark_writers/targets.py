"""The targets: for each system, the twopc writer, the writers it is compared with, reset and
read-back.

Every writer is a ``foreachBatch`` function ``fn(df, batch_id)``. The writers of a target
write into the same table (files: sibling directories, Kafka: a fresh topic per run), which
is reset before every run; after every run the rows are counted *on the target* (a
``SELECT``, a ``read_committed`` consumer, ``pyarrow.dataset``) and a wrong count fails the
benchmark. A writer whose time cannot be taken from outside (a streaming query, which also
starts and stops around the batch) returns the seconds of its batch itself.
"""

from __future__ import annotations

import functools
import os
import shutil
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.spark_writers import alternatives
from benchmarks.spark_writers.config import BenchConfig, Database, Endpoints
from benchmarks.spark_writers.data import kafka_shape

import twopc

SINK_ID_PREFIX_VARIABLE = "TWOPC_BENCH_SINK_ID_PREFIX"
"""Set by the standalone run, a child process of the main run: the sink ids of both must
differ, or twopc refuses the child as a second writer of a sink id whose query (the
parent, alive) is recorded in the target."""


def sink_id(target: str) -> str:
    """The sink id of ``target``'s twopc writer in this process."""
    return f"{os.environ.get(SINK_ID_PREFIX_VARIABLE, 'bench')}-{target}"


Writer = Callable[[Any, int], float | None]
"""``fn(df, batch_id)``; returns ``None`` (timed by the caller) or the batch's own seconds."""

PREFIX = "bench_sw"
MARKERS = f"{PREFIX}_markers"


@dataclass(frozen=True)
class ReadBack:
    """What the target shows after a run: the row count and the sum of ``id``."""

    rows: int
    id_sum: int | None


class TargetsDisagreeError(RuntimeError):
    """The targets of one group run hold different rows."""


class StaleRowsError(RuntimeError):
    """An upsert into a pre-filled table left rows with their old values."""


class Target(ABC):
    """One system and mode: twopc's writer (side ``twopc``) against the writers of
    :meth:`alternatives` (by default Spark's own, side ``spark``)."""

    name: str
    spark_label: str
    twopc_label: str

    def alternatives(self) -> dict[str, str]:
        """The sides twopc is compared with, and their labels."""
        return {"spark": self.spark_label}

    def writer(self, side: str, work: Path) -> Writer:
        """The writer of ``side``; ``work`` holds twopc's commit log."""
        if side == "twopc":
            return self.twopc_writer(work)
        if side == "spark":
            return self.spark_writer()
        raise ValueError(f"{self.name} has no side {side!r}")

    def prepare(self) -> None:
        """Create what every run needs (tables); called once per benchmark."""
        return None

    def begin_workload(self, ids: range) -> None:
        """The ids every run of the coming workload writes (untimed set-up may need them)."""
        return None

    @abstractmethod
    def reset(self) -> None:
        """Make the target empty before a run (untimed)."""

    @abstractmethod
    def twopc_sink(self) -> twopc.Sink[Any]:
        """A new twopc sink for this target."""

    def twopc_writer(self, work: Path) -> Writer:
        """twopc's foreachBatch function; ``work`` holds its commit log."""
        return twopc.foreach_batch(
            self.twopc_sink(), sink_id=sink_id(self.name), commit_log=str(work)
        )

    @abstractmethod
    def spark_writer(self) -> Writer: ...

    @abstractmethod
    def read_back(self, side: str) -> ReadBack: ...

    def cleanup(self) -> None:
        """Drop what :meth:`prepare` created."""
        return None


# -- files ----------------------------------------------------------------------------------


class FilesTarget(Target):
    """The files sink on one write path: ``spark`` (Spark's own writer runs phase 1, what
    ``auto`` chooses on a local disk) or ``python`` (Python tasks write with pyarrow).
    With ``streaming``, Spark's own exactly-once file sink is a third side (``stream``)."""

    spark_label = "df.write.parquet"
    stream_label = 'writeStream.format("parquet") (Spark\'s file sink, `_spark_metadata`)'

    def __init__(self, root: Path, write_path: str = "spark", streaming: bool = False) -> None:
        self.write_path = write_path
        self.streaming = streaming
        self.name = "files" if write_path == "spark" else f"files_{write_path}"
        where = "Spark's writer" if write_path == "spark" else "Python tasks"
        self.twopc_label = f"twopc files (parquet, {where})"
        self.root = root / self.name

    def alternatives(self) -> dict[str, str]:
        sides = super().alternatives()
        if self.streaming:
            sides["stream"] = self.stream_label
        return sides

    def writer(self, side: str, work: Path) -> Writer:
        if side == "stream":
            return stream_file_sink_writer(
                self._dir("stream"), self.root / "stream-input", self.root / "stream-checkpoint"
            )
        return super().writer(side, work)

    def _dir(self, side: str) -> Path:
        return self.root / side

    def reset(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)

    def twopc_sink(self) -> twopc.Sink[Any]:
        return twopc.create_sink(
            "files", path=str(self._dir("twopc")), format="parquet", write_path=self.write_path
        )

    def twopc_writer(self, work: Path) -> Writer:
        # the files sink keeps its commit log next to the data (its manifests)
        return twopc.foreach_batch(self.twopc_sink(), sink_id=sink_id(self.name))

    def spark_writer(self) -> Writer:
        path = str(self._dir("spark"))

        def write(df: Any, _batch_id: int) -> None:
            df.write.mode("append").parquet(path)

        return write

    def read_back(self, side: str) -> ReadBack:
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        table = ds.dataset(str(self._dir(side)), format="parquet").to_table(columns=["id"])
        return ReadBack(table.num_rows, pc.sum(table["id"]).as_py() or 0)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


ONE_TASK_PER_FILE = {
    "spark.sql.files.maxPartitionBytes": str(1 << 30),
    "spark.sql.files.openCostInBytes": str(1 << 30),
}
"""Read settings under which the file source reads each input file in one task of its own,
as the cached frame has one partition per file: no file is split (< 1 GiB), and the
"cost" of opening one fills a task."""


def stream_file_sink_writer(output: Path, source: Path, checkpoint: Path) -> Writer:
    """Spark's exactly-once file sink, fed batch by batch: each call appends ``df`` to
    ``source`` as Parquet (untimed), then runs one query over ``source`` into ``output``
    with ``trigger(availableNow=True)`` and the same checkpoint, so call *n* is the query's
    batch *n* and writes exactly the new files' rows.

    Returns the seconds of the batch: for batch 0 the query from its start to its end (the
    other writers' first batch includes their start too), for later batches the
    ``addBatch`` time of the query's progress (what a foreachBatch function's call is in a
    running query: reading the batch, the write job and the sink's `_spark_metadata`
    commit, without the query's restart, planning and offset log). Reading the input from
    Parquet is in that time; the other writers read the cached frame."""

    def write(df: Any, batch_id: int) -> float:
        spark = df.sparkSession
        df.write.mode("append").parquet(str(source))
        saved = {key: spark.conf.get(key, None) for key in ONE_TASK_PER_FILE}
        for key, value in ONE_TASK_PER_FILE.items():
            spark.conf.set(key, value)  # the query's session is cloned at start
        try:
            started = time.perf_counter()
            query = (
                spark.readStream.schema(df.schema)
                .parquet(str(source))
                .writeStream.format("parquet")
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start(str(output))
            )
            query.awaitTermination()
            wall = time.perf_counter() - started
        finally:
            for key, old in saved.items():
                if old is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, old)
        if query.exception() is not None:
            raise RuntimeError(f"the file sink's query failed: {query.exception()}")
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
        if len(batches) != 1 or batches[0]["batchId"] != batch_id:
            raise RuntimeError(
                f"expected one batch {batch_id} with rows, got "
                f"{[(p['batchId'], p['numInputRows']) for p in batches]}"
            )
        if batch_id == 0:
            return wall
        return float(batches[0]["durationMs"]["addBatch"]) / 1000

    return write


# -- SQL ------------------------------------------------------------------------------------


class SqlTarget(Target):
    """Postgres or MariaDB; ``mode`` is the twopc mode, Spark always appends (JDBC)."""

    def __init__(self, database: Database, mode: str, config: BenchConfig) -> None:
        self.db = database
        self.mode = mode
        self.batchsize = config.jdbc_batchsize
        self.table = f"{PREFIX}_{mode}"
        self.name = f"{self.flavor}_{mode}"
        self.twopc_label = f"twopc {self.flavor} {mode}"
        self.spark_label = f"Spark JDBC append (batchsize {self.batchsize})"

    flavor = ""
    dsn_scheme = ""

    @abstractmethod
    def connect(self) -> Any: ...

    @abstractmethod
    def statement(self, template: str, *names: str) -> Any:
        """``template`` with its ``{}`` filled by identifiers quoted with the driver's tools."""

    @abstractmethod
    def ddl(self) -> Any: ...

    @abstractmethod
    def marker_ddl(self) -> Any: ...

    @abstractmethod
    def jdbc_url(self) -> str: ...

    @abstractmethod
    def ident(self, name: str) -> str:
        """``name`` quoted as an identifier with the driver's tools."""

    jdbc_driver = ""

    def _execute(self, *statements: Any) -> None:
        conn = self.connect()
        try:
            with conn.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)
            conn.commit()
        finally:
            conn.close()

    def prepare(self) -> None:
        # the marker table exists before the first timed run, as it would in production
        self._execute(
            self.statement("DROP TABLE IF EXISTS {}", self.table), self.ddl(), self.marker_ddl()
        )

    def reset(self) -> None:
        self._execute(
            self.statement("TRUNCATE TABLE {}", self.table),
            self.statement("TRUNCATE TABLE {}", MARKERS),
        )

    def dsn(self) -> str:
        d = self.db
        return f"{self.dsn_scheme}://{d.user}:{d.password}@{d.host}:{d.port}/{d.database}"

    shuffle_by_key = True
    """The upsert's ``shuffle_by_key`` (the sink's default unless a target says otherwise)."""

    def twopc_sink(self) -> twopc.Sink[Any]:
        upsert = self.mode == "upsert"
        return twopc.create_sink(
            self.flavor,
            dsn=self.dsn(),
            table=self.table,
            mode=self.mode,
            key_columns=["id"] if upsert else [],
            marker_table=MARKERS,
            **({"shuffle_by_key": self.shuffle_by_key} if upsert else {}),
        )

    def jdbc_options(self, table: str) -> dict[str, str]:
        """Spark's JDBC writer's options for ``table``."""
        return {
            "url": self.jdbc_url(),
            "driver": self.jdbc_driver,
            "dbtable": table,
            "user": self.db.user,
            "password": self.db.password,
            "batchsize": str(self.batchsize),
        }

    def spark_writer(self) -> Writer:
        options = self.jdbc_options(self.table)

        def write(df: Any, _batch_id: int) -> None:
            df.write.format("jdbc").options(**options).mode("append").save()

        return write

    def read_back(self, side: str) -> ReadBack:
        conn = self.connect()
        try:
            with conn.cursor() as cursor:
                cursor.execute(self.statement("SELECT count(*), sum(id) FROM {}", self.table))
                count, total = cursor.fetchone()
        finally:
            conn.close()
        return ReadBack(int(count), None if total is None else int(total))

    def cleanup(self) -> None:
        self._execute(
            self.statement("DROP TABLE IF EXISTS {}", self.table),
            self.statement("DROP TABLE IF EXISTS {}", MARKERS),
        )


class PostgresTarget(SqlTarget):
    flavor = "postgres"
    dsn_scheme = "postgresql"
    jdbc_driver = "org.postgresql.Driver"

    def connect(self) -> Any:
        return alternatives.connect(self.flavor, self.db)

    def statement(self, template: str, *names: str) -> Any:
        from psycopg import sql

        return sql.SQL(template).format(*(sql.Identifier(n) for n in names))

    def ident(self, name: str) -> str:
        from psycopg import sql

        return sql.Identifier(name).as_string()

    def ddl(self) -> Any:
        key = " PRIMARY KEY" if self.mode == "upsert" else ""
        return self.statement(
            "CREATE TABLE {} (id bigint" + key + ", s10 text, s40 text, "
            "x double precision, ts timestamptz)",
            self.table,
        )

    def marker_ddl(self) -> Any:
        return self.statement(
            "CREATE TABLE IF NOT EXISTS {} (sink_id text NOT NULL, query_id text NOT "
            "NULL, batch_id bigint NOT NULL, partition_id integer NOT NULL, attempt integer "
            "NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (sink_id, query_id, batch_id, partition_id))",
            MARKERS,
        )

    def jdbc_url(self) -> str:
        d = self.db
        # reWriteBatchedInserts: pgjdbc sends a batch as multi-row INSERTs (its fastest path)
        return f"jdbc:postgresql://{d.host}:{d.port}/{d.database}?reWriteBatchedInserts=true"


class MySQLTarget(SqlTarget):
    flavor = "mysql"
    dsn_scheme = "mysql"
    jdbc_driver = "org.mariadb.jdbc.Driver"

    def connect(self) -> Any:
        return alternatives.connect(self.flavor, self.db)

    def statement(self, template: str, *names: str) -> Any:
        from twopc_jdbc.mysql import quote_identifier

        return template.format(*(quote_identifier(n) for n in names))

    def ident(self, name: str) -> str:
        from twopc_jdbc.mysql import quote_identifier

        return quote_identifier(name)

    def ddl(self) -> Any:
        key = " PRIMARY KEY" if self.mode == "upsert" else ""
        return self.statement(
            "CREATE TABLE {} (id BIGINT" + key + ", s10 VARCHAR(10), s40 VARCHAR(40), "
            "x DOUBLE, ts DATETIME(6)) ENGINE=InnoDB",
            self.table,
        )

    def marker_ddl(self) -> Any:
        return self.statement(
            "CREATE TABLE IF NOT EXISTS {} (sink_id VARCHAR(64) NOT NULL, query_id "
            "VARCHAR(64) NOT NULL, batch_id BIGINT NOT NULL, partition_id INT NOT NULL, "
            "attempt INT NOT NULL, committed_at TIMESTAMP(6) NOT NULL DEFAULT "
            "CURRENT_TIMESTAMP(6), PRIMARY KEY (sink_id, query_id, batch_id, partition_id)) "
            "ENGINE=InnoDB",
            MARKERS,
        )

    def jdbc_url(self) -> str:
        d = self.db
        # MariaDB Connector/J 3 dropped rewriteBatchedStatements; its replacement is the
        # bulk protocol (useBulkStmts). jdbc:mysql: (permitMysqlScheme) makes Spark pick its
        # MySQL dialect (backtick quoting).
        return (
            f"jdbc:mysql://{d.host}:{d.port}/{d.database}?permitMysqlScheme"
            "&useBulkStmts=true&rewriteBatchedStatements=true"
        )


# -- upserts against the ways users upsert without twopc --------------------------------------

COLUMNS = ("id", "s10", "s40", "x", "ts")
STALE_X = -1.0
"""``x`` of the rows a pre-filled table starts with; every written row has ``x >= 0``."""


class UpsertTarget(SqlTarget):
    """twopc's upsert against the two ways users upsert from Spark without it, into an
    ``empty`` table or one where every key already exists (``existing``; issue 18, item 3):

    * ``jdbc_staging``: Spark's JDBC writer overwrites a staging table (``truncate``), then
      the driver runs one ``INSERT ... SELECT ... ON CONFLICT`` / ``ON DUPLICATE KEY
      UPDATE`` from it into the table;
    * ``executemany``: ``df.foreachPartition`` with the Python driver's ``executemany`` of
      an ``INSERT ... VALUES ... ON CONFLICT`` / ``ON DUPLICATE KEY UPDATE``, one
      transaction per partition, ``--jdbc-batchsize`` rows per call.

    Neither removes duplicate keys within a batch (the benchmark's ids are unique), which
    spares them work twopc does; neither is exactly-once. Both rely on each key being in
    one row of the batch, so twopc is told the same: ``shuffle_by_key=False`` (no shuffle
    by key before its tasks; each task still de-duplicates its own rows).
    ``TWOPC_BENCH_UPSERT_SHUFFLE=key`` measures the sink's default (the shuffle) instead.
    """

    conflict_clause = ""

    def __init__(self, database: Database, variant: str, config: BenchConfig) -> None:
        super().__init__(database, "upsert", config)
        if variant not in ("empty", "existing"):
            raise ValueError(f"unknown upsert variant {variant!r}")
        self.variant = variant
        self.table = f"{PREFIX}_upsert_{variant}"
        self.staging = f"{self.table}_staging"
        self.name = f"{self.flavor}_upsert_{variant}"
        where = "empty table" if variant == "empty" else "every key exists"
        self.twopc_label = f"twopc {self.flavor} upsert ({where})"
        self.keys = range(0)
        self.shuffle_by_key = os.environ.get("TWOPC_BENCH_UPSERT_SHUFFLE") == "key"

    def alternatives(self) -> dict[str, str]:
        return {
            "jdbc_staging": f"Spark JDBC into a staging table + {self.conflict_clause}",
            "executemany": f"foreachPartition + {self.driver_name} executemany "
            f"{self.conflict_clause}",
        }

    driver_name = ""

    @abstractmethod
    def staging_ddl(self) -> Any: ...

    @abstractmethod
    def on_conflict(self) -> str:
        """The statement's tail that updates every non-key column of an existing key."""

    @abstractmethod
    def prefill(self, last_id: int) -> list[Any]:
        """Statements that fill the empty table with ids 0 to ``last_id``, stale values."""

    def writer(self, side: str, work: Path) -> Writer:
        if side == "jdbc_staging":
            return self._staging_writer()
        if side == "executemany":
            return self._executemany_writer()
        return super().writer(side, work)

    def _columns(self) -> str:
        return ", ".join(self.ident(c) for c in COLUMNS)

    def upsert_from_staging(self) -> str:
        cols, table, staging = self._columns(), self.ident(self.table), self.ident(self.staging)
        return f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {staging} {self.on_conflict()}"

    def upsert_values(self) -> str:
        marks = ", ".join("%s" for _ in COLUMNS)
        table = self.ident(self.table)
        return f"INSERT INTO {table} ({self._columns()}) VALUES ({marks}) {self.on_conflict()}"

    def _staging_writer(self) -> Writer:
        options = {**self.jdbc_options(self.staging), "truncate": "true"}
        statement, connect = self.upsert_from_staging(), self.connect

        def write(df: Any, _batch_id: int) -> None:
            # overwrite + truncate: Spark empties the table and keeps its definition
            df.write.format("jdbc").options(**options).mode("overwrite").save()
            conn = connect()
            try:
                with conn.cursor() as cursor:
                    cursor.execute(statement)
                conn.commit()
            finally:
                conn.close()

        return write

    def _executemany_writer(self) -> Writer:
        task = functools.partial(
            alternatives.upsert_partition,
            self.flavor,
            self.db,
            self.upsert_values(),
            self.batchsize,
        )

        def write(df: Any, _batch_id: int) -> None:
            df.foreachPartition(task)

        return write

    def prepare(self) -> None:
        super().prepare()
        self._execute(self.statement("DROP TABLE IF EXISTS {}", self.staging), self.staging_ddl())

    def begin_workload(self, ids: range) -> None:
        if ids.start != 0 or ids.step != 1:
            raise ValueError(f"the pre-filled table holds ids 0 to n - 1, not {ids}")
        self.keys = ids

    def reset(self) -> None:
        super().reset()
        statements = [self.statement("TRUNCATE TABLE {}", self.staging)]
        if self.variant == "existing":
            if not self.keys:
                raise RuntimeError(f"{self.name}: begin_workload() names the keys first")
            statements += self.prefill(self.keys[-1])
        self._execute(*statements)

    def read_back(self, side: str) -> ReadBack:
        conn = self.connect()
        try:
            with conn.cursor() as cursor:
                cursor.execute(
                    self.statement(
                        "SELECT count(*), sum(id), sum(CASE WHEN x < 0 THEN 1 ELSE 0 END) FROM {}",
                        self.table,
                    )
                )
                count, total, stale = cursor.fetchone()
        finally:
            conn.close()
        if stale:
            raise StaleRowsError(f"{self.name}/{side}: {stale} rows kept their old values")
        return ReadBack(int(count), None if total is None else int(total))

    def cleanup(self) -> None:
        self._execute(self.statement("DROP TABLE IF EXISTS {}", self.staging))
        super().cleanup()


class PostgresUpsertTarget(UpsertTarget, PostgresTarget):
    conflict_clause = "INSERT … ON CONFLICT"
    driver_name = "psycopg"

    def twopc_sink(self) -> twopc.Sink[Any]:
        """twopc's sink; ``TWOPC_BENCH_PG_UPSERT=on_conflict`` makes its upsert the
        ``INSERT ... ON CONFLICT`` of releases before ``MERGE`` (to compare the two)."""
        sink = super().twopc_sink()
        if os.environ.get("TWOPC_BENCH_PG_UPSERT") == "on_conflict":
            sink._upsert_statement = "on_conflict"  # type: ignore[attr-defined]
        return sink

    def staging_ddl(self) -> Any:
        # unlogged, as twopc's own staging table: the fastest staging a user can choose
        return self.statement(
            "CREATE UNLOGGED TABLE {} (id bigint, s10 text, s40 text, x double precision, "
            "ts timestamptz)",
            self.staging,
        )

    def on_conflict(self) -> str:
        q = self.ident
        updates = ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in COLUMNS[1:])
        return f"ON CONFLICT ({q('id')}) DO UPDATE SET {updates}"

    def prefill(self, last_id: int) -> list[Any]:
        from psycopg import sql

        fill = sql.SQL(
            "INSERT INTO {} SELECT g, 'old', 'old', {}, '2000-01-01 00:00:00+00' "
            "FROM generate_series(0, {}) AS g"
        ).format(sql.Identifier(self.table), sql.Literal(STALE_X), sql.Literal(last_id))
        return [fill, self.statement("ANALYZE {}", self.table)]


class MySQLUpsertTarget(UpsertTarget, MySQLTarget):
    conflict_clause = "INSERT … ON DUPLICATE KEY UPDATE"
    driver_name = "PyMySQL"

    def staging_ddl(self) -> Any:
        return self.statement(
            "CREATE TABLE {} (id BIGINT, s10 VARCHAR(10), s40 VARCHAR(40), x DOUBLE, "
            "ts DATETIME(6)) ENGINE=InnoDB",
            self.staging,
        )

    def on_conflict(self) -> str:
        q = self.ident
        updates = ", ".join(f"{q(c)} = VALUES({q(c)})" for c in COLUMNS[1:])
        return f"ON DUPLICATE KEY UPDATE {updates}"

    def prefill(self, last_id: int) -> list[Any]:
        # MariaDB's Sequence engine: the table seq_0_to_N holds 0 .. N
        fill = self.statement(
            "INSERT INTO {} SELECT seq, 'old', 'old', " + repr(STALE_X) + ", "
            "'2000-01-01 00:00:00' FROM {}",
            self.table,
            f"seq_0_to_{int(last_id)}",
        )
        return [fill, self.statement("ANALYZE TABLE {}", self.table)]


# -- Kafka ----------------------------------------------------------------------------------


class KafkaTarget(Target):
    """A fresh topic per run; the twopc side in ``per_partition`` or ``atomic`` mode."""

    spark_label = "Spark Kafka sink (spark-sql-kafka-0-10)"

    def __init__(self, bootstrap: str, mode: str, topic_partitions: int = 2) -> None:
        self.bootstrap = bootstrap
        self.mode = mode
        self.name = f"kafka_{mode}"
        self.twopc_label = f"twopc kafka {mode}"
        self.topic_partitions = topic_partitions
        self.topic = ""

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap})

    def reset(self) -> None:
        from confluent_kafka.admin import NewTopic

        self._drop_topic()
        self.topic = f"bench-sw-{self.mode}-{uuid.uuid4().hex[:12]}"
        admin = self._admin()  # keep it alive until the futures resolve
        futures = admin.create_topics(
            [NewTopic(self.topic, self.topic_partitions, 1)], operation_timeout=30
        )
        for future in futures.values():
            future.result(60)

    def _drop_topic(self) -> None:
        if not self.topic:
            return
        admin = self._admin()
        for future in admin.delete_topics([self.topic], operation_timeout=30).values():
            future.result(60)
        self.topic = ""

    def twopc_sink(self) -> twopc.Sink[Any]:
        return twopc.create_sink(
            "kafka",
            bootstrap_servers=self.bootstrap,
            topic=self.topic,
            mode=self.mode,
            transactional_id_prefix="bench",
        )

    def twopc_writer(self, work: Path) -> Writer:
        inner = super().twopc_writer(work)

        def write(df: Any, batch_id: int) -> None:
            inner(kafka_shape(df), batch_id)

        write.metrics = inner.metrics  # type: ignore[attr-defined]  # the same deque, for breakdowns
        return write

    def spark_writer(self) -> Writer:
        bootstrap, topic = self.bootstrap, self.topic

        def write(df: Any, _batch_id: int) -> None:
            (
                kafka_shape(df)
                .write.format("kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("topic", topic)
                .save()
            )

        return write

    def read_back(self, side: str) -> ReadBack:
        return ReadBack(count_committed(self.bootstrap, self.topic, self.topic_partitions), None)

    def cleanup(self) -> None:
        self._drop_topic()


def count_committed(bootstrap: str, topic: str, partitions: int) -> int:
    """Records a ``read_committed`` consumer sees in ``topic``, read to the end."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-count-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.max.bytes": 64 * 1024 * 1024,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        done: set[int] = set()
        count = 0
        while len(done) < partitions:
            for message in consumer.consume(num_messages=10_000, timeout=5.0):
                error = message.error()
                if error is None:
                    count += 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    done.add(message.partition())
                else:
                    raise RuntimeError(f"reading {topic}: {error}")
        return count
    finally:
        consumer.close()


class GroupTarget(Target):
    """Issue 32: one batch to two targets. twopc writes a ``SinkGroup`` of the files sink
    (Spark's writer) and PostgreSQL ``two_phase`` under one decision; the other side writes
    the same two targets by hand inside ``foreachBatch``, one after the other, as users do
    today (at-least-once). Both targets are read back; they must agree."""

    name = "group_files_postgres"
    twopc_label = "twopc SinkGroup: files (parquet) + postgres append two_phase"
    spark_label = "`df.write.parquet`, then Spark's JDBC writer (by hand, at-least-once)"

    def __init__(self, root: Path, database: Database, config: BenchConfig) -> None:
        self.files = FilesTarget(root / "group", "spark")
        self.table = PostgresTarget(database, "append", config)
        self.table.table = f"{PREFIX}_group"

    def prepare(self) -> None:
        self.files.prepare()
        self.table.prepare()

    def reset(self) -> None:
        self.files.reset()
        self.table.reset()

    def twopc_sink(self) -> twopc.Sink[Any]:
        orders = twopc.create_sink(
            "postgres",
            dsn=self.table.dsn(),
            table=self.table.table,
            mode="append",
            marker_table=MARKERS,
            transaction_mode="two_phase",
        )
        return twopc.SinkGroup(
            {"files": twopc.Member(self.files.twopc_sink()), "orders": twopc.Member(orders)}
        )

    def spark_writer(self) -> Writer:
        files, table = self.files.spark_writer(), self.table.spark_writer()

        def write(df: Any, batch_id: int) -> None:
            files(df, batch_id)
            table(df, batch_id)

        return write

    def read_back(self, side: str) -> ReadBack:
        files, table = self.files.read_back(side), self.table.read_back(side)
        if (files.rows, files.id_sum) != (table.rows, table.id_sum):
            raise TargetsDisagreeError(f"the group's targets differ: files {files}, table {table}")
        return files

    def cleanup(self) -> None:
        self.files.cleanup()
        self.table.cleanup()


def build_targets(
    names: tuple[str, ...], endpoints: Endpoints, config: BenchConfig
) -> dict[str, Target]:
    """The targets named on the command line, in that order."""
    postgres = Database.parse(endpoints.postgres_dsn, 5432)
    mysql = Database.parse(endpoints.mysql_dsn, 3306)
    factories: dict[str, Callable[[], Target]] = {
        "files": lambda: FilesTarget(config.work_dir, "spark", streaming=True),
        "files_python": lambda: FilesTarget(config.work_dir, "python"),
        "postgres_append": lambda: PostgresTarget(postgres, "append", config),
        "postgres_upsert": lambda: PostgresTarget(postgres, "upsert", config),
        "postgres_upsert_empty": lambda: PostgresUpsertTarget(postgres, "empty", config),
        "postgres_upsert_existing": lambda: PostgresUpsertTarget(postgres, "existing", config),
        "mysql_append": lambda: MySQLTarget(mysql, "append", config),
        "mysql_upsert": lambda: MySQLTarget(mysql, "upsert", config),
        "mysql_upsert_empty": lambda: MySQLUpsertTarget(mysql, "empty", config),
        "mysql_upsert_existing": lambda: MySQLUpsertTarget(mysql, "existing", config),
        "kafka_per_partition": lambda: KafkaTarget(endpoints.kafka_bootstrap, "per_partition"),
        "kafka_atomic": lambda: KafkaTarget(endpoints.kafka_bootstrap, "atomic"),
        "group_files_postgres": lambda: GroupTarget(config.work_dir, postgres, config),
    }
    return {name: factories[name]() for name in names}
