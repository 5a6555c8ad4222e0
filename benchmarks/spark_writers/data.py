"""The data every target gets: generated in Spark, cached, identical for twopc and Spark."""

from __future__ import annotations

from typing import Any

COLUMNS = "id bigint, s10 string (10 chars), s40 string (40 chars), x double, ts timestamp"


def generate(spark: Any, rows: int, partitions: int, first_id: int = 0) -> Any:
    """A cached DataFrame of ``rows`` rows (ids from ``first_id``) in ``partitions``
    partitions, materialized.

    Deterministic (no ``rand()``): the same rows on every run, and ``id`` is unique, so an
    upsert of the whole frame into an empty table inserts every row.
    """
    df = spark.range(first_id, first_id + rows, 1, partitions).selectExpr(
        "id",
        "substr(sha2(cast(id AS string), 256), 1, 10) AS s10",
        "substr(sha2(cast(id * 7 AS string), 256), 1, 40) AS s40",
        "cast(id AS double) * 1.5 AS x",
        "timestamp_seconds(1700000000 + id) AS ts",
    )
    df = df.persist()
    counted = df.count()
    if counted != rows:
        raise RuntimeError(f"generated {counted} rows, expected {rows}")
    return df


def kafka_shape(df: Any) -> Any:
    """The frame as Spark's Kafka sink wants it: a string key and a JSON value per row.

    Both writers get this projection inside the timed call, so converting rows to JSON
    (done in the JVM by ``to_json``) costs both the same.
    """
    return df.selectExpr("cast(id AS string) AS key", "to_json(struct(*)) AS value")
