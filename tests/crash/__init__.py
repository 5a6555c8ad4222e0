"""Crash tests: a process of a query (or a service it writes to) is killed at a crash point,
the query is restarted, and the target must hold every row exactly once with nothing left
prepared, staged or open. By crash kind:

* **Driver SIGKILLed, local engine (no JVM)**, at every crash point of a backend:
  ``test_local_crash_matrix.py`` (files), ``test_sql_crash_matrix.py`` (PostgreSQL and
  MariaDB, both transaction modes), ``test_kafka_crash_matrix.py`` (both Kafka modes),
  ``test_s3_crash_matrix.py`` (files on the S3 API; also the S3 service killed mid-batch),
  ``test_sql_schema_crash.py`` (a crash while the SQL sink evolves the table's schema).
* **Driver or Python worker SIGKILLed, real Spark**: ``test_spark_crash.py`` (every point of
  the files sink, the driver for driver points, the Python worker running the task for task
  points; both write paths), ``test_rescaled_crash.py`` (a crashed 12-partition query
  restarted with 2), ``test_wide_batch_crash.py`` (batches of 200 and 1,000 partitions on
  every backend and mode and a group, the driver killed mid-batch; MariaDB ``two_phase`` in
  CI).
* **A group of targets** (``twopc.SinkGroup``: PostgreSQL + MariaDB, files + PostgreSQL),
  the driver SIGKILLed at every driver point, local engine and real Spark:
  ``test_group_crash_matrix.py``.
* **Iceberg**: ``test_iceberg_crash_matrix.py`` (every point, local engine and real Spark,
  both write paths, an executor killed), ``test_iceberg_catalog_crash.py`` (the catalog on
  PostgreSQL and the REST catalog, their services killed under a decided batch; two
  queries racing through the REST catalog).
* **Crashes during recovery** (a second and third crash inside recovery, then a clean
  restart): ``test_recovery_crashes.py``.
* **Prepared work lost on the service** after a driver crash (a prepared transaction rolled
  back or committed by hand): ``test_prepared_gone.py``.

Elsewhere, by what they test rather than how they crash: executor and mid-write kills of
Spark's own writer (``tests/e2e/test_spark_write_path.py``, for Iceberg
``tests/e2e/test_iceberg_spark_write.py``), the driver of each entry point
killed between decision and commit (``tests/e2e/test_batch_write.py``,
``test_datasource.py``, ``test_spark_connect.py``, ``test_s3_spark.py``), the Kafka pipeline
(``tests/e2e/test_kafka_spark.py``), ``twopc status``/``recover`` after a crash
(``tests/integration/test_status_recover.py``), services stalled or killed under a batch
(``tests/integration/test_service_stalls.py``, ``tests/e2e/test_stall_spark.py``), the
conformance kit's crash checks (``tests/kit``) and the randomized campaign (``tests/chaos``).
New crash tests go here, in the file of their crash kind (see docs/development.md, "Where
things go").
"""
