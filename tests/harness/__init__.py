"""The test harness: everything the test folders share, and nothing that is a test.

Test folders (``tests/unit``, ``tests/e2e``, ``tests/crash``, ``tests/integration``,
``tests/chaos``, ``tests/kit``) import shared code from here or from their own folder, never
from each other, and no module imports a test module (``tests/unit/test_harness_layout.py``
checks both). ``tests/conftest.py`` loads the fixture modules and registers this package
for pytest's assertion rewriting.

Checks and reading output back:

* ``exactly_once``: the one exactly-once check (``assert_exactly_once`` on ids or keys seen;
  ``assert_target_exactly_once`` reads a target and checks nothing was left behind).
* ``outputs``: files output as a reader sees it (``read_ids``), staged attempts left.
* ``targets``: one backend as the checks see it (files, S3, PostgreSQL/MariaDB, Kafka): a
  fresh namespace, what a reader sees, what a crash left; shared with the chaos campaign.
* ``sink_recipe``: ``SinkRecipe``, a sink as plain data (JSON on a query's command line),
  and ``build_sink``.
* ``databases``: a SQL database as the crash and stall tests see it; the local SQL query's
  command line. ``sql_servers``: PostgreSQL and MariaDB for the SQL sink cases.
* ``sql_sink_cases``: the SQL sinks' shared cases (``SqlSinkCases``, ``Db``, ``Env``).
* ``kafka_topics``: topics, committed records and keys, kcat, the broker's tools.
* ``kafka_serializers``, ``registry_protos``: serializers and a protobuf class that sinks
  import by name in the Kafka tests.
* ``decisions``: made-up committables and decisions for the commit log's tests.
* ``doc_snippets``: the documentation's code blocks, found and run.
* ``status_cli``: the real ``twopc`` command line in its own process.
* ``sink_errors``: errors as a task raises them (``in_task``), their texts.

Fixtures (loaded by ``tests/conftest.py``, or by the conftest of the folders that use them):

* ``service_fixtures``: the real services, started on demand (``postgres_dsn``,
  ``mysql_dsn``, ``kafka_bootstrap``, ``s3_store``, ``schema_registry_url``, ``services``).
* ``spark_fixtures``: the suite's one in-process SparkSession (``spark``), order files.
* ``backend_cases`` (``case``) and ``backend_runs`` (``backend``): every backend and mode,
  a fresh target per test, and in-process ``foreachBatch`` queries into it (imported by
  ``tests/e2e/conftest.py`` and ``tests/crash/conftest.py``).

Processes and the queries tests run in them:

* ``processes``: ``REPO``, ``run_process`` (a query in its own session, killed whole),
  ``local_query`` (the command line of a ``local_*query.py`` script here).
* ``procs``: fork a driver, find its tasks and executor JVMs, kill them (crash tests and the
  campaign).
* ``local_query``, ``local_sql_query``, ``local_kafka_query``: local-engine query scripts
  (files, SQL, Kafka) with their options on the command line.
* ``recipe_local_query``, ``recipe_spark_query``: the query of a ``SinkRecipe`` on the local
  engine and on real Spark (the campaign's and the crash tests' queries).
* ``entry_query``, ``entry_runs``: one query per entry point (``foreach_batch``,
  ``format("twopc")``, batch writes) as a process, and killing it at a moment.
* ``standalone``: a Spark standalone cluster of two workers.
* ``spark_kafka_job``: Spark's Kafka source jar and a session that can load it.
* ``services``, ``stalls``: ``scripts/services`` from Python (start, kill, pause), and
  stalling a service at a point of a sink.
"""
