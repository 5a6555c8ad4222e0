"""Every code snippet of the documentation runs, is checked, or is listed here with the
reason it is not run.

The snippets are the fenced blocks of ``README.md`` and ``docs/**/*.md`` whose language is
code (:data:`CODE`). Blocks that show what a command prints or how files are laid out
(:data:`OUTPUT`: no language, ``text``, ``json``) have nothing to run. Each code block is
claimed by exactly one entry, found by a marker (a piece of its code) on its page:

* :data:`LOCAL`: executed here as printed, without Spark or services, with the names the
  page defines around it (``prelude``) and, for a few, a check of what the page says about
  the result (``after``);
* :data:`CHECKED`: run or checked by the named test: here, against the code (a signature,
  the CLI's parser, ``TWOPC_FAULTS``'s parser, an example's functions); or in
  ``tests/e2e/test_doc_snippets_run.py``, through real Spark (``e2e``) and the real
  services of ``scripts/services`` (``integration``), with the target read back;
* :data:`SKIPPED`: not run, with the reason.

A new snippet that none of them claims fails :func:`test_every_snippet_is_claimed`, and so
does an entry whose marker no longer finds its snippet. The tests of this module need
neither Spark nor a service. The plugin guide's two complete sinks are run by
``tests/unit/test_plugin_guide.py``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import io
import json
import logging
import re
import shlex
import ssl
import sys
import tomllib
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pytest

import twopc
from tests.harness.doc_snippets import (
    CODE,
    OUTPUT,
    Block,
    all_blocks,
    code_blocks,
    commands_of,
    find,
    replaced,
    run,
)
from tests.harness.processes import REPO

# -- the claims ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalRun:
    """A snippet executed as printed. ``prelude`` defines what the page defines around it;
    ``upto`` runs only the code before that line (what follows is a Spark query, run by
    the Spark tests in its plain form); ``after`` checks what the page says of the result."""

    prelude: str = "import twopc\n"
    upto: str | None = None
    after: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    replace: Mapping[str, str] = field(default_factory=dict)
    """Texts of the snippet replaced before it runs (see :func:`replaced`)."""


LOCAL: dict[tuple[str, str], LocalRun] = {
    ("docs/quickstart.md", 'logging.getLogger("twopc").setLevel(logging.INFO)'): LocalRun(
        after='assert logging.getLogger("twopc").getEffectiveLevel() == logging.INFO'
    ),
    ("docs/backends/files.md", 'path="s3://lake/orders",'): LocalRun(),
    ("docs/backends/iceberg.md", '"warehouse": "s3://lake/warehouse",'): LocalRun(
        after="assert sink.access.storage_options['client_kwargs']['region_name'] == 'eu-west-1'"
    ),
    ("docs/backends/delta.md", 'table_uri="/data/lake/events", create_table=True'): LocalRun(
        upto="query = ",
        after='assert sink.describe() == "delta table /data/lake/events"',
    ),
    ("docs/backends/iceberg.md", 'warehouse="/data/warehouse",'): LocalRun(
        after="assert \"'sqlite:////data/warehouse/twopc-catalog.db'\" in repr(sink)"
    ),
    (
        "docs/backends/kafka.md",
        'sink = twopc.create_sink("kafka", bootstrap_servers="broker:9092", topic="out")',
    ): LocalRun(upto="query = ("),
    ("docs/backends/kafka.md", 'KafkaSink("broker-1:9092,broker-2:9092"'): LocalRun(
        after="assert isinstance(sink, KafkaSink)"
    ),
    ("docs/backends/kafka.md", 'value_format="avro",'): LocalRun(
        env={"REGISTRY_PASSWORD": "doc-registry-secret"},
        # repr(sink) masks basic.auth.user.info; creating the sink sends no request
        after='assert "doc-registry-secret" not in repr(sink)',
    ),
    ("docs/backends/kafka.md", '"sasl.mechanism": "SCRAM-SHA-512"'): LocalRun(
        env={"KAFKA_PASSWORD": "doc-kafka-secret"},
        # librdkafka loads the CA file when the sink checks producer_config: a real one
        replace={"/etc/kafka/ca.pem": ssl.get_default_verify_paths().openssl_cafile},
        after='assert "doc-kafka-secret" not in repr(sink)',
    ),
    ("docs/backends/postgres.md", 'order_column="updated_at",\n)\nwriter'): LocalRun(
        upto="query = ("
    ),
    ("docs/backends/postgres.md", 'PostgresSink("postgresql://etl@db.internal/shop"'): LocalRun(
        # the page: create_sink takes its options as keywords only
        after=(
            "try:\n"
            '    twopc.create_sink("postgres", "postgresql://etl@db.internal/shop")\n'
            "except TypeError:\n"
            "    pass\n"
            "else:\n"
            '    raise AssertionError("a positional DSN was taken")\n'
        )
    ),
    ("docs/backends/mysql.md", '"init_command": "SET SESSION time_zone'): LocalRun(
        prelude='secret = "doc-mysql-secret"\n', after="assert secret not in repr(sink)"
    ),
    # creating the sinks and the group connects to nothing; the query is the example's,
    # which tests/e2e/test_orders_outbox_example.py runs (and checks the page shows it)
    ("docs/outbox.md", "group = twopc.SinkGroup("): LocalRun(
        prelude=(
            "import twopc\n"
            'dsn = "postgresql://etl@db.internal:5432/shop"\n'
            'table, bootstrap, outbox = "orders", "broker:9092", "order-events"\n'
        ),
        upto="writer = ",
        after=(
            'assert group.last_resource == "events"\n'
            'assert list(group.members) == ["orders", "events"]'
        ),
    ),
    ("docs/kafka-to-kafka.md", 'sink_id="access-counts-pg",'): LocalRun(
        prelude=(
            "import twopc\nfrom twopc_kafka import ConsumerGroup\n"
            'dsn = "postgresql://etl@db.internal:5432/shop"\n'
        )
    ),
    (
        "docs/plugins.md",
        "class MyFilesSink(twopc.Sink[MyTxn], twopc.CommitsOnDriver): ...",
    ): LocalRun(
        prelude="import twopc\nMyTxn = object\n",
        # the page: a class missing the contract's methods cannot be instantiated
        after=(
            "for cls in (MyFilesSink, MyQueueSink):\n"
            "    try:\n"
            "        cls()\n"
            "    except TypeError as exc:\n"
            '        assert "abstract" in str(exc)\n'
            "    else:\n"
            '        raise AssertionError(f"{cls.__name__} was instantiated")\n'
        ),
    ),
    ("docs/plugins.md", "class StagedPayload(twopc.Payload):"): LocalRun(
        prelude=(
            "from dataclasses import dataclass\nfrom typing import ClassVar\nimport twopc\n"
            'txn = type("Txn", (), {"ctx": twopc.TaskContext("s", "q", 3, 1)})()\n'
            'staging, files = "_twopc_staging/s/q/3/1-0", ("a.parquet",)\n'
        ),
        after=(
            "assert payload == StagedPayload(staging, files)\n"
            'assert StagedPayload.from_json({"dir": "d", "files": ["f"]}, 1) == '
            'StagedPayload("d", ("f",))\n'
        ),
    ),
    ("docs/plugins.md", "# twopc_mydb/plugin.py: imports nothing but twopc"): LocalRun(
        after='assert [s.name for s in twopc_sinks()] == ["mydb"]'
    ),
    ("docs/plugins.md", "def twopc_progress_reporters() -> list[ProgressSpec]:"): LocalRun(
        prelude="from twopc import ProgressSpec, hookimpl\n",
        after='assert [s.kind for s in twopc_progress_reporters()] == ["mydb-progress-table"]',
    ),
    ("docs/plugins.md", "class TestMyDbConformance("): LocalRun(
        after="assert issubclass(TestMyDbConformance, EntryPointChecks)"
    ),
    ("docs/plugins.md", "class _SqliteFile:"): LocalRun(
        prelude=(
            "import pyarrow as pa\n"
            "from twopc.testing import (CrashChecks, DriverCommitChecks, EntryPointChecks,\n"
            "    SparkChecks, TaskCommitChecks, TaskSideChecks)\n"
            "def read_ids(target): return []\n"
        ),
        after="assert issubclass(TestSqliteTaskConformance, TaskCommitChecks)",
    ),
    ("docs/conformance.md", "# conftest.py at the root of your tests"): LocalRun(
        after='assert pytest_plugins == ["twopc.testing.plugin"]'
    ),
    ("docs/conformance.md", "# test_conformance.py"): LocalRun(
        after="assert TestMySinkConformance().bad_batch().num_rows == 1"
    ),
    ("docs/conformance.md", 'format_opt_out = "make_sink takes a connection pool'): LocalRun(
        prelude="from twopc.testing import SinkConformanceSuite\n"
    ),
    ("docs/conformance.md", "class TestFilesConformance(SinkConformanceSuite):"): LocalRun(
        after=(
            'factory = TestFilesConformance.sink_factory.split(":")\n'
            "assert callable(getattr(importlib.import_module(factory[0]), factory[1]))\n"
        ),
        prelude="import importlib\n",
    ),
    ("docs/conformance.md", 'name = f"test-{uuid.uuid4().hex}"'): LocalRun(
        prelude=(
            "import uuid\nfrom collections.abc import Iterator\nimport pytest\n"
            "import twopc\nimport twopc.testing\n"
        )
    ),
    ("docs/conformance.md", '@guarantee("large-batch")'): LocalRun(
        after='assert hasattr(SinkConformanceSuite, "test_large_batch")'
    ),
}

CHECKED: dict[tuple[str, str], str] = {
    # through real Spark, and the real services where a snippet writes to them
    (
        "README.md",
        'twopc.create_sink("files", path="/data/orders", format="parquet")',
    ): "test_files_query_snippets",
    (
        "docs/quickstart.md",
        'sink = twopc.create_sink("files", path="/data/orders", format="parquet")\n\nquery',
    ): "test_files_query_snippets",
    ("docs/index.md", 'path="s3://lake/orders"'): "test_files_query_snippets",
    ("README.md", '.option("sink", "files")'): "test_format_files_snippets",
    ("docs/entry-points.md", "twopc.register(spark)"): "test_format_files_snippets",
    ("docs/entry-points.md", '.option("partition_by", "day")'): "test_format_files_snippets",
    (
        "docs/entry-points.md",
        "writer.close()  # removes the liveness record",
    ): "test_complete_foreach_batch_query",
    ("docs/entry-points.md", "background_commit=True)"): "test_background_commit_snippet",
    ("docs/entry-points.md", '.option("table", "public.orders")'): "test_format_postgres_snippet",
    ("docs/entry-points.md", '.option("sink", "kafka")'): "test_format_kafka_snippet",
    ("docs/entry-points.md", 'table="public.daily_totals",'): "test_batch_write_snippets",
    ("docs/entry-points.md", '"daily-totals-kafka",'): "test_batch_write_snippets",
    (
        "docs/entry-points.md",
        '.option("sink_id", "daily-totals-files")',
    ): "test_batch_write_snippets",
    (
        "docs/entry-points.md",
        '.option("table", "public.daily_totals")',
    ): "test_batch_write_snippets",
    ("docs/quickstart.md", "def report(m: twopc.BatchMetrics)"): "test_quickstart_metrics_snippet",
    ("docs/quickstart.md", "join = MetricsJoin("): "test_metrics_listener_snippet",
    ("docs/backends/mysql.md", "CREATE TABLE wc"): "test_wordcount_snippets",
    ("docs/backends/mysql.md", 'key_columns=["word"],'): "test_wordcount_snippets",
    # checked against the code, without Spark
    (
        "docs/entry-points.md",
        "twopc.write_batch(df, sink, sink_id, *, write_id,",
    ): "test_write_batch_signature",
    (
        "docs/kafka-to-kafka.md",
        "from examples.kafka_access_log_counts import",
    ): "test_kafka_to_kafka_snippet_calls_the_example",
    (
        "docs/backends/kafka.md",
        'value_schema="shop.orders_pb2:Order"',
    ): "test_protobuf_sink_snippet",
    ("docs/backends/kafka.md", "# my_pipeline/serializers.py"): "test_value_serializer_snippets",
    (
        "docs/backends/kafka.md",
        'value_serializer="my_pipeline.serializers:orders_avro"',
    ): "test_value_serializer_snippets",
    ("docs/metrics.md", "def to_statsd(m: twopc.BatchMetrics)"): "test_own_exporter_snippet",
    ("docs/metrics.md", 'assets = files("twopc.metrics") / "assets"'): "test_ops_assets_snippet",
    ("docs/plugins.md", "# pyproject.toml of your distribution"): "test_plugin_pyproject_snippet",
    ("docs/concepts.md", 'TWOPC_FAULTS="between_commits:kill@batch=2"'): "test_fault_plan_snippets",
    (
        "docs/operations.md",
        "# files: the commit log lives next to the data",
    ): "test_twopc_commands_parse",
    (
        "docs/operations.md",
        "$ twopc status postgres --sink-id orders --option-env",
    ): "test_twopc_commands_parse",
    (
        "docs/operations.md",
        "$ twopc status postgres --sink-id orders ...\n",
    ): "test_twopc_commands_parse",
    (
        "docs/operations.md",
        "twopc offsets postgres --sink-id orders",
    ): "test_twopc_commands_parse",
    ("docs/cli.md", "$ twopc plugins"): "test_twopc_commands_parse",
    ("docs/cli.md", "$ twopc offsets files"): "test_twopc_commands_parse",
    ("docs/cli.md", "$ twopc version"): "test_twopc_commands_parse",
    ("docs/quickstart.md", "twopc demo"): "test_twopc_commands_parse",
    (
        "docs/troubleshooting.md",
        "twopc status postgres --sink-id orders",
    ): "test_twopc_commands_parse",
    # SQL and the brokers' tools against the real services
    (
        "docs/backends/postgres.md",
        "CREATE TABLE IF NOT EXISTS twopc_markers",
    ): "test_sql_snippets_run",
    ("docs/backends/postgres.md", "FROM pg_prepared_xacts"): "test_sql_snippets_run",
    ("docs/backends/mysql.md", "CREATE TABLE IF NOT EXISTS twopc_markers"): "test_sql_snippets_run",
    ("docs/backends/postgres.md", "CREATE TABLE twopc_markers_writers"): "test_sql_snippets_run",
    ("docs/backends/mysql.md", "CREATE TABLE twopc_markers_writers"): "test_sql_snippets_run",
    ("docs/troubleshooting.md", "FROM pg_prepared_xacts"): "test_sql_snippets_run",
    ("docs/troubleshooting.md", "XA RECOVER FORMAT='SQL';"): "test_sql_snippets_run",
    (
        "docs/troubleshooting.md",
        "kafka-transactions.sh --bootstrap-server broker:9092 list",
    ): "test_kafka_transactions_snippet",
    ("docs/development.md", "$ scripts/services env"): "test_services_env_snippet",
}

SKIPPED: dict[tuple[str, str], str] = {
    ("docs/backends/delta.md", '"io.delta.sql.DeltaSparkSessionExtension"'): (
        "needs the Delta Spark package, built for Spark 4.2 (this repository's virtualenv "
        "has PySpark 4.3); tests/e2e/delta_spark_reader.py builds the same session in a "
        "PySpark 4.2 virtualenv and reads twopc's table back"
    ),
    ("docs/backends/delta.md", '.option("txnAppId", app_id)'): (
        "Spark's Delta writer, which needs the Delta Spark package (Spark 4.2); "
        "tests/e2e/delta_spark_reader.py runs the same foreachBatch function"
    ),
    ("docs/backends/iceberg.md", '"spark.sql.catalog.lake.type", "jdbc"'): (
        "needs PySpark 4.0 with the Iceberg runtime for Spark 4.0 (this repository's "
        "virtualenv has PySpark 4.3, for which Maven Central has no runtime); "
        "benchmarks/iceberg_spark.py builds the same session and reads twopc's tables back"
    ),
    ("docs/entry-points.md", 'remote("sc://spark-connect.internal:15002")'): (
        "needs a Spark Connect server; tests/e2e/test_spark_connect.py runs foreach_batch "
        "to PostgreSQL with checkpoint_location= over a real one"
    ),
    ("docs/metrics.md", "start_prometheus_server(9464)"): (
        "binds port 9464 and registers in the process-wide Prometheus and OpenTelemetry "
        "registries; tests/e2e/test_metrics_exporters.py runs the same query with its own "
        "registries and a free port"
    ),
    ("docs/metrics.md", 'query.lastProgress["observedMetrics"]["twopc"]["rows"]'): (
        "a line of the query above; tests/e2e/test_metrics_exporters.py reads "
        "observedMetrics of a real query"
    ),
    ("docs/design/coordinator.md", 'df.mapInArrow(phase1, "report string").collect()'): (
        "illustrates the shape of phase 1's Spark job; phase1 is internal"
    ),
    ("docs/groups.md", "audit = twopc.create_sink("): (
        "needs PostgreSQL and a stream; tests/e2e/test_sink_group_spark.py runs the same "
        "shape (a SinkGroup of two projected members through foreach_batch and write_batch) "
        "on real Spark"
    ),
    ("docs/groups.md", "twopc status group --sink-id orders-outbox"): (
        "needs PostgreSQL and Kafka; tests/integration/test_group_kafka_last_resource.py "
        "runs the same commands (members from --options-json, the DSN from --option-env)"
    ),
    ("docs/groups.md", "outbox = twopc.create_sink("): (
        "needs Kafka, PostgreSQL and a stream; examples/orders_outbox.py (docs/outbox.md) "
        "runs the same shape on real Spark, and tests/crash/test_group_crash_matrix.py "
        "crashes it at every point"
    ),
    ("docs/plugins.md", "STORE: dict[str, object]"): "run by tests/unit/test_plugin_guide.py",
    ("docs/plugins.md", "stream = LocalStream("): "run by tests/unit/test_plugin_guide.py",
    ("docs/backends/mysql.md", "LOAD DATA LOCAL INFILE '<file>'"): (
        "the statement the sink generates, with placeholders; every MariaDB append test runs it"
    ),
    # shell: installs, servers, long runs
    ("README.md", "./scripts/demo"): "the demo: a minute of Spark with a SIGKILLed driver",
    ("README.md", "./scripts/test\n"): "the whole suite",
    ("docs/benchmarks.md", "./scripts/bench"): "the benchmark: tens of minutes",
    ("docs/chaos.md", "scripts/chaos --runs 1000"): "the chaos campaign",
    ("docs/chaos.md", "scripts/chaos --backend delta"): "the Delta campaign: 110 Spark runs",
    ("docs/chaos.md", "scripts/chaos --runs 30 --seed 150000"): (
        "Delta on Spark's write path: 100 Spark runs"
    ),
    ("docs/quickstart.md", 'pip install "twopc[files,spark]"'): "installs packages",
    ("docs/metrics.md", 'pip install "twopc[files,otel]"'): "installs packages",
    ("docs/conformance.md", 'pip install "twopc[testing]"'): "installs packages",
    ("docs/plugins.md", 'pip install . "./examples/twopc-sqlite[test]"'): "installs packages",
    ("docs/quickstart.md", 'export PYSPARK_PYTHON="$VIRTUAL_ENV/bin/python"'): (
        "sets a shell's environment; the Spark tests set PYSPARK_PYTHON the same way"
    ),
    ("docs/conformance.md", 'pytest tests -k "not spark'): "runs a plugin's own test suite",
    ("docs/development.md", "scripts/services start [SERVICE...]"): (
        "starts and stops the shared services (tests use them through scripts/services)"
    ),
    ("docs/development.md", "scripts/services stop postgres && rm -rf"): (
        "deletes a service's data"
    ),
    ("docs/development.md", ".venv/bin/python -m pytest tests/integration -q"): "a test run",
    ("docs/development.md", "./scripts/test --extended"): "the whole suite",
    ("docs/development.md", ".venv/bin/mkdocs serve"): (
        "a server; scripts/test builds the site with mkdocs build --strict"
    ),
    ("docs/entry-points.md", "start-connect-server.sh"): (
        "starts a Spark Connect server; tests/e2e/connect_server.py starts one the same way"
    ),
    ("docs/entry-points.md", "python examples/orders_foreach_batch.py /tmp/orders-fb       #"): (
        "run by tests/e2e/test_entry_point_examples.py"
    ),
    ("docs/entry-points.md", "--remote sc://localhost:15002"): (
        "run by tests/e2e/test_entry_point_examples.py against a real Connect server"
    ),
    ("docs/kafka-to-kafka.md", "examples/kafka_access_log_counts.py --bootstrap"): (
        "needs Spark's Kafka source from Maven; tests/e2e/test_kafka_spark.py runs the example"
    ),
    ("docs/outbox.md", "examples/orders_outbox.py --produce 1000"): (
        "starts services and runs Spark with its Kafka source from Maven; "
        "tests/e2e/test_orders_outbox_example.py runs the example"
    ),
    ("docs/outbox.md", 'TWOPC_FAULTS="after_last_resource:kill@batch=1"'): (
        "SIGKILLs a Spark driver; tests/e2e/test_orders_outbox_example.py runs the example "
        "through that crash and the restart"
    ),
    ("docs/kafka-to-kafka.md", "kafka-consumer-groups.sh --bootstrap-server broker:9092"): (
        "the broker's tool; tests/harness/kafka_topics.py runs it through "
        "scripts/services kafka-consumer-groups"
    ),
    ("docs/troubleshooting.md", "kafka-consumer-groups.sh --bootstrap-server broker:9092"): (
        "a query id placeholder; tests/harness/kafka_topics.py runs the tool through "
        "scripts/services kafka-consumer-groups"
    ),
}


def _claims() -> dict[tuple[str, str], str]:
    claims: dict[tuple[str, str], str] = {}
    for table, what in ((LOCAL, "local"), (CHECKED, "checked"), (SKIPPED, "skipped")):
        for key in table:
            assert key not in claims, f"{key} is claimed twice"
            claims[key] = what
    return claims


@pytest.mark.unit
def test_every_snippet_is_claimed() -> None:
    claims = _claims()
    owners: dict[Block, list[tuple[str, str]]] = {b: [] for b in code_blocks()}
    unused = []
    for page, marker in claims:
        hits = [b for b in owners if b.page == page and marker in b.code]
        if len(hits) != 1:
            unused.append(f"{page}: {marker!r} finds {len(hits)} blocks")
        for block in hits:
            owners[block].append((page, marker))
    unclaimed = [str(b) for b, keys in owners.items() if not keys]
    twice = [f"{b}: {keys}" for b, keys in owners.items() if len(keys) > 1]
    assert not unclaimed, (
        "snippets neither run nor listed: run them in tests/unit/test_doc_snippets.py "
        f"(LOCAL or CHECKED) or list them in SKIPPED with the reason: {unclaimed}"
    )
    assert not unused, f"entries that do not find exactly one snippet: {unused}"
    assert not twice, f"snippets claimed by more than one entry: {twice}"


RUNS = "tests.e2e.test_doc_snippets_run"
"""The module of the checks that need Spark or the services."""


@pytest.mark.unit
def test_checks_name_existing_tests() -> None:
    runs = importlib.import_module(RUNS)
    missing = {
        name
        for name in CHECKED.values()
        if not callable(globals().get(name)) and not callable(getattr(runs, name, None))
    }
    assert not missing, f"CHECKED names tests that exist neither here nor in {RUNS}: {missing}"


@pytest.mark.unit
def test_only_known_languages() -> None:
    unknown = {f"{b}" for b in all_blocks() if b.lang not in CODE | OUTPUT}
    assert not unknown, f"code blocks of an unknown language (add it to CODE or OUTPUT): {unknown}"


# -- local runs ---------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("key", list(LOCAL), ids=lambda key: f"{key[0]}:{key[1][:30]}")
def test_local_snippet_runs(key: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    spec = LOCAL[key]
    block = find(*key)
    code = replaced(block.code, spec.replace)
    if spec.upto is not None:
        assert spec.upto in code, f"{spec.upto!r} is no longer in {block}"
        code = code[: code.index(spec.upto)]
    for name, value in spec.env.items():
        monkeypatch.setenv(name, value)
    twopc_logger = logging.getLogger("twopc")
    level = twopc_logger.level
    module = types.ModuleType("doc_snippet")  # dataclasses look their module up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    try:
        namespace = run(spec.prelude, module.__dict__, "prelude")
        run(code, namespace, str(block))
        run(spec.after, namespace, f"check of {block}")
    finally:
        twopc_logger.setLevel(level)


# -- checked against the code -------------------------------------------------------------


@pytest.mark.unit
def test_write_batch_signature() -> None:
    """The signature the page prints is the function's."""
    printed = " ".join(find("docs/entry-points.md", "twopc.write_batch(df, sink").code.split())
    actual = inspect.signature(twopc.write_batch)
    params = []
    for p in actual.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not any(q == "*" for q in params):
            params.append("*")
        params.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    expected = f"twopc.write_batch({', '.join(params)}) -> twopc.{actual.return_annotation}"
    assert printed == expected


@pytest.mark.unit
def test_quickstart_lists_every_foreach_batch_option() -> None:
    """The quick start's table of foreach_batch options names every keyword option."""
    text = (REPO / "docs" / "quickstart.md").read_text()
    table = text[text.index("Keyword options of `foreach_batch`") :].split("\n\n")[1]
    listed = re.findall(r"^\| `(\w+)` \|", table, flags=re.MULTILINE)
    keywords = [
        p.name
        for p in inspect.signature(twopc.foreach_batch).parameters.values()
        if p.kind is p.KEYWORD_ONLY
    ]
    assert listed == keywords


@pytest.mark.unit
def test_kafka_to_kafka_snippet_calls_the_example() -> None:
    """The snippet needs Spark's Kafka source (from Maven), so it is not run here; what it
    takes from the example exists, and its calls bind to the example's signatures."""
    block = find("docs/kafka-to-kafka.md", "from examples.kafka_access_log_counts import")
    tree = ast.parse(block.code)
    example = importlib.import_module("examples.kafka_access_log_counts")
    imported = {
        alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == example.__name__
        for alias in node.names
    }
    assert imported == {"access_log", "window_counts"}
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in imported
    ]
    assert {call.func.id for call in calls} == imported  # type: ignore[attr-defined]
    for call in calls:
        signature = inspect.signature(getattr(example, call.func.id))  # type: ignore[attr-defined]
        signature.bind(*call.args, **{k.arg: k.value for k in call.keywords if k.arg})


@pytest.mark.unit
def test_protobuf_sink_snippet(monkeypatch: pytest.MonkeyPatch) -> None:
    """``value_schema`` names a generated class that must import where the sink is made:
    ``shop.orders_pb2`` stands in with a message class built at runtime."""
    from tests.harness.registry_protos import Order

    module = types.ModuleType("shop.orders_pb2")
    module.Order = Order  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "shop", types.ModuleType("shop"))
    monkeypatch.setitem(sys.modules, "shop.orders_pb2", module)
    block = find("docs/backends/kafka.md", 'value_schema="shop.orders_pb2:Order"')
    run(block.code, {"twopc": twopc}, str(block))


@pytest.mark.unit
def test_value_serializer_snippets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The serializer module as the page prints it, imported under its name; the sink that
    names it; and the factory builds its serializer (no request to the registry yet)."""
    serializers = find("docs/backends/kafka.md", "# my_pipeline/serializers.py")
    module = types.ModuleType("my_pipeline.serializers")
    run(serializers.code, module.__dict__, str(serializers))
    monkeypatch.setitem(sys.modules, "my_pipeline", types.ModuleType("my_pipeline"))
    monkeypatch.setitem(sys.modules, "my_pipeline.serializers", module)
    sink = find("docs/backends/kafka.md", 'value_serializer="my_pipeline.serializers:orders_avro"')
    run(sink.code, {"twopc": twopc}, str(sink))
    assert callable(module.orders_avro())


@pytest.mark.unit
def test_own_exporter_snippet() -> None:
    """``to_statsd`` reports every instrument of the catalog for a real ``BatchMetrics``."""
    block = find("docs/metrics.md", "def to_statsd(m: twopc.BatchMetrics)")
    calls: list[tuple[str, str, float, dict[str, str]]] = []

    class StatsD:
        def __getattr__(self, kind: str) -> Callable[..., None]:
            return lambda name, value, tags: calls.append((kind, name, value, tags))

    namespace = run(block.code, {"twopc": twopc, "statsd": StatsD()}, str(block))
    metrics = twopc.BatchMetrics(
        "orders", "q", 4, twopc.BatchStatus.COMMITTED, backend="files", partitions=2, rows=10
    )
    namespace["to_statsd"](metrics)
    names = {name for _, name, _, _ in calls}
    assert {kind for kind, *_ in calls} <= {"increment", "histogram", "gauge"}
    assert any(tags.get("sink") == "orders" for *_, tags in calls)
    assert any("rows" in name for name in names), names


@pytest.mark.unit
def test_ops_assets_snippet() -> None:
    """The dashboard and the rules read from the installed package, as the docs show."""
    block = find("docs/metrics.md", 'assets = files("twopc.metrics") / "assets"')
    namespace = run(block.code, {}, str(block))
    assert json.loads(namespace["dashboard"])["uid"] == "twopc-sinks"
    assert "alert: TwopcInDoubtWorkOld" in namespace["rules"]


@pytest.mark.unit
def test_plugin_pyproject_snippet() -> None:
    block = find("docs/plugins.md", "# pyproject.toml of your distribution")
    entry_points = tomllib.loads(block.code)["project"]["entry-points"]
    assert list(entry_points) == ["twopc"]  # the group twopc's registry reads


@pytest.mark.unit
def test_fault_plan_snippets() -> None:
    block = find("docs/concepts.md", 'TWOPC_FAULTS="between_commits:kill@batch=2"')
    plans = re.findall(r'^TWOPC_FAULTS="([^"]+)"$', block.code, flags=re.MULTILINE)
    assert len(plans) == 3
    for plan in plans:
        assert twopc.FaultPlan.parse(plan).faults


@pytest.mark.unit
def test_twopc_commands_parse() -> None:
    """Every ``twopc`` command these blocks show is accepted by the real command line."""
    from twopc.cli import build_parser

    blocks = [find(*key) for key, test in CHECKED.items() if test == "test_twopc_commands_parse"]
    for block in blocks:
        commands = [c for c in commands_of(block) if c[0] == "twopc"]
        assert commands, f"{block} shows no twopc command"
        for command in commands:
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    build_parser().parse_args(command[1:])
            except SystemExit as exc:  # --version prints and exits 0: accepted
                if exc.code != 0:
                    raise AssertionError(f"{block}: {shlex.join(command)} is refused") from exc


# -- pages that state facts of the code ---------------------------------------------------


def _declared_floors() -> set[tuple[str, str, str]]:
    """(package, lowest version, where) for every ``>=`` bound of the core and of the
    extras ``all`` and ``bench`` reach, as ``scripts/lowest-versions`` checks them."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def reached(extra: str) -> set[str]:
        found = {extra}
        for text in extras[extra]:
            requirement = Requirement(text)
            if requirement.name == "twopc":
                for nested in requirement.extras:
                    found |= reached(nested)
        return found

    floors: set[tuple[str, str, str]] = {("python", project["requires-python"][2:], "core")}
    sources = [("core", text) for text in project["dependencies"]]
    for extra in sorted(reached("all") | reached("bench")):
        sources += [(extra, text) for text in extras[extra]]
    for where, text in sources:
        requirement = Requirement(text)
        for spec in requirement.specifier:
            if spec.operator == ">=" and requirement.name != "twopc":
                floors.add((str(canonicalize_name(requirement.name)), spec.version, where))
    return floors


@pytest.mark.unit
def test_compatibility_lists_the_declared_lower_bounds() -> None:
    """docs/compatibility.md's table of lowest versions is pyproject.toml's."""
    from packaging.utils import canonicalize_name

    text = (REPO / "docs" / "compatibility.md").read_text()
    section = text[text.index("## The oldest versions allowed") :]
    section = section[: section.index("\n## ", 1)]
    shown: set[tuple[str, str, str]] = set()
    for row in re.findall(r"^\| (?!dependency|---)(.+?) \| (.+?) \| (.+?) \|", section, re.M):
        names, version, places = row
        version = version.split(" (")[0]
        for name in names.split(", "):
            package = str(canonicalize_name(re.sub(r"\[.*\]", "", name)))
            for where in places.replace("`", "").split(", "):
                shown.add((package, version, where))
    assert shown == _declared_floors()


@pytest.mark.unit
def test_readme_names_every_user_extra() -> None:
    """The README's install line names every extra a user installs (not the project's own
    ``docs``, ``bench`` and ``dev``)."""
    text = (REPO / "README.md").read_text()
    line = " ".join(
        text[text.index("Install into your own environment") :].split("\n\n")[0].split()
    )
    named = set(re.findall(r"`(\w+)`", line)) | set(
        re.search(r"twopc\[([\w,]+)\]", line)[1].split(",")
    )
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(extras) - {"docs", "bench", "dev"} <= named
