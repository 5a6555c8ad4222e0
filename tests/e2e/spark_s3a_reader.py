"""A Spark reader of an output on the S3 API through Hadoop's S3A connector, run as its own
process (its JVM needs the S3A jars at start): for every line ``URL`` on standard input it
prints ``{"batch": [ids], "stream": [ids]}``: what ``spark.read.parquet(URL)`` reads, and
what a streaming file source over ``URL`` reads next (``availableNow``, one checkpoint for
the process's whole life, so a second line shows only what is new).

The jars: ``org.apache.hadoop:hadoop-aws`` at the version of pyspark's bundled Hadoop client
(3.5.0 for pyspark 4.3), and AWS SDK v2 modules instead of the SDK bundle that hadoop-aws
asks for (a single jar of about 690 MB), from Maven Central through ``spark.jars.packages``
into ``~/.cache/twopc/ivy``. ``TWOPC_SPARK_S3A_PACKAGES`` overrides them.

    python -m tests.e2e.spark_s3a_reader --endpoint http://127.0.0.1:19000 \\
        --key twopc --secret twopc-secret --checkpoint DIR < urls
"""

from __future__ import annotations

import argparse
import json
import os
import sys
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


def stream_ids(spark: Any, url: str, checkpoint: str) -> list[int]:
    seen: list[int] = []

    def collect(frame: Any, _: int) -> None:
        seen.extend(r["id"] for r in frame.select("id").collect())

    query = (
        spark.readStream.schema("id long, payload string")
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args()
    spark = session(args.endpoint, args.key, args.secret)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        url = line.strip()
        batch = sorted(r["id"] for r in spark.read.parquet(url).select("id").collect())
        print(json.dumps({"batch": batch, "stream": stream_ids(spark, url, args.checkpoint)}))
        sys.stdout.flush()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
