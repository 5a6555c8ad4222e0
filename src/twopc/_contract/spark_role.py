"""The optional role of a driver-commit sink whose batches Spark's own writer can write
(:class:`WritesWithSpark`) and the values it exchanges with the Spark adapter. Users and
plugins import them from :mod:`twopc.protocol`, which shows them as its own."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from twopc._contract.values import Committable, TaskContext

__all__ = ["SparkOutput", "SparkWrite", "WritesWithSpark"]


@dataclass(frozen=True)
class SparkWrite:
    """One run of a batch written by Spark's own writer: what the engine runs is
    ``df.selectExpr(*select).write.format(format).options(**options)
    .partitionBy(*partition_by).mode("overwrite").save(path)`` (without ``selectExpr``
    when ``select`` is empty or the batch's types are ``identity_dtypes``), with
    ``session_conf`` set on the batch's Spark session for the projection and the job (the
    casts of ``select`` take ANSI mode from it) and put back after them.

    ``path`` is a URI Spark's (Hadoop's) filesystems resolve (``file:///...``,
    ``hdfs://...``): a location of this run alone, hidden from readers, that the sink's
    :meth:`~Sink.sweep` removes when no prepared work came of it. Because it is, the engine
    writes it with the output committer's algorithm 2 and no ``_SUCCESS`` file, and a
    ``file:`` location through Hadoop's raw local filesystem (no ``.crc`` files); keys of
    ``options`` override these.
    """

    format: str
    path: str
    options: Mapping[str, str] = field(default_factory=dict)
    partition_by: tuple[str, ...] = ()
    select: tuple[str, ...] = ()
    """Spark SQL expressions the batch is projected to before the write (casts to the
    target's types, columns to partition by); empty: the batch's columns as they are."""
    session_conf: Mapping[str, str] = field(default_factory=dict)
    """Spark SQL settings the write needs that are not write options (for example
    ``spark.sql.parquet.outputTimestampType``): set for the job only."""
    identity_dtypes: tuple[tuple[str, str], ...] = ()
    """The batch's columns with their Spark types, as ``df.dtypes`` gives them and in that
    order, for which ``select`` changes nothing (each column cast to the type it already
    has): a batch of exactly these is written without the projection, which saves Spark
    one more analysis of the batch's plan. Empty: ``select`` always applies."""


@dataclass(frozen=True)
class SparkOutput:
    """One unit of prepared work a sink made of a Spark write job's output: its committable,
    and the rows and bytes it holds, for metrics (0 where the sink cannot tell cheaply)."""

    committable: Committable
    rows: int = 0
    bytes: int = 0


class WritesWithSpark(ABC):
    """Optional role of a :class:`CommitsOnDriver` sink: Spark can write a batch itself.

    The Spark adapter (``twopc.foreach_batch``, ``twopc.write_batch``) asks
    :meth:`spark_write_refusal` once per writer. When it returns ``None``, phase 1 of every
    batch is one Spark job and no Python worker touches the rows:

    1. on the driver, :meth:`plan_spark_write` names a location of this run of the batch
       (``ctx.attempt`` names the run) and how Spark writes there;
    2. Spark's writer runs it, with its own output committer: failed, retried and
       speculative task attempts are resolved inside that location;
    3. on the driver again, :meth:`spark_written` turns the job's output into prepared work,
       durable and found by :meth:`CommitsOnDriver.recover` from then on, one committable
       per partition ``0..n-1`` of the batch.

    The coordinator then decides and commits exactly as for work prepared by tasks. A job
    that fails, or a driver that dies during it, leaves only the run's location, which no
    committable names: :meth:`Sink.sweep` must remove it. The task side of the contract
    still serves every other entry point (``format("twopc")``, whose writer runs in Python
    tasks, the local engine) and the sinks' own tests.

    Usage::

        class MyFilesSink(Sink[Txn], CommitsOnDriver, WritesWithSpark):
            def spark_write_refusal(self):
                return None if self.format in ("parquet", "orc") else "format arrow"

            def plan_spark_write(self, ctx, columns):
                return SparkWrite(self.format, f"file://{self.root}/_staging/{ctx.attempt}")

            def spark_written(self, ctx, write):
                ...  # list write.path, stage the files per partition, return SparkOutputs
    """

    @abstractmethod
    def spark_write_refusal(self) -> str | None:
        """Why Spark's writer cannot write this sink's batches (the adapter then runs phase
        1 in Python tasks and logs the reason), or ``None`` when it can. Raise
        :class:`~twopc.ConfigurationError` when the sink's options insist on Spark's writer
        and it cannot."""

    def spark_write_required(self) -> bool:
        """Whether the options insist on Spark's writer: entry points whose phase 1 always
        runs in Python tasks (``format("twopc")``) refuse such a sink. Default ``False``."""
        return False

    @abstractmethod
    def plan_spark_write(self, ctx: TaskContext, columns: Sequence[str]) -> SparkWrite:
        """Where and how Spark writes this run of the batch, on the driver, before the job.

        ``ctx`` names the run: ``partition`` is 0 and ``attempt`` is unique among the
        batch's runs. ``columns`` are the batch's columns. Prepare the location (remove
        what an earlier run with the same name left); raise
        :class:`~twopc.PermanentSinkError` for data the sink can never write (a partition
        column that is missing)."""

    @abstractmethod
    def spark_written(self, ctx: TaskContext, write: SparkWrite) -> list[SparkOutput]:
        """After the job succeeded, on the driver: make its output prepared work.

        Return one :class:`SparkOutput` per partition ``0..n-1`` of the batch (an empty
        committable where a partition wrote nothing), each committable named by its
        partition and ``ctx.attempt``. When this returns, committing them must succeed
        from any process (:meth:`Sink.pre_commit`'s promise); if the driver dies before,
        what is left must be found by ``recover`` (prepared, then aborted) or ``sweep``."""
