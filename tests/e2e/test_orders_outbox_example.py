"""The transactional-outbox example (``examples/orders_outbox.py``) on real Spark, Kafka and
PostgreSQL: orders from a topic into a table (``two_phase``) and an outbox topic (Kafka
``atomic``, the group's last resource), one decision per batch.

The example's query runs in a child process (its own driver, so that it can be SIGKILLed
at a crash point and restarted from its checkpoint) with Spark's Kafka source resolved as
for the other Kafka e2e tests. What is checked is what the targets show: the table's rows
with ``SELECT``, the outbox with a ``read_committed`` consumer, nothing left prepared in
PostgreSQL or open in Kafka; and the example's own verdict agrees.
"""

from __future__ import annotations

import json
import signal
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import examples.orders_outbox as example
import psycopg
import pytest
from psycopg import sql

from tests.harness.doc_snippets import find
from tests.harness.kafka_topics import read_messages
from tests.harness.processes import RunResult, run_process
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import KafkaTarget, SqlTarget
from twopc.groups import member_sink_id

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

ORDERS, PER_TRIGGER, CRASH_BATCH = 600, 150, 1
"""600 orders, at most 150 per micro-batch: 4 batches or more; the crash is in batch 1."""

CHILD = (
    "import sys\n"
    "from tests.e2e.test_orders_outbox_example import run_example\n"
    "sys.exit(run_example(sys.argv[1:]))\n"
)


def run_example(argv: list[str]) -> int:
    """The example's ``run`` (query, then verdict) in this process, on a session with
    Spark's Kafka source as ``tests/harness/spark_kafka_job.py`` resolves it."""
    from tests.harness.spark_kafka_job import kafka_source_session

    args = example.parse_args(argv)
    try:
        spark = kafka_source_session()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 3
    spark.sparkContext.setLogLevel("ERROR")
    try:
        return example.run(spark, args)
    finally:
        spark.stop()


@dataclass(frozen=True)
class Outbox:
    """One test's topics, table, sink id and checkpoint."""

    bootstrap: str
    dsn: str
    input: str
    outbox: str
    table: str
    sink_id: str
    checkpoint: str

    def args(self) -> list[str]:
        return [
            *("--bootstrap", self.bootstrap, "--dsn", self.dsn),
            *("--input", self.input, "--outbox", self.outbox, "--table", self.table),
            *("--checkpoint", self.checkpoint, "--sink-id", self.sink_id),
            *("--max-offsets-per-trigger", str(PER_TRIGGER)),
        ]

    def run(self, faults: str | None = None) -> RunResult:
        """The example's query in its own process (``faults``: a ``TWOPC_FAULTS`` plan)."""
        return run_process(["-c", CHILD, *self.args()], faults=faults, timeout=300)

    def table_recipe(self) -> SinkRecipe:
        sink_id = member_sink_id(self.sink_id, "orders")
        return SinkRecipe("postgres", "two_phase", sink_id, self.dsn, self.table)

    def topic_recipe(self, topic: str) -> SinkRecipe:
        sink_id = member_sink_id(self.sink_id, "events")
        return SinkRecipe("kafka", "atomic", sink_id, self.bootstrap, topic)

    def rows(self) -> list[tuple[int, str, float]]:
        """``(order_id, customer, amount)`` of every row of the table."""
        query = sql.SQL("SELECT order_id, customer, amount FROM {}").format(
            sql.Identifier(self.table)
        )
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return [(int(i), str(c), float(a)) for i, c, a in conn.execute(query)]

    def events(self) -> list[tuple[int, dict[str, object]]]:
        """``(key, value)`` of every outbox record a ``read_committed`` consumer sees."""
        return [
            (int(m.text_key), json.loads(m.value or b""))
            for m in read_messages(self.bootstrap, self.outbox, "read_committed")
        ]

    def table_ids(self) -> Counter[int]:
        return Counter(row[0] for row in self.rows())

    def event_ids(self) -> Counter[int]:
        return Counter(key for key, _ in self.events())


@pytest.fixture
def outbox(kafka_bootstrap: str, postgres_dsn: str, tmp_path: Path) -> Iterator[Outbox]:
    tag = uuid.uuid4().hex[:10]
    setup = Outbox(
        kafka_bootstrap,
        postgres_dsn,
        f"orders-{tag}",
        f"order-events-{tag}",
        f"orders_{tag}",
        f"orders-outbox-{tag}",
        str(tmp_path / "chk"),
    )
    yield setup
    table = SqlTarget("postgres", postgres_dsn)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for gid in table.prepared(setup.table_recipe().sink_id):  # would block DROP TABLE
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
    table.cleanup(setup.table_recipe())  # the table and the sink's marker rows
    kafka = KafkaTarget(kafka_bootstrap)
    kafka.forget_markers(setup.topic_recipe(setup.outbox))  # the Kafka marker groups
    for topic in (setup.input, setup.outbox):
        kafka.cleanup(setup.topic_recipe(topic))


def _produce(outbox: Outbox) -> None:
    assert example.main([*outbox.args(), "--produce", str(ORDERS)]) == 0


def _committed_batches(run: RunResult) -> list[int]:
    return [e["batch"] for e in run.of("batch") if e["status"] == "committed"]


def _assert_every_order_once(outbox: Outbox) -> None:
    """Each order once in the table and once in the outbox, with the columns each target
    gets; nothing prepared in PostgreSQL or open in Kafka; the example's verdict is OK."""
    rows = outbox.rows()
    assert Counter(row[0] for row in rows) == Counter(range(ORDERS))
    for order_id, customer, amount in rows:
        expected = example.order(order_id)
        assert (customer, amount) == (expected["customer"], expected["amount"]), order_id
    events = outbox.events()
    assert Counter(key for key, _ in events) == Counter(range(ORDERS))
    for key, value in events:
        assert value == {
            "type": "order_placed",
            "order_id": key,
            "amount": example.order(key)["amount"],
        }
    assert SqlTarget("postgres", outbox.dsn).leftovers(outbox.table_recipe()) == []
    assert KafkaTarget(outbox.bootstrap).leftovers(outbox.topic_recipe(outbox.outbox)) == []
    verdict = example.verify(
        bootstrap=outbox.bootstrap,
        dsn=outbox.dsn,
        input_topic=outbox.input,
        outbox=outbox.outbox,
        table=outbox.table,
    )
    assert verdict.ok, verdict.lines()


def test_the_docs_page_shows_the_examples_group() -> None:
    """docs/outbox.md's group definition is the example's, line for line."""
    block = find("docs/outbox.md", "twopc.SinkGroup(")
    source = Path(example.__file__).read_text()
    shown = block.code[: block.code.index("writer = ")]
    for line in shown.splitlines():
        assert line.strip() in source, f"docs/outbox.md shows {line.strip()!r}"


@pytest.mark.slow
@pytest.mark.extended  # CI: the same group killed on Spark in test_group_crash_matrix.py
def test_a_run_writes_every_order_once_to_the_table_and_the_outbox(
    outbox: Outbox, capsys: pytest.CaptureFixture[str]
) -> None:
    _produce(outbox)
    assert example.main([*outbox.args(), "--verify"]) == 1  # nothing written yet
    assert "exactly-once: FAILED" in capsys.readouterr().out

    run = outbox.run()
    assert run.returncode == 0, run.stderr[-4000:]  # 0: the example's verdict is OK
    assert len(_committed_batches(run)) >= 3, run.events
    _assert_every_order_once(outbox)


# --extended (65-105 s each on the 2-core machine: two Spark drivers): CI runs the clean run
# above, and the SIGKILL at after_last_resource of the same group shape on real Spark in
# tests/crash/test_group_crash_matrix.py
@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.parametrize(
    ("point", "replay"),
    [
        # Kafka (the decision) committed batch 1, PostgreSQL only prepared it: the restart
        # commits PostgreSQL, and Spark's replay of batch 1 is skipped
        ("after_last_resource", "skipped"),
        # PostgreSQL prepared batch 1, the Kafka transaction never ran: nothing decided, the
        # restart rolls PostgreSQL back, and the replay writes batch 1
        ("before_last_resource", "committed"),
    ],
)
def test_a_driver_killed_mid_run_then_restarted_writes_every_order_once(
    outbox: Outbox, point: str, replay: str
) -> None:
    _produce(outbox)
    crashed = outbox.run(faults=f"{point}:kill@batch={CRASH_BATCH}")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-4000:]
    assert _committed_batches(crashed) == list(range(CRASH_BATCH)), crashed.events

    in_table, in_outbox = outbox.table_ids(), outbox.event_ids()
    assert max(in_table.values()) == max(in_outbox.values()) == 1
    if point == "after_last_resource":
        # the window groups.md describes: decided, the table not yet committed
        assert set(in_table) < set(in_outbox), (len(in_table), len(in_outbox))
    else:
        assert set(in_table) == set(in_outbox)  # batch 0 in both, batch 1 in neither

    restarted = outbox.run()
    assert restarted.returncode == 0, restarted.stderr[-4000:]
    first = restarted.of("batch")[0]
    assert (first["batch"], first["status"]) == (CRASH_BATCH, replay), restarted.events
    _assert_every_order_once(outbox)
