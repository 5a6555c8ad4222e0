"""Bad input to the SQL sinks on real PostgreSQL and MariaDB (issue 28): passwords with
URL delimiters, timestamps of the other time-zone kind than their column, and numbers a
column cannot hold exactly.

Every test reads the target back. Where a password is involved, it checks that no piece of
it (4 characters or more) appears in the error, its ``repr``, the exceptions chained to it,
the log records at DEBUG (twopc's and the drivers') or the command line's output.
Option checks that need no server are in ``tests/unit/test_sql_options.py``, URL parsing in
``tests/unit/test_sql_dsn.py``.
"""

from __future__ import annotations

import datetime as dt
import logging
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import psycopg
import pyarrow as pa
import pytest

import twopc
from tests.harness.sink_errors import exception_texts
from tests.harness.sql_servers import MariaDb, PostgresDb
from tests.harness.sql_sink_cases import (
    MODES,
    Db,
    Env,
    assert_names_task,
    batch,
    in_task,
    table_of,
    write,
    write_and_commit,
)
from twopc.cli import main
from twopc.local import LocalEngine

pytestmark = pytest.mark.integration


def backend(db: Db) -> str:
    return "postgres" if isinstance(db, PostgresDb) else "mysql"


def log_everything(caplog: pytest.LogCaptureFixture) -> None:
    """DEBUG for every logger; psycopg sets its own to WARNING."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="psycopg")


def logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every record caught, formatted with its exception and traceback."""
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(formatter.format(record) for record in caplog.records)


def assert_hidden(password: str, *texts: str) -> None:
    for text in texts:
        for i in range(len(password) - 3):
            piece = password[i : i + 4]
            assert piece not in text, f"{piece!r} of the password in: {text}"


# -- 1. credentials -------------------------------------------------------------------------

# wrong passwords (the server's is "twopc"), each with URL delimiters
PASSWORDS = ["Zq9#Xv7k", "Wk4/Jp8q", "Wk4?Jp8q", "Mn6@Rt2y", "Mn6:Rt2y", "Pq5%Ls3z",
             "Hx#/?@:%9 ;&=+k"]  # fmt: skip


def written_forms(password: str) -> list[str]:
    """Percent-encoded always works; '@', ':' and '%' may also be written as they are."""
    forms = [quote(password, safe="")]
    if not set(password) & set("#/?"):
        forms.append(password)
    return forms


def refusal(db: Db) -> str:
    """What the server answers a wrong password: it names the user, never the password."""
    if isinstance(db, PostgresDb):
        port = urlsplit(db.dsn).port  # the services' port (alternate ones too)
        return (
            f'connection failed: connection to server at "127.0.0.1", port {port} failed: '
            'FATAL:  password authentication failed for user "twopc"'
        )
    return "(1045) Access denied for user 'twopc'@'127.0.0.1' (using password: YES)"


@pytest.mark.parametrize(
    ("password", "written"), [(p, w) for p in PASSWORDS for w in written_forms(p)]
)
def test_a_wrong_password_with_delimiters_is_never_shown(
    db: Db, env: Env, caplog: pytest.LogCaptureFixture, password: str, written: str
) -> None:
    log_everything(caplog)
    dsn = db.dsn.replace(":twopc@", f":{written}@")
    where = dsn.rsplit("@", 1)[1]
    sink = env.sink(env.table(), dsn=dsn, transaction_mode="two_phase")
    assert sink.settings.password == password
    sid = env.sink_id()
    ctx = env.ctx(sid, batch_id=1, partition=2)
    with pytest.raises(twopc.PermanentSinkError) as task, in_task(ctx):
        sink.begin_transaction(ctx)
    assert str(task.value) == (
        f"sink {sid!r}, batch 1, partition 2: cannot connect to twopc@{where}: {refusal(db)}"
    )
    # the driver runs recovery first, on its own connection
    with pytest.raises(twopc.PermanentSinkError) as driver:
        env.coordinator(sink, sid).run_batch(
            env.query_id, 5, LocalEngine([table_of(batch(id=[1]))], processes=False)
        )
    assert str(driver.value) == (
        f"sink {sid!r}: recovery cannot list prepared transactions: cannot connect to "
        f"twopc@{where}: {refusal(db)}"
    )
    if isinstance(db, PostgresDb):
        assert "connection failed" in caplog.text  # psycopg's own record, at DEBUG
    assert_hidden(
        password,
        *exception_texts(task.value),
        *exception_texts(driver.value),
        logged(caplog),
        repr(sink),
        sink.describe(),
    )


def test_twopc_status_never_prints_the_password(
    db: Db, env: Env, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    password = "Hx#/?@:%9 ;&=+k"
    for written, code in ((quote(password, safe=""), 1), (password, 2)):
        dsn = db.dsn.replace(":twopc@", f":{written}@")
        args = ["status", backend(db), "--sink-id", env.sink_id(), "--commit-log"]
        args += [str(tmp_path / "log"), "--option", f"dsn={dsn}", "--option"]
        args += [f"table={env.table()}", "--option", "transaction_mode=two_phase"]
        assert main(args) == code
        out = capsys.readouterr()
        expected = refusal(db) if code == 1 else "dsn contains '#'"
        assert expected in out.err, out.err
        assert_hidden(password, out.out, out.err)


def test_a_percent_encoded_password_reaches_the_server_decoded(db: Db, env: Env) -> None:
    """``tw%6Fpc`` is the server's password ``twopc``: the sink connects and writes."""
    table = env.table()
    db.create(table, "id bigint PRIMARY KEY")
    sink = env.sink(table, dsn=db.dsn.replace(":twopc@", ":tw%6Fpc@"))
    assert write_and_commit(sink, env.ctx(env.sink_id()), batch(id=[7])) == [
        twopc.CommitOutcome.COMMITTED
    ]
    assert db.rows(table) == [(7,)]


# -- 2. timestamps of the other time-zone kind ---------------------------------------------

AWARE = [
    dt.datetime(2024, 7, 1, 12, 0, tzinfo=dt.UTC),
    dt.datetime(2024, 11, 3, 5, 30, 0, 123456, tzinfo=dt.UTC),  # 01:30 EDT in New York
    dt.datetime(2024, 11, 3, 6, 10, tzinfo=dt.UTC),  # 01:10 EST, after the clocks went back
    dt.datetime(1901, 1, 1, tzinfo=dt.UTC),
]
NAIVE = [
    dt.datetime(2024, 1, 15, 12, 0),
    dt.datetime(2024, 3, 10, 2, 30),  # does not exist in New York
    dt.datetime(2024, 11, 3, 1, 30, 0, 654321),  # exists twice in New York
    dt.datetime(1901, 1, 1),
]


def zoned_data() -> pa.RecordBatch:
    """Spark's TimestampType arrives with the session time zone (here Asia/Kolkata): the
    values are instants whatever the zone says."""
    return pa.RecordBatch.from_pydict(
        {
            "id": pa.array(range(len(AWARE)), pa.int64()),
            "plain": pa.array(AWARE, pa.timestamp("us", tz="UTC")).cast(
                pa.timestamp("us", tz="Asia/Kolkata")
            ),
            "zoned": pa.array(NAIVE, pa.timestamp("us")),
        }
    )


def in_utc(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Aware datetimes in UTC: Python never finds a time of a repeated hour (``fold=1``)
    equal to one in another zone, even the same instant."""
    return [
        tuple(v.astimezone(dt.UTC) if isinstance(v, dt.datetime) and v.tzinfo else v for v in r)
        for r in rows
    ]


def server_casts(dsn: str, zone: str) -> list[tuple[Any, ...]]:
    """What PostgreSQL itself makes of the values in a session with TimeZone ``zone``:
    ``timestamptz::timestamp`` and ``timestamp::timestamptz``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('TimeZone', %s, false)", (zone,))
        return [
            (
                i,
                conn.execute("SELECT %s::timestamptz::timestamp", (aware,)).fetchone()[0],
                conn.execute("SELECT %s::timestamp::timestamptz", (naive,)).fetchone()[0],
            )
            for i, (aware, naive) in enumerate(zip(AWARE, NAIVE, strict=True))
        ]


@pytest.mark.parametrize("db", ["postgres"], indirect=True)
@pytest.mark.parametrize("tm", MODES)
@pytest.mark.parametrize("mode", ["append", "upsert"])
@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_postgres_converts_timestamps_as_its_own_casts_do(
    db: Db, env: Env, tm: str, mode: str, zone: str
) -> None:
    table = env.table()
    db.create(table, "id bigint PRIMARY KEY, plain timestamp, zoned timestamptz")
    options: dict[str, Any] = {"transaction_mode": tm, "mode": mode}
    if mode == "upsert":
        options["key_columns"] = ["id"]
        db.execute(f"INSERT INTO {db.q(table)} (id) VALUES (0)")  # updated by the batch
    if zone != "UTC":
        options["connect_options"] = {"options": f"-c TimeZone={zone}"}
    sink = env.sink(table, **options)
    sid = env.sink_id()
    assert write_and_commit(sink, env.ctx(sid), zoned_data()) == [twopc.CommitOutcome.COMMITTED]
    assert in_utc(db.rows(table)) == in_utc(server_casts(db.dsn, zone))
    assert zone == "UTC" or db.rows(table)[0][1] == dt.datetime(2024, 7, 1, 8, 0)
    leftovers = db.query(
        "SELECT tablename FROM pg_tables WHERE tablename LIKE 'twopc\\_conv\\_%%' "
        "OR tablename LIKE 'twopc\\_stage\\_%%'"
    )
    assert leftovers == []
    assert env.prepared(sid) == []


@pytest.mark.parametrize("db", ["postgres"], indirect=True)
@pytest.mark.parametrize("tm", MODES)
def test_postgres_conversion_failure_leaves_nothing(db: Db, env: Env, tm: str) -> None:
    """A converted value the column cannot take (year 294276 is past timestamp's range
    in no zone; here a NOT NULL violation) fails the batch like any other bad row."""
    table = env.table()
    db.create(table, "id bigint PRIMARY KEY, plain timestamp NOT NULL")
    sink = env.sink(table, transaction_mode=tm)
    sid = env.sink_id()
    data = pa.RecordBatch.from_pydict(
        {
            "id": pa.array([1, 2], pa.int64()),
            "plain": pa.array([AWARE[0], None], pa.timestamp("us", tz="UTC")),
        }
    )
    with pytest.raises(twopc.PermanentSinkError) as caught:
        write(sink, env.ctx(sid, batch_id=3, partition=1), data)
    assert_names_task(caught.value, sid, 3, 1)
    assert 'null value in column "plain"' in str(caught.value)
    assert db.count(table) == 0
    assert db.markers(env.marker_table, sid) == []
    assert env.prepared(sid) == []


@pytest.mark.parametrize("db", ["mariadb"], indirect=True)
@pytest.mark.parametrize("tm", MODES)
@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_mariadb_writes_timestamps_as_utc_wall_clock(db: Db, env: Env, tm: str, mode: str) -> None:
    """Aware values become UTC wall-clock time; naive ones are written as they are. A
    ``TIMESTAMP`` column reads either in the session's time zone, UTC by the sink's
    default ``init_command``."""
    table = env.table()
    db.create(
        table,
        "id bigint PRIMARY KEY, a_dt DATETIME(6), a_ts TIMESTAMP(6) NULL, "
        "n_dt DATETIME(6), n_ts TIMESTAMP(6) NULL",
    )
    data = zoned_data()
    data = pa.RecordBatch.from_pydict(
        {
            "id": data.column("id"),
            "a_dt": data.column("plain"),
            "a_ts": data.column("plain"),
            "n_dt": data.column("zoned"),
            "n_ts": data.column("zoned"),
        }
    )
    keys = {"key_columns": ["id"]} if mode == "upsert" else {}
    sink = env.sink(table, transaction_mode=tm, mode=mode, **keys)
    write_and_commit(sink, env.ctx(env.sink_id()), data.slice(1, 2))  # TIMESTAMP: from 1970
    rows = db.query(
        f"SELECT id, a_dt, UNIX_TIMESTAMP(a_ts), n_dt, UNIX_TIMESTAMP(n_ts) "
        f"FROM {db.q(table)} ORDER BY id"
    )
    expected = []
    for i in range(1, 3):
        utc = AWARE[i].replace(tzinfo=None)
        naive_epoch = NAIVE[i].replace(tzinfo=dt.UTC).timestamp()
        expected.append(
            (
                i,
                utc,
                Decimal(f"{AWARE[i].timestamp():.6f}"),
                NAIVE[i],
                Decimal(f"{naive_epoch:.6f}"),
            )
        )
    assert rows == expected


# -- 3. numbers a column cannot hold exactly ------------------------------------------------

NUMBERS = "id bigint PRIMARY KEY, amount numeric(5,2), qty integer, v varchar(20)"


def numbers(db: Db) -> str:
    return NUMBERS.replace("numeric", "decimal") if isinstance(db, MariaDb) else NUMBERS


def type_names(db: Db) -> tuple[str, str]:
    return (
        ("numeric(5,2)", "integer") if isinstance(db, PostgresDb) else ("decimal(5,2)", "int(11)")
    )


def amounts(values: list[Any], precision: int = 10, scale: int = 3) -> pa.Array:
    if values and isinstance(values[0], float):
        return pa.array(values, pa.float64())
    return pa.array(
        [None if v is None else Decimal(v) for v in values], pa.decimal128(precision, scale)
    )


SCALE_2 = (
    "has more fractional digits than the column's scale 2 (writing it would round it); round "
    "the value in the query (e.g. F.round(column, 2)), or give the column a larger scale"
)
WHOLE = (
    "is not a whole number, and an integer column cannot hold it without rounding; round the "
    "value in the query, or make the column a decimal one"
)


@pytest.mark.parametrize("tm", MODES)
@pytest.mark.parametrize("mode", ["append", "upsert"])
@pytest.mark.parametrize(
    "case",
    [
        ("amount", amounts(["1.230", "1.239"]), "1.239", SCALE_2),
        ("amount", amounts([1.24, 1.239]), "1.239", SCALE_2),
        ("amount", amounts([1.0, 0.1 + 0.2]), "0.30000000000000004", SCALE_2),
        (
            "amount", amounts(["999.99", "1234.5"]), "1234.500",
            "is too large: {amount} holds less than 1000 in absolute value; give the column a "
            "larger precision, or filter or scale the value in the query",
        ),
        (
            "amount", amounts([1.0, float("nan")]), "nan",
            "is not a finite number, which {amount} cannot hold",
        ),
        ("qty", amounts([3.0, 2.5]), "2.5", WHOLE),
        ("qty", amounts(["2.000", "7.100"]), "7.100", WHOLE),
    ],
)  # fmt: skip
def test_a_number_the_column_cannot_hold_exactly_fails_the_batch(
    db: Db, env: Env, tm: str, mode: str, case: tuple[str, pa.Array, str, str]
) -> None:
    column, values, shown, why = case
    table = env.table()
    db.create(table, numbers(db))
    db.execute(f"INSERT INTO {db.q(table)} (id, v) VALUES (1, 'before')")
    keys = {"key_columns": ["id"]} if mode == "upsert" else {}
    sink = env.sink(table, transaction_mode=tm, mode=mode, **keys)
    sid = env.sink_id()
    good = batch(id=[10], v=["fits"], **{column: values.slice(0, 1)})
    bad = batch(
        id=[11, 12],
        v=["a", "b"],
        **{column: pa.concat_arrays([values.slice(0, 1), values.slice(1, 1)])},
    )
    with pytest.raises(twopc.PermanentSinkError) as caught:
        write(sink, env.ctx(sid, batch_id=4, partition=3), good, bad)
    amount, qty = type_names(db)
    kind = amount if column == "amount" else qty
    assert str(caught.value) == (
        f"sink {sid!r}, batch 4, partition 3: column {column!r} of table {table} is {kind}: the "
        f"value {shown} (row 2 of the partition) {why.format(amount=amount)}"
    )
    assert db.rows(table) == [(1, None, None, "before")]
    assert db.markers(env.marker_table, sid) == []
    assert env.prepared(sid) == []


@pytest.mark.parametrize("tm", MODES)
@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_numbers_the_column_holds_exactly_are_written(db: Db, env: Env, tm: str, mode: str) -> None:
    table = env.table()
    db.create(table, numbers(db))
    keys = {"key_columns": ["id"]} if mode == "upsert" else {}
    sink = env.sink(table, transaction_mode=tm, mode=mode, **keys)
    data = [
        batch(id=[1, 2], amount=amounts(["1.230", "-999.990"]), qty=amounts(["2.000", "-5.000"])),
        batch(id=[3, 4], amount=amounts([1.24, 0.5]), qty=amounts([3.0, -2e9])),
    ]
    write_and_commit(sink, env.ctx(env.sink_id()), *data)
    assert db.query(f"SELECT id, amount, qty FROM {db.q(table)} ORDER BY id") == [
        (1, Decimal("1.23"), 2),
        (2, Decimal("-999.99"), -5),
        (3, Decimal("1.24"), 3),
        (4, Decimal("0.50"), -2_000_000_000),
    ]


@pytest.mark.parametrize("tm", MODES)
def test_rows_that_delete_are_judged_too(db: Db, env: Env, tm: str) -> None:
    """They pass through the staging table, which has the target's column types."""
    table = env.table()
    db.create(table, numbers(db))
    db.execute(f"INSERT INTO {db.q(table)} (id, amount) VALUES (1, 1.5), (2, 2.5)")
    sink = env.sink(table, transaction_mode=tm, mode="upsert", key_columns=["id"],
                    delete_column="gone")  # fmt: skip
    data = batch(id=[1, 2], amount=amounts(["9.999", "3.000"]), gone=[True, False])
    with pytest.raises(twopc.PermanentSinkError, match=r"the value 9\.999 \(row 0 of the"):
        write(sink, env.ctx(env.sink_id()), data)
    rows = f"SELECT id, amount FROM {db.q(table)} ORDER BY id"
    assert db.query(rows) == [(1, Decimal("1.50")), (2, Decimal("2.50"))]
    data = batch(id=[1, 2], amount=amounts(["9.990", "3.000"]), gone=[True, None])
    write_and_commit(sink, env.ctx(env.sink_id("b")), data)
    assert db.query(rows) == [(2, Decimal("3.00"))]


def test_a_bad_number_in_one_partition_of_a_two_phase_batch_leaves_nothing(
    db: Db, env: Env
) -> None:
    table = env.table()
    db.create(table, numbers(db))
    sink = env.sink(table, transaction_mode="two_phase")
    sid = env.sink_id()
    parts = [
        table_of(batch(id=[1, 2], amount=amounts(["1.000", "2.000"]))),
        table_of(batch(id=[3], amount=amounts([0.1 + 0.2]))),
    ]
    with pytest.raises(twopc.TwoPCError) as caught:
        env.coordinator(sink, sid).run_batch(env.query_id, 0, LocalEngine(parts, processes=False))
    assert "the value 0.30000000000000004 (row 0 of the partition)" in str(caught.value)
    assert db.count(table) == 0
    assert db.markers(env.marker_table, sid) == []
    assert env.prepared(sid) == []
