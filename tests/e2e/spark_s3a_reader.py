"""A Spark reader of an output on the S3 API through Hadoop's S3A connector, run as its own
process (its JVM needs the S3A jars at start): for every line ``URL`` on standard input it
prints ``{"batch": [ids], "stream": [ids], "columns": [names]}``: what
``spark.read.parquet(URL)`` reads (its ids and columns), and what a streaming file source
over ``URL`` reads next (``availableNow``, one checkpoint for the process's whole life, so a
second line shows only what is new; ``--schema`` is that source's schema).

The jars: ``org.apache.hadoop:hadoop-aws`` at the version of pyspark's bundled Hadoop client
(3.5.0 for pyspark 4.3), and AWS SDK v2 modules instead of the SDK bundle that hadoop-aws
asks for (a single jar of about 690 MB), from Maven Central through ``spark.jars.packages``
into ``~/.cache/twopc/ivy``. ``TWOPC_SPARK_S3A_PACKAGES`` overrides them.

    python -m tests.e2e.spark_s3a_reader --endpoint http://127.0.0.1:19000 \\
        --key twopc --secret twopc-secret --checkpoint DIR [--schema DDL] < urls
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SDK = "2.57.8"
PACKAGES = ",".join(
    [
        "org.apache.hadoop:hadoop-aws:3.5.0",
        *(f"software.amazon.awssdk:{m}:{SDK}" for m in ("s3", "s3-transfer-manager", "sts")),
        f"software.amazon.awssdk:apache-client:{SDK}",
    ]
)
EXCLUDES = "software.amazon.awssdk:bundle"
"""hadoop-aws 3.5.0 depends on the whole SDK as one shaded jar; the modules above are what
S3A uses of it (and the shaded and unshaded classes must not meet)."""


def session(endpoint: str, key: str, secret: str) -> Any:
    from pyspark.sql import SparkSession

    ivy = os.environ.get("TWOPC_SPARK_IVY", str(Path.home() / ".cache" / "twopc" / "ivy"))
    s3a = {
        "endpoint": endpoint,
        "endpoint.region": "us-east-1",
        "path.style.access": "true",
        "connection.ssl.enabled": "false",
        "access.key": key,
        "secret.key": secret,
        "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }
    builder = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.jars.packages", os.environ.get("TWOPC_SPARK_S3A_PACKAGES", PACKAGES))
        .config("spark.jars.excludes", EXCLUDES)
        .config("spark.jars.ivy", ivy)
    )
    for name, value in s3a.items():
        builder = builder.config(f"spark.hadoop.fs.s3a.{name}", value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stream_ids(
    spark: Any, url: str, checkpoint: str, schema: str = "id long, payload string"
) -> list[int]:
    """The ids a streaming file source over ``url`` reads next (``availableNow``), as one
    query continuing from ``checkpoint``; ``schema`` includes any partition columns."""
    seen: list[int] = []

    def collect(frame: Any, _: int) -> None:
        seen.extend(r["id"] for r in frame.select("id").collect())

    query = (
        spark.readStream.schema(schema)
        .parquet(url)
        .writeStream.trigger(availableNow=True)
        .option("checkpointLocation", checkpoint)
        .foreachBatch(collect)
        .start()
    )
    query.awaitTermination(180)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return sorted(seen)


class S3AReader:
    """The test side of a reader process: ``read(url)`` returns its answer for ``url``."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def answer(self, key: str) -> dict[str, Any]:
        """The reader's next JSON line carrying ``key`` (other output is Spark's)."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{") and key in (message := json.loads(line)):
                return dict(message)
        raise AssertionError(f"the Spark reader ended without {key!r}: exit {self.process.wait()}")

    def read(self, url: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(url + "\n")
        self.process.stdin.flush()
        return self.answer("batch")


@contextmanager
def s3a_reader(
    endpoint: str, key: str, secret: str, checkpoint: Path, schema: str = ""
) -> Iterator[S3AReader]:
    """Start a reader process (``python -m tests.e2e.spark_s3a_reader``) and wait until its
    SparkSession is up; it stops when the block ends."""
    repo = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-m", "tests.e2e.spark_s3a_reader"]
    command += ["--endpoint", endpoint, "--key", key, "--secret", secret]
    command += ["--checkpoint", str(checkpoint), *(["--schema", schema] if schema else [])]
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo), "PYSPARK_PYTHON": sys.executable},
        cwd=repo,
    )
    reader = S3AReader(process)
    try:
        reader.answer("ready")
        yield reader
    finally:
        if process.stdin is not None:
            process.stdin.close()
        process.wait(timeout=120)
        if process.stdout is not None:
            process.stdout.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--schema", default="id long, payload string")
    args = parser.parse_args()
    spark = session(args.endpoint, args.key, args.secret)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        url = line.strip()
        frame = spark.read.parquet(url)
        batch = sorted(r["id"] for r in frame.select("id").collect())
        stream = stream_ids(spark, url, args.checkpoint, args.schema)
        print(json.dumps({"batch": batch, "stream": stream, "columns": sorted(frame.columns)}))
        sys.stdout.flush()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
