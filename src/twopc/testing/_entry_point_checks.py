"""The checks through twopc's other entry points: batch writes (``twopc.write_batch`` and
``df.write.format("twopc")``) and ``df.writeStream.format("twopc")``. A plugin needs no code
for them; the format checks only need its sink as string options (:meth:`format_options`)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from twopc._metrics import BatchStatus
from twopc.testing._base import SinkChecks, expect, guarantee
from twopc.testing._runner import batch_ids
from twopc.testing._spark_checks import INPUT_SCHEMA, spark_input, spark_session

__all__ = ["EntryPointChecks"]


class EntryPointChecks(SinkChecks):
    """Batch writes (all or nothing, once per ``write_id``) and ``format("twopc")`` queries
    (a replayed batch id writes nothing), on a real local Spark session.

    Provide :meth:`format_options` for the ``format("twopc")`` checks. A sink that cannot
    take part in an entry point (batch writes of a sink that commits each partition in its
    task; ``format("twopc")`` with a sink that writes a batch in one task) must refuse it
    with a clear error: the check then passes as skipped, naming the refusal.
    """

    def format_options(self, target: str) -> dict[str, str] | None:
        """The sink for ``target`` as ``format("twopc")`` options: ``{"sink": "<backend
        name>", ...}`` plus the backend's :func:`twopc.create_sink` options as strings.
        ``None`` (the default) skips the format checks."""
        return None

    # -- helpers --------------------------------------------------------------------------

    def _batch_frame(self, tmp_path: Path, files: int = 2) -> Any:
        spark = spark_session(self.spark_master)
        source = spark_input(tmp_path, files)
        return spark.read.schema(INPUT_SCHEMA).json(str(source)).repartition(2, "id")

    def _options(self, target: str) -> dict[str, str]:
        options = self.format_options(target)
        if options is None:
            pytest.skip("format_options(target) is not provided")
        if "sink" not in options:
            raise TypeError("format_options(target) must name the backend: {'sink': ...}")
        return dict(options)

    def _refused_batch(self, target: str) -> None:
        """Skip, naming the refusal, when batch writes refuse this sink."""
        import twopc
        from twopc._batch_write import check_batch_sink

        try:
            check_batch_sink(self.make_sink(target), "kit")
        except twopc.ConfigurationError as exc:
            pytest.skip(f"batch writes refuse this sink clearly: {exc.cause_message}")

    @staticmethod
    def _expected(files: int) -> list[int]:
        return [i for b in range(files) for i in batch_ids(b, 0, 40)]

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
        with pytest.raises(twopc.TwoPCError):
            twopc.write_batch(
                self._batch_frame(tmp_path),
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

        def run() -> None:
            frame = (
                spark.readStream.schema(INPUT_SCHEMA)
                .option("maxFilesPerTrigger", 1)
                .json(str(spark_input(tmp_path, 2)))
                .repartition(2, "id")
            )
            query = (
                frame.writeStream.format("twopc")
                .options(**options)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()

        run()
        self.exactly(self.visible(target), self._expected(2), "format-stream", "after the query")
        # Spark runs batch 1 again when its commit was not recorded: the write is a replay
        (checkpoint / "commits" / "1").unlink()
        (checkpoint / "commits" / ".1.crc").unlink(missing_ok=True)
        shutil.rmtree(checkpoint / "state", ignore_errors=True)
        run()
        self.exactly(self.visible(target), self._expected(2), "format-stream", "after a replay")


def _refused_if_single_task(
    options: dict[str, str], single_task: bool, *, streaming: bool, key: str
) -> None:
    """For a sink that writes a batch in one task, ``format("twopc")`` must refuse it where
    the writer is planned, with a :class:`~twopc.ConfigurationError` that names the sink;
    the check is then skipped, naming the refusal. Checked on this side of Spark, where the
    plan is made from the same options: through Spark the error arrives as text only."""
    if not single_task:
        return
    from twopc._datasource import _Setup
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
