"""What the MySQL/MariaDB backend relies on: XA transactions, shown on a real MariaDB.

``XA START/END/PREPARE`` on one connection, disconnect, then ``XA RECOVER`` and
``XA COMMIT`` from another connection with autocommit on.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pymysql
import pytest

from tests.harness.services import MysqlParams

pytestmark = pytest.mark.integration


def _connect(params: MysqlParams) -> pymysql.connections.Connection:
    return pymysql.connect(**params.connect_kwargs(), autocommit=True)


@pytest.fixture
def table(mysql_params: MysqlParams) -> Iterator[str]:
    name = f"it_xa_{uuid.uuid4().hex[:10]}"
    conn = _connect(mysql_params)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, v VARCHAR(64)) ENGINE=InnoDB")
        yield name
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {name}")
    finally:
        conn.close()


def _count(params: MysqlParams, table: str) -> int:
    conn = _connect(params)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {table}")
            row = cur.fetchone()
    finally:
        conn.close()
    assert row is not None
    return int(row[0])


def _recovered(params: MysqlParams) -> set[bytes]:
    """gtrid+bqual of every prepared XA transaction, as XA RECOVER reports them."""
    conn = _connect(params)
    try:
        with conn.cursor() as cur:
            cur.execute("XA RECOVER")
            rows = cur.fetchall()
    finally:
        conn.close()
    # columns: formatID, gtrid_length, bqual_length, data
    return {r[3] if isinstance(r[3], bytes) else str(r[3]).encode() for r in rows}


def test_server_settings(mysql_params: MysqlParams) -> None:
    conn = _connect(mysql_params)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@local_infile, @@bind_address, @@log_bin, @@version")
            row = cur.fetchone()
    finally:
        conn.close()
    assert row is not None
    local_infile, bind_address, log_bin, version = row
    assert int(local_infile) == 1
    assert bind_address == "127.0.0.1"
    assert int(log_bin) == 1
    assert "MariaDB" in version


def test_xa_prepare_disconnect_recover_commit(mysql_params: MysqlParams, table: str) -> None:
    gtrid = f"twopc-it-{uuid.uuid4().hex}"  # <= 64 bytes
    owner = _connect(mysql_params)
    try:
        with owner.cursor() as cur:
            cur.execute("XA START %s", (gtrid,))
            cur.executemany(
                f"INSERT INTO {table} (id, v) VALUES (%s, %s)", [(i, f"row-{i}") for i in range(4)]
            )
            cur.execute("XA END %s", (gtrid,))
            cur.execute("XA PREPARE %s", (gtrid,))
    finally:
        owner.close()  # the prepared branch outlives its connection

    assert gtrid.encode() in _recovered(mysql_params)
    assert _count(mysql_params, table) == 0

    other = _connect(mysql_params)
    try:
        with other.cursor() as cur:
            cur.execute("SELECT @@autocommit")
            assert cur.fetchone() == (1,)
            cur.execute("XA COMMIT %s", (gtrid,))
    finally:
        other.close()

    assert gtrid.encode() not in _recovered(mysql_params)
    assert _count(mysql_params, table) == 4

    # committing again: the xid is unknown (ER_XAER_NOTA, 1397)
    again = _connect(mysql_params)
    try:
        with again.cursor() as cur, pytest.raises(pymysql.err.OperationalError) as excinfo:
            cur.execute("XA COMMIT %s", (gtrid,))
    finally:
        again.close()
    assert excinfo.value.args[0] == 1397
