"""The targets: for each system, the twopc writer, Spark's own writer, reset and read-back.

Every writer is a ``foreachBatch`` function ``fn(df, batch_id)``. Both writers of a target
write into the same table (files: sibling directories, Kafka: a fresh topic per run), which
is emptied before every run; after every run the rows are counted *on the target* (a
``SELECT``, a ``read_committed`` consumer, ``pyarrow.dataset``) and a wrong count fails the
benchmark.
"""

from __future__ import annotations

import shutil
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.spark_writers.config import BenchConfig, Database, Endpoints
from benchmarks.spark_writers.data import kafka_shape

import twopc

Writer = Callable[[Any, int], None]

PREFIX = "bench_sw"
MARKERS = f"{PREFIX}_markers"


@dataclass(frozen=True)
class ReadBack:
    """What the target shows after a run: the row count and the sum of ``id``."""

    rows: int
    id_sum: int | None


class Target(ABC):
    """One system and mode; ``twopc_writer`` and ``spark_writer`` are the two contenders."""

    name: str
    spark_label: str
    twopc_label: str

    def prepare(self) -> None:
        """Create what every run needs (tables); called once per benchmark."""
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
            self.twopc_sink(), sink_id=f"bench-{self.name}", commit_log=str(work)
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
    ``auto`` chooses on a local disk) or ``python`` (Python tasks write with pyarrow)."""

    spark_label = "df.write.parquet"

    def __init__(self, root: Path, write_path: str = "spark") -> None:
        self.write_path = write_path
        self.name = "files" if write_path == "spark" else f"files_{write_path}"
        where = "Spark's writer" if write_path == "spark" else "Python tasks"
        self.twopc_label = f"twopc files (parquet, {where})"
        self.root = root / self.name

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
        return twopc.foreach_batch(self.twopc_sink(), sink_id=f"bench-{self.name}")

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

    def twopc_sink(self) -> twopc.Sink[Any]:
        return twopc.create_sink(
            self.flavor,
            dsn=self.dsn(),
            table=self.table,
            mode=self.mode,
            key_columns=["id"] if self.mode == "upsert" else [],
            marker_table=MARKERS,
        )

    def spark_writer(self) -> Writer:
        url, table, driver, batchsize = (
            self.jdbc_url(),
            self.table,
            self.jdbc_driver,
            self.batchsize,
        )
        user, password = self.db.user, self.db.password

        def write(df: Any, _batch_id: int) -> None:
            (
                df.write.format("jdbc")
                .option("url", url)
                .option("driver", driver)
                .option("dbtable", table)
                .option("user", user)
                .option("password", password)
                .option("batchsize", str(batchsize))
                .mode("append")
                .save()
            )

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
        import psycopg

        d = self.db
        return psycopg.connect(
            host=d.host, port=d.port, user=d.user, password=d.password, dbname=d.database
        )

    def statement(self, template: str, *names: str) -> Any:
        from psycopg import sql

        return sql.SQL(template).format(*(sql.Identifier(n) for n in names))

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
        import pymysql

        d = self.db
        return pymysql.connect(
            host=d.host, port=d.port, user=d.user, password=d.password, database=d.database
        )

    def statement(self, template: str, *names: str) -> Any:
        from twopc_jdbc.mysql import quote_identifier

        return template.format(*(quote_identifier(n) for n in names))

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


def build_targets(
    names: tuple[str, ...], endpoints: Endpoints, config: BenchConfig
) -> dict[str, Target]:
    """The targets named on the command line, in that order."""
    postgres = Database.parse(endpoints.postgres_dsn, 5432)
    mysql = Database.parse(endpoints.mysql_dsn, 3306)
    factories: dict[str, Callable[[], Target]] = {
        "files": lambda: FilesTarget(config.work_dir, "spark"),
        "files_python": lambda: FilesTarget(config.work_dir, "python"),
        "postgres_append": lambda: PostgresTarget(postgres, "append", config),
        "postgres_upsert": lambda: PostgresTarget(postgres, "upsert", config),
        "mysql_append": lambda: MySQLTarget(mysql, "append", config),
        "mysql_upsert": lambda: MySQLTarget(mysql, "upsert", config),
        "kafka_per_partition": lambda: KafkaTarget(endpoints.kafka_bootstrap, "per_partition"),
        "kafka_atomic": lambda: KafkaTarget(endpoints.kafka_bootstrap, "atomic"),
    }
    return {name: factories[name]() for name in names}
