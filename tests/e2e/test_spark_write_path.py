"""The files sink's Spark write path (``write_path="spark"``: Spark's own writer runs phase 1
in one job, no Python worker touches the rows) under the failures that are its own: the
write job failing, the driver SIGKILLed in the middle of the job, an executor JVM SIGKILLed
while it writes, and the query run from a Spark Connect client. The driver's crash points
on this path are in ``test_spark_crash.py``, speculative copies in ``test_speculation.py``.

Every check reads the output back (``pyarrow.dataset``, and Spark where it says so): every
row once, nothing left in the staging area, committed files under twopc's own names.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.harness.backend_cases import add_input, run_query
from tests.harness.entry_runs import command, kill_executors_when, kill_when, run
from tests.harness.exactly_once import assert_exactly_once
from tests.harness.outputs import read_ids, staged_attempts
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import FilesTarget

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CRASH_BATCH = 1
FINAL_NAME = re.compile(r"part-[0-9a-f]{12}-b\d{8}-p\d{5}-\d{4}\.snappy\.parquet")


def _spec(tmp_path: Path, **options: object) -> SinkRecipe:
    return SinkRecipe(
        "files",
        "parquet",
        f"wp-{uuid.uuid4().hex[:8]}",
        str(tmp_path / "out"),
        options=json.dumps({"write_path": "spark", **options}),
    )


def _input(tmp_path: Path, batches: int = 3) -> tuple[Path, set[int]]:
    source = tmp_path / "in"
    return source, set().union(*(add_input(source, b) for b in range(batches)))


def _in_job(out: Path, batch: int) -> bool:
    """Whether a task of ``batch``'s Spark write job has opened its file (under the job's
    ``_temporary`` directory, where Spark's committer keeps task output until it commits)."""
    pattern = f"_twopc_staging/*/*/{batch:020d}/spark-*/_temporary/**/part-*"
    return any(path.is_file() for path in out.glob(pattern))


def _committed_files(out: Path) -> list[str]:
    return sorted(p.name for p in out.rglob("*.parquet") if "_twopc" not in str(p))


def test_a_failed_spark_write_job_leaves_nothing(spark: Any, tmp_path: Path) -> None:
    """A row of batch 1 makes every attempt of its write task fail (``raise_error``): the
    batch fails with twopc's error, nothing of it is visible and nothing of the job stays
    staged; the query, run again without the bad row's failure, writes every row once."""
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import functions as F

    spec = _spec(tmp_path)
    source, expected = _input(tmp_path, batches=2)
    checkpoint = tmp_path / "chk"
    # the message depends on the row, so that the optimizer cannot raise it while planning
    message = F.concat(F.lit("bad row "), F.col("id").cast("string"))
    failing = F.when(F.col("id") == 50, F.raise_error(message))
    frame = (
        spark.readStream.schema("id long, payload string")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .repartition(2, "id")
        .withColumn("payload", F.coalesce(failing.cast("string"), F.col("payload")))
    )
    import twopc
    from tests.harness.sink_recipe import build_sink

    writer = twopc.foreach_batch(build_sink(spec), spec.sink_id)
    query = (
        frame.writeStream.option("checkpointLocation", str(checkpoint))
        .foreachBatch(writer)
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination()
    message = str(failure.value)
    assert f"sink '{spec.sink_id}', batch 1" in message, message[-2000:]
    assert "the Spark write job failed" in message and "bad row 50" in message, message[-2000:]
    assert [(m.batch_id, m.status) for m in writer.metrics] == [(0, "committed"), (1, "failed")]
    assert set(read_ids(spec.address)) == set(range(40))  # batch 0 only
    assert FilesTarget().leftovers(spec) == []  # the failed job's directory was swept

    rerun = run_query(spark, spec, source, checkpoint, partitions=2)
    assert [(m.batch_id, m.status) for m in rerun.metrics] == [(1, "committed")]
    assert_exactly_once(read_ids(spec.address), expected)
    assert FilesTarget().leftovers(spec) == []
    assert all(FINAL_NAME.fullmatch(name) for name in _committed_files(Path(spec.address)))


def test_driver_sigkilled_in_the_middle_of_the_spark_write_job(tmp_path: Path) -> None:
    """The driver (and with it the local executors) is SIGKILLed while batch 1's write job
    runs: Spark's half-written task output stays in the job's directory, which no
    committable names. Readers see batch 0 only; the restart's recovery removes the job's
    directory, Spark runs the batch again, and every row is there once."""
    spec = _spec(tmp_path)
    source, expected = _input(tmp_path)
    out = Path(spec.address)
    slow = ["--slow-ids", f"{40 * CRASH_BATCH}:{40 * CRASH_BATCH + 40}", "--slow-ms", "150"]
    args = command("foreach", spec, source, tmp_path / "chk") + slow
    kill_when(args, tmp_path, lambda: _in_job(out, CRASH_BATCH), "batch 1's write job ran")

    assert set(read_ids(out)) == set(range(40))  # batch 0 committed, nothing of batch 1
    left = [p.name for p in staged_attempts(out)]
    assert left and all(name.startswith("spark-") for name in left), left

    rerun = run(command("foreach", spec, source, tmp_path / "chk"))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_exactly_once(read_ids(out), expected)
    assert FilesTarget().leftovers(spec) == []
    assert all(FINAL_NAME.fullmatch(name) for name in _committed_files(out))


@pytest.mark.extended
def test_an_executor_sigkilled_mid_job_is_retried_by_spark(tmp_path: Path) -> None:
    """``local-cluster``: both executor JVMs are SIGKILLed while batch 1's write job runs;
    Spark starts new executors and runs the job's tasks again inside the same job, its
    committer keeping one attempt per partition. The batch commits once, in the same
    query run, and nothing stays staged."""
    spec = _spec(tmp_path)
    source, expected = _input(tmp_path)
    out = Path(spec.address)
    args = [
        *command("foreach", spec, source, tmp_path / "chk", master="local-cluster[2,1,1024]"),
        *["--slow-ids", f"{40 * CRASH_BATCH}:{40 * CRASH_BATCH + 40}", "--slow-ms", "150"],
    ]
    returncode, output = kill_executors_when(
        args,
        tmp_path / "query.log",
        lambda: _in_job(out, CRASH_BATCH),
        "batch 1's write job started",
    )
    assert returncode == 0, output[-3000:]
    assert_exactly_once(read_ids(out), expected)
    assert FilesTarget().leftovers(spec) == []


@pytest.mark.extended
def test_a_query_from_a_spark_connect_client(connect: Any, tmp_path: Path) -> None:
    """``df.write`` works over Spark Connect: the ``foreachBatch`` function, next to the
    server, runs Spark's writer and promotes its files; a second run adds a batch."""
    spec = _spec(tmp_path)
    source, expected = _input(tmp_path, batches=2)
    first = run(command("foreach", spec, source, tmp_path / "chk", remote=connect.url))
    assert first.returncode == 0, first.stderr[-3000:]
    assert_exactly_once(read_ids(spec.address), expected)
    expected |= add_input(source, 2)
    second = run(command("foreach", spec, source, tmp_path / "chk", remote=connect.url))
    assert second.returncode == 0, second.stderr[-3000:]
    assert_exactly_once(read_ids(spec.address), expected)
    assert FilesTarget().leftovers(spec) == []
    assert all(FINAL_NAME.fullmatch(name) for name in _committed_files(Path(spec.address)))
