"""Read a Kafka topic with Spark's Kafka source (availableNow) into a memory sink.

Run as a subprocess by test_spark_kafka_source.py (so its SparkSession and JVM never
leak into other tests)::

    python spark_kafka_job.py BOOTSTRAP TOPIC CHECKPOINT_DIR

Prints one JSON line ``{"count": .., "distinct": .., "min": .., "max": .., "package": ..}``.

The Kafka source is resolved from Maven Central by ``spark.jars.packages`` into the ivy
directory ``~/.cache/twopc/ivy`` (override: ``TWOPC_SPARK_IVY``). The first choice is
``org.apache.spark:spark-sql-kafka-0-10_2.13:<pyspark version>``. If that coordinate cannot be
resolved (the registry reachable here has no Spark 4.3.0 artifacts at all), the job falls
back to spark-sql-kafka 4.2.0 (see ``candidates``), and remembers the choice that worked in
``~/.cache/twopc/spark-kafka-packages-<pyspark version>.txt``. ``TWOPC_SPARK_KAFKA_PACKAGES``
(with optional ``TWOPC_SPARK_KAFKA_EXCLUDES`` and ``TWOPC_SPARK_KAFKA_EXTRA``, Maven
coordinates of extra jars) force a choice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "twopc"
SCALA = "2.13"


M2 = Path.home() / ".m2" / "repository"
TOKEN_PROVIDER = f"org.apache.spark:spark-token-provider-kafka-0-10_{SCALA}"


def candidates() -> list[tuple[str, str, str]]:
    """(spark.jars.packages, spark.jars.excludes, extra Maven jars) triples, best first."""
    forced = os.environ.get("TWOPC_SPARK_KAFKA_PACKAGES")
    if forced:
        return [
            (
                forced,
                os.environ.get("TWOPC_SPARK_KAFKA_EXCLUDES", ""),
                os.environ.get("TWOPC_SPARK_KAFKA_EXTRA", ""),
            )
        ]
    found = [(f"org.apache.spark:spark-sql-kafka-0-10_{SCALA}:{pyspark.__version__}", "", "")]
    remembered = CACHE / f"spark-kafka-packages-{pyspark.__version__}.txt"
    if remembered.is_file():
        parts = [*remembered.read_text().strip().split("|"), "", ""][:3]
        found.insert(0, (parts[0], parts[1], parts[2]))
    # Fallback for a registry (mirror) that has spark-sql-kafka 4.2.0 but not the matching
    # token provider, which it only has in 4.0.0 (a small module that did not change in a
    # way that matters here). The 4.0.x connector itself does not run on Spark 4.3
    # (NoClassDefFoundError: org/apache/spark/internal/LogKeys$OFFSETS$).
    found.append(
        (
            f"org.apache.spark:spark-sql-kafka-0-10_{SCALA}:4.2.0",
            TOKEN_PROVIDER,
            f"{TOKEN_PROVIDER}:4.0.0",
        )
    )
    return list(dict.fromkeys(found))


def maven_jar(coordinate: str) -> str:
    """Path of group:artifact:version's jar in ~/.m2, fetched with Maven if missing."""
    group, artifact, version = coordinate.split(":")
    jar = M2 / group.replace(".", "/") / artifact / version / f"{artifact}-{version}.jar"
    if not jar.is_file():
        subprocess.run(
            [
                "mvn",
                "-B",
                "-q",
                "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:get",
                f"-Dartifact={coordinate}",
                "-Dtransitive=false",
            ],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr,
        )
    return str(jar)


def build_session(packages: str, excludes: str, extra: str) -> SparkSession:
    ivy = os.environ.get("TWOPC_SPARK_IVY", str(CACHE / "ivy"))
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("twopc-integration-kafka-source")
        .config("spark.jars.packages", packages)
        .config("spark.jars.ivy", ivy)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "10s")
    )
    if excludes:
        builder = builder.config("spark.jars.excludes", excludes)
    if extra:
        jars = ",".join(maven_jar(c) for c in extra.split(",") if c)
        builder = builder.config("spark.jars", jars)
    return builder.getOrCreate()


def run(spark: SparkSession, bootstrap: str, topic: str, checkpoint: str) -> dict[str, int]:
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    query = (
        stream.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
        .writeStream.format("memory")
        .queryName("kafka_rows")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    if query.isActive:
        query.stop()
        raise RuntimeError("the availableNow query did not finish within 300 s")
    if query.exception() is not None:
        raise RuntimeError(f"query failed: {query.exception()}")
    row = spark.sql(
        "SELECT count(*) AS n, count(DISTINCT value) AS d, "
        "min(CAST(value AS INT)) AS lo, max(CAST(value AS INT)) AS hi FROM kafka_rows"
    ).first()
    assert row is not None
    return {"count": row["n"], "distinct": row["d"], "min": row["lo"], "max": row["hi"]}


def remember(packages: str, excludes: str, extra: str) -> None:
    """Record the candidate that started, so the next process tries it first."""
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / f"spark-kafka-packages-{pyspark.__version__}.txt").write_text(
        f"{packages}|{excludes}|{extra}\n"
    )


def kafka_source_session() -> SparkSession:
    """A session with Spark's Kafka source: the first candidate that starts (remembered);
    ``RuntimeError`` naming each candidate's failure when none does."""
    errors = []
    for packages, excludes, extra in candidates():
        try:
            spark = build_session(packages, excludes, extra)
        except Exception as exc:  # the JVM exits when ivy cannot resolve the packages
            errors.append(f"{packages}: {type(exc).__name__}: {exc}")
            continue
        remember(packages, excludes, extra)
        return spark
    raise RuntimeError("no Spark Kafka source package:\n" + "\n".join(errors))


def main() -> int:
    bootstrap, topic, checkpoint = sys.argv[1:4]
    errors = []
    for packages, excludes, extra in candidates():
        try:
            spark = build_session(packages, excludes, extra)
        except Exception as exc:  # the JVM exits when ivy cannot resolve the packages
            errors.append(f"{packages}: {type(exc).__name__}: {exc}")
            print(f"[spark_kafka_job] could not start with {packages}: {exc}", file=sys.stderr)
            continue
        try:
            result = run(spark, bootstrap, topic, checkpoint)
        finally:
            spark.stop()
        remember(packages, excludes, extra)
        result_out = {**result, "package": packages, "extra_jars": extra}
        print(json.dumps(result_out), flush=True)
        return 0
    print("no Spark Kafka source package could be resolved:\n" + "\n".join(errors), file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
