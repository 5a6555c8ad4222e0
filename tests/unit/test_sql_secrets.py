"""Masking secrets in messages that leave the SQL sinks (``twopc_jdbc._secrets``): driver
messages that echo a connection URL, a conninfo string or an options mapping, and
exceptions chained to the sink's own errors. Against the real servers:
``tests/integration/test_sql_bad_input.py``."""

from __future__ import annotations

import psycopg
import pymysql
import pytest

import twopc
from twopc_jdbc._secrets import redact, scrub
from twopc_jdbc.postgres import PostgresSink

pytestmark = pytest.mark.unit

SECRET = "Hx#/?@:%9k"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"bad password {SECRET} given", "bad password *** given"),
        ("bad password Hx%23%2F%3F%40%3A%259k given", "bad password *** given"),
        (
            'invalid dsn: "postgresql://etl:other/x?y@db:5432/shop"',
            'invalid dsn: "postgresql://etl:***@db:5432/shop"',
        ),
        (
            "conninfo host=db password=ab12 user=etl; sslpassword = 'a b' port=1",
            "conninfo host=db password=*** user=etl; sslpassword = *** port=1",
        ),
        (
            "kwargs {'user': 'etl', 'password': 'a\\'b', \"passwd\": \"zz\"}",
            "kwargs {'user': 'etl', 'password': '***', \"passwd\": '***'}",
        ),
        ("nothing to hide at host db:5432", "nothing to hide at host db:5432"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text, [SECRET]) == expected


def test_scrub_masks_the_chain_in_place() -> None:
    inner = psycopg.OperationalError(f"could not connect: password={SECRET}")
    driver = pymysql.err.OperationalError(1045, f"echo {SECRET}")
    driver.__context__ = inner
    try:
        try:
            raise driver
        except pymysql.MySQLError as exc:
            raise twopc.PermanentSinkError(f"cannot connect: {exc}", sink_id="s") from exc
    except twopc.PermanentSinkError as caught:
        error = caught
    assert scrub(error, [SECRET]) is error
    assert str(error) == "sink 's': cannot connect: (1045, 'echo ***')"
    assert error.cause_message == "cannot connect: (1045, 'echo ***')"
    assert driver.args == (1045, "echo ***")
    assert str(inner) == "could not connect: password=***"
    assert error.__cause__ is driver  # the same objects, types and tracebacks
    assert error.__traceback__ is not None


def test_short_or_public_passwords_are_not_masked_as_plain_text() -> None:
    """Masking ``ab`` (or a password equal to the user name, which messages show anyway)
    everywhere would garble messages; their URL and ``password=`` forms are still masked."""
    sink = PostgresSink("postgresql://twopc:twopc@db/twopc?sslpassword=ab", table="t")
    assert sink.settings.secrets() == ()
    assert redact("postgresql://twopc:twopc@db/x", sink.settings.secrets()) == (
        "postgresql://twopc:***@db/x"
    )
    sink = PostgresSink(
        "postgresql://etl:Zr8v%3Fq@db/shop", table="t", connect_options={"sslpassword": "Pk9w2"}
    )
    assert sorted(sink.settings.secrets()) == ["Pk9w2", "Zr8v?q"]
