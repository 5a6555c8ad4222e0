"""The checks through twopc's other entry points: batch writes (``twopc.write_batch`` and
``df.write.format("twopc")``) and ``df.writeStream.format("twopc")``. A plugin needs no code
for them; the format checks only need its sink as string options (:meth:`format_options`),
and fail until it gives them or opts out (:attr:`format_opt_out`)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from twopc._contract.paths import CommitPath
from twopc._coordination.batch_metrics import BatchStatus
from twopc.protocol import Sink
from twopc.testing._base import SinkChecks, expect, fail, guarantee
from twopc.testing._runner import batch_ids
from twopc.testing._spark_checks import (
    INPUT_SCHEMA,
    spark_input,
    spark_session,
    writes_with_spark,
)

__all__ = ["EntryPointChecks"]


class EntryPointChecks(SinkChecks):
    """Batch writes (all or nothing, once per ``write_id``) and ``format("twopc")`` queries
    (a replayed batch id writes nothing, a failed task leaves the batch to a rerun that
    writes it once), on a real local Spark session.

    Provide :meth:`format_options` for the ``format("twopc")`` checks; without it they
    fail, telling you to provide it, unless :attr:`format_opt_out` says why the sink cannot
    be given as options. The kit checks that the options build the same sink as
    ``sink_factory`` (class, :meth:`~twopc.Sink.describe`, :meth:`~twopc.Sink.naming`),
    so the format checks test the sink the other checks test. A sink that cannot take part
    in an entry point (batch writes of a sink that commits each partition in its task;
    ``format("twopc")`` with a sink that writes a batch in one task) must refuse it with a
    clear error: the check then passes as skipped, naming the refusal.
    """

    format_opt_out: ClassVar[str] = ""
    """Why this sink cannot be written through ``format("twopc")`` (e.g. its factory takes
    a Python object that no string option can carry). Non-empty: the ``format("twopc")``
    checks are skipped with this reason instead of failing for a missing
    :meth:`format_options`."""

    def format_options(self, target: str) -> dict[str, str] | None:
        """The sink for ``target`` as ``format("twopc")`` options: ``{"sink": "<backend
        name>", ...}`` plus the backend's :func:`twopc.create_sink` options as strings.
        ``None`` (the default) fails the format checks unless :attr:`format_opt_out` is
        set."""
        return None

    # -- helpers --------------------------------------------------------------------------

    def _batch_frame(self, tmp_path: Path, files: int = 2) -> Any:
        spark = spark_session(self.spark_master)
        source = spark_input(tmp_path, files)
        return spark.read.schema(INPUT_SCHEMA).json(str(source)).repartition(2, "id")

    def _options(self, target: str) -> dict[str, str]:
        """The author's ``format("twopc")`` options for ``target``, checked to build the
        sink ``sink_factory`` makes; skips the calling check when the class opts out."""
        options = self.format_options(target)
        opt_out = self.format_opt_out.strip()
        if opt_out and options is not None:
            fail(
                "format-options",
                f"{type(self).__name__} sets format_opt_out ({opt_out!r}) and also returns "
                "format_options(target): remove the opt-out so the format checks run",
            )
        if opt_out:
            pytest.skip(f"format_opt_out: {opt_out}")
        if options is None:
            fail(
                "format-options",
                f"{type(self).__name__} does not implement format_options(target): return "
                "the sink for target as format(\"twopc\") options, e.g. {'sink': "
                "'<backend name>', '<create_sink option>': '<value as a string>', ...}; if "
                "the sink cannot be given as string options, set format_opt_out = "
                "'<why>' on the class to skip the format checks",
            )
        if "sink" not in options:
            raise TypeError("format_options(target) must name the backend: {'sink': ...}")
        self._same_sink(target, options)
        return dict(options)

    def _same_sink(self, target: str, options: dict[str, str]) -> None:
        """Fail unless the options build, the way ``format("twopc")`` does, a sink of the
        same class, description, naming and commit path as ``sink_factory``'s."""
        from twopc._contract.sink_options import sink_from_options

        made = self.make_sink(target)
        built = sink_from_options(options["sink"], options)
        expect(
            _identity(built) == _identity(made),
            "format-options",
            f"format_options(target) builds {_shown(built)}, but sink_factory builds "
            f"{_shown(made)}: the format checks would test another sink than the other "
            "checks. Return the options with which create_sink builds the sink_factory's sink",
        )

    def _refused_batch(self, target: str) -> None:
        """Skip, naming the refusal, when batch writes refuse this sink."""
        import twopc
        from twopc._engines.batch_write import check_batch_sink

        try:
            check_batch_sink(self.make_sink(target), "kit")
        except twopc.ConfigurationError as exc:
            pytest.skip(f"batch writes refuse this sink clearly: {exc.cause_message}")

    @staticmethod
    def _expected(files: int) -> list[int]:
        return [i for b in range(files) for i in batch_ids(b, 0, 40)]

    # -- the format("twopc") options ---------------------------------------------------------

    @guarantee("format-options")
    def test_format_options_build_the_sink_of_sink_factory(self, target: str) -> None:
        """No Spark: the options build, as ``format("twopc")`` builds them, the sink that
        ``sink_factory`` makes (the backend is installed with its entry point, its
        factory takes the options as strings)."""
        self._options(target)

    # -- batch writes ---------------------------------------------------------------------

    @guarantee("batch-write")
    def test_write_batch_writes_once_per_write_id(self, target: str, tmp_path: Path) -> None:
        import twopc

        self._refused_batch(target)
        frame = self._batch_frame(tmp_path)
        sink_id, log = f"kit-{uuid.uuid4().hex[:8]}", str(tmp_path / "batch-log")
        first = twopc.write_batch(
            frame, self.make_sink(target), sink_id, write_id="k1", commit_log=log
        )
        again = twopc.write_batch(
            frame, self.make_sink(target), sink_id, write_id="k1", commit_log=log
        )
        statuses = (first.status, again.status)
        expect(
            statuses == (BatchStatus.COMMITTED, BatchStatus.SKIPPED),
            "batch-write",
            f"the same write_id written twice ran as {statuses}",
        )
        self.exactly(self.visible(target), self._expected(2), "batch-write", "after two writes")

    @guarantee("batch-write")
    def test_a_failed_batch_write_leaves_nothing(self, target: str, tmp_path: Path) -> None:
        import twopc

        self._refused_batch(target)
        sink = self.make_sink(target)
        partition = 0 if sink.single_task else 1
        faults = twopc.FaultPlan.parse(f"after_invoke:raise@partition={partition}")
        frame = self._batch_frame(tmp_path)
        if writes_with_spark(sink):
            # no Python task to fail: a row fails every attempt of its Spark write task
            frame, faults = _failing_row(frame), twopc.FaultPlan()
        with pytest.raises(twopc.TwoPCError):
            twopc.write_batch(
                frame,
                sink,
                f"kit-{uuid.uuid4().hex[:8]}",
                write_id="k1",
                commit_log=str(tmp_path / "batch-log"),
                faults=faults,
            )
        self.exactly(self.visible(target), [], "batch-write", "after a failed write")

    @guarantee("format-batch")
    def test_format_batch_write_writes_once_per_write_id(self, target: str, tmp_path: Path) -> None:

        options = self._options(target)
        self._refused_batch(target)
        frame = self._batch_frame(tmp_path)
        _register(frame.sparkSession)
        options.update(
            sink_id=f"kit-{uuid.uuid4().hex[:8]}",
            write_id="k1",
            commit_log=str(tmp_path / "format-log"),
        )
        _refused_if_single_task(
            options, self.make_sink(target).single_task, streaming=False, key="format-batch"
        )
        for _ in range(2):
            frame.write.format("twopc").options(**options).mode("append").save()
        self.exactly(self.visible(target), self._expected(2), "format-batch", "after two writes")

    @guarantee("batch-write")
    def test_a_failed_format_batch_write_leaves_nothing(self, target: str, tmp_path: Path) -> None:
        """A task of ``df.write.format("twopc")`` fails on every attempt: the job fails,
        nothing of it is visible, and the same ``write_id`` run again writes it once."""
        options = self._options(target)
        self._refused_batch(target)
        frame = self._batch_frame(tmp_path)
        _register(frame.sparkSession)
        options.update(
            sink_id=f"kit-{uuid.uuid4().hex[:8]}",
            write_id="k1",
            commit_log=str(tmp_path / "format-log"),
        )
        _refused_if_single_task(
            options, self.make_sink(target).single_task, streaming=False, key="batch-write"
        )
        failing = {**options, "faults": "after_invoke:raise@partition=1"}
        _fails_by_the_fault(
            lambda: frame.write.format("twopc").options(**failing).mode("append").save(),
            "batch-write",
            "the write",
        )
        self.exactly(self.visible(target), [], "batch-write", "after a failed write")
        frame.write.format("twopc").options(**options).mode("append").save()
        self.exactly(
            self.visible(target), self._expected(2), "batch-write", "after the write again"
        )

    # -- streaming ------------------------------------------------------------------------

    @guarantee("format-stream")
    def test_format_stream_query_and_replay(self, target: str, tmp_path: Path) -> None:

        options = self._options(target)
        spark = spark_session(self.spark_master)
        _register(spark)
        checkpoint = tmp_path / "format-checkpoint"
        options.update(
            sink_id=f"kit-{uuid.uuid4().hex[:8]}",
            commit_log=str(tmp_path / "format-log"),
            checkpointLocation=str(checkpoint),
        )
        _refused_if_single_task(
            options, self.make_sink(target).single_task, streaming=True, key="format-stream"
        )

        _stream_query(spark, tmp_path, options)
        self.exactly(self.visible(target), self._expected(2), "format-stream", "after the query")
        # Spark runs batch 1 again when its commit was not recorded: the write is a replay
        (checkpoint / "commits" / "1").unlink()
        (checkpoint / "commits" / ".1.crc").unlink(missing_ok=True)
        shutil.rmtree(checkpoint / "state", ignore_errors=True)
        _stream_query(spark, tmp_path, options)
        self.exactly(self.visible(target), self._expected(2), "format-stream", "after a replay")

    @guarantee("format-stream")
    def test_a_failed_task_of_a_format_stream_query_then_a_rerun(
        self, target: str, tmp_path: Path
    ) -> None:
        """Partition 1's task of batch 0 fails on every attempt, so the query stops. A sink
        that commits on the driver shows nothing of the batch; one that commits in the task
        may show what partition 0 committed, once. Run again, the query writes every row
        exactly once: the committed partitions are not written twice."""
        options = self._options(target)
        spark = spark_session(self.spark_master)
        _register(spark)
        options.update(
            sink_id=f"kit-{uuid.uuid4().hex[:8]}",
            commit_log=str(tmp_path / "format-log"),
            checkpointLocation=str(tmp_path / "format-checkpoint"),
        )
        sink = self.make_sink(target)
        _refused_if_single_task(options, sink.single_task, streaming=True, key="format-stream")
        failing = {**options, "faults": "after_invoke:raise@batch=0,partition=1"}
        _fails_by_the_fault(
            lambda: _stream_query(spark, tmp_path, failing), "format-stream", "the query"
        )
        seen = self.visible(target)
        batch_0 = set(batch_ids(0, 0, 40))
        if CommitPath.of(sink) is CommitPath.DRIVER:
            self.exactly(seen, [], "format-stream", "after a failed task (commit on the driver)")
        else:
            expect(
                set(seen) <= batch_0 and all(n == 1 for n in seen.values()),
                "format-stream",
                "after a failed task, an in-task sink shows other rows than those of batch "
                f"0's partitions that committed, once: {sorted(seen.elements())[:10]}",
            )
        _stream_query(spark, tmp_path, options)
        self.exactly(self.visible(target), self._expected(2), "format-stream", "after a rerun")


def _stream_query(spark: Any, tmp_path: Path, options: dict[str, str]) -> None:
    """The kit's ``writeStream.format("twopc")`` query over its two input files, one batch
    each, run until the input is consumed (or the query fails: then it raises)."""
    frame = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(spark_input(tmp_path, 2)))
        .repartition(2, "id")
    )
    query = frame.writeStream.format("twopc").options(**options).trigger(availableNow=True).start()
    query.awaitTermination()


def _fails_by_the_fault(action: Callable[[], None], key: str, what: str) -> None:
    """Run ``action``, which must fail with the fault the kit injected into a task (Spark
    wraps it: its text carries the task's error)."""
    try:
        action()
    except Exception as exc:
        expect(
            "injected fault" in str(exc).lower(),
            key,
            f"{what} failed for another reason than the fault injected into a task: {exc}",
        )
        return
    fail(key, f"{what} succeeded although a task failed on every attempt")


def _identity(sink: Sink[Any]) -> tuple[Any, ...]:
    """What tells two sinks apart for the kit: class, description, naming and commit path."""
    return (type(sink), sink.describe(), sink.naming(), CommitPath.of(sink), sink.single_task)


def _shown(sink: Sink[Any]) -> str:
    return (
        f"{type(sink).__module__}.{type(sink).__qualname__} ({sink.describe()!r}, naming "
        f"{sink.naming()}, commits {CommitPath.of(sink).value})"
    )


def _refused_if_single_task(
    options: dict[str, str], single_task: bool, *, streaming: bool, key: str
) -> None:
    """For a sink that writes a batch in one task, ``format("twopc")`` must refuse it where
    the writer is planned, with a :class:`~twopc.ConfigurationError` that names the sink;
    the check is then skipped, naming the refusal. Checked on this side of Spark, where the
    plan is made from the same options: through Spark the error arrives as text only."""
    if not single_task:
        return
    from twopc._engines.datasource import _Setup
    from twopc.errors import ConfigurationError

    try:
        _Setup.from_options(options, streaming=streaming)
    except ConfigurationError as exc:
        expect(
            exc.sink_id == options["sink_id"],
            key,
            f"refused without naming the sink ({exc.sink_id!r}): {exc}",
        )
        pytest.skip(f'format("twopc") refuses sinks that write a batch in one task: {exc}')
    expect(False, key, 'format("twopc") accepted a sink that writes a batch in one task')


def _register(spark: Any) -> None:
    """Register ``format("twopc")``; skip where this PySpark cannot host it (before 4.1)."""
    import twopc

    try:
        twopc.register(spark)
    except twopc.ConfigurationError as exc:
        pytest.skip(str(exc))


def _failing_row(frame: Any) -> Any:
    """``frame`` with one row that fails whatever evaluates it (``raise_error``, whose
    message depends on the row so that it is not raised while planning)."""
    from pyspark.sql import functions as F

    ids = sorted(int(row[0]) for row in frame.select("id").collect())
    bad = ids[len(ids) // 2]
    message = F.concat(F.lit("kit: bad row "), F.col("id").cast("string"))
    return frame.where(F.when(F.col("id") == bad, F.raise_error(message)).otherwise(F.lit(True)))
