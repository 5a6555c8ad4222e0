"""Registers the ``postgres`` and ``mysql`` backends; imports no database driver."""

from __future__ import annotations

from twopc import SinkSpec, hookimpl


@hookimpl
def twopc_sinks() -> list[SinkSpec]:
    return [
        SinkSpec(
            name="postgres",
            factory="twopc_jdbc.postgres:PostgresSink",
            description="PostgreSQL transactions or prepared transactions (psycopg 3)",
            requires=("psycopg",),
            install_hint='pip install "twopc[postgres]"',
        ),
        SinkSpec(
            name="mysql",
            factory="twopc_jdbc.mysql:MySQLSink",
            description="MySQL 8 / MariaDB transactions or XA (PyMySQL)",
            requires=("pymysql",),
            install_hint='pip install "twopc[mysql]"',
        ),
    ]
