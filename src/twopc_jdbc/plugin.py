"""Registers the ``postgres`` and ``mysql`` backends; imports no database driver."""

from __future__ import annotations

from twopc import SinkSpec, hookimpl

_PLANNED = "not implemented in twopc 0.1 yet (planned: the SQL backends issue)"


@hookimpl
def twopc_sinks() -> list[SinkSpec]:
    return [
        SinkSpec(
            name="postgres",
            factory="twopc_jdbc.postgres:PostgresSink",
            description="PostgreSQL transactions / prepared transactions (psycopg 3)",
            requires=("psycopg",),
            install_hint='pip install "twopc[postgres]"',
            unavailable=_PLANNED,
        ),
        SinkSpec(
            name="mysql",
            factory="twopc_jdbc.mysql:MySQLSink",
            description="MySQL 8 / MariaDB transactions and XA (PyMySQL)",
            requires=("pymysql",),
            install_hint='pip install "twopc[mysql]"',
            unavailable=_PLANNED,
        ),
    ]
