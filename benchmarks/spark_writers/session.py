"""The SparkSession of a benchmark run, with Spark's Kafka sink and the official JDBC drivers.

Packages come from Maven Central through ``spark.jars.packages`` into the ivy cache in the
user's home (``~/.cache/twopc/ivy``), never into the repository. The Kafka connector is
chosen exactly as the tests choose it (``tests/harness/spark_kafka_job.py``): Spark
4.3.0's ``spark-sql-kafka-0-10`` is not on Maven Central, so 4.2.0 with the 4.0.0 token
provider is used when the matching version cannot be resolved.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from benchmarks.spark_writers.config import REPO, BenchConfig

POSTGRES_DRIVER = "org.postgresql:postgresql:42.7.8"
MARIADB_DRIVER = "org.mariadb.jdbc:mariadb-java-client:3.5.6"


def start_session(
    config: BenchConfig, master: str | None = None, conf: dict[str, str] | None = None
) -> tuple[Any, dict[str, str]]:
    """A SparkSession and the package set that started; tries the Kafka candidates in turn.

    ``master`` overrides ``config.master`` (a started standalone cluster's URL), ``conf``
    adds Spark settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Python workers unpickle the benchmark's own code (overhead.NullSink, the upsert
    # alternative's partition function) by module path
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), path) if p)
    settings = {
        # executors of a cluster start their Python workers with their own environment
        "spark.executorEnv.PYTHONPATH": os.environ["PYTHONPATH"],
        "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
        **(conf or {}),
    }
    from tests.harness.spark_kafka_job import CACHE, candidates, maven_jar

    errors = []
    for kafka_packages, excludes, extra in candidates():
        packages = ",".join([kafka_packages, POSTGRES_DRIVER, MARIADB_DRIVER])
        jars = ",".join(maven_jar(c) for c in extra.split(",") if c)
        try:
            spark = _build(
                master or config.master,
                config,
                packages=packages,
                excludes=excludes,
                jars=jars,
                ivy=str(CACHE / "ivy"),
                settings=settings,
            )
        except Exception as exc:  # the JVM exits when ivy cannot resolve a package
            errors.append(f"{kafka_packages}: {type(exc).__name__}: {exc}")
            continue
        return spark, {"packages": packages, "excludes": excludes, "jars": extra}
    raise RuntimeError("no Spark Kafka connector could be resolved:\n" + "\n".join(errors))


def _build(
    master: str,
    config: BenchConfig,
    *,
    packages: str,
    excludes: str,
    jars: str,
    ivy: str,
    settings: dict[str, str],
) -> Any:
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName("twopc-benchmark")
        .config("spark.jars.packages", packages)
        .config("spark.jars.ivy", os.environ.get("TWOPC_SPARK_IVY", ivy))
        .config("spark.driver.memory", config.driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(config.partitions))
    )
    for key, value in settings.items():
        builder = builder.config(key, value)
    if excludes:
        builder = builder.config("spark.jars.excludes", excludes)
    # --jars, not spark.jars: spark-submit adds the resolved packages to spark.jars, and a
    # spark.jars set here would replace that list in the session's conf, leaving the
    # executors of a cluster without the Kafka connector and the JDBC drivers
    previous = os.environ.get("PYSPARK_SUBMIT_ARGS")
    if jars:
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {jars} pyspark-shell"
    try:
        spark = builder.getOrCreate()
    finally:
        if previous is None:
            os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
        else:
            os.environ["PYSPARK_SUBMIT_ARGS"] = previous
    spark.sparkContext.setLogLevel("ERROR")
    return spark
