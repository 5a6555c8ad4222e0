"""What a SQL server allows a batch to hold at once, read from its settings
(:meth:`twopc.Sink.work_limits`).

Every running task holds one connection (its transaction); in ``two_phase`` mode on
PostgreSQL every partition also holds a prepared transaction until the driver commits the
batch, counted against ``max_prepared_transactions`` (cluster-wide). MariaDB keeps a
prepared XA branch without a connection and has no setting that bounds how many.
"""

from __future__ import annotations

from typing import Any

from twopc import WorkLimit

__all__ = ["mysql_limits", "postgres_limits"]

_POSTGRES = """
SELECT current_setting('max_prepared_transactions')::int,
       (SELECT count(*) FROM pg_prepared_xacts),
       current_setting('max_connections')::int
         - current_setting('superuser_reserved_connections')::int
         - coalesce(current_setting('reserved_connections', true)::int, 0),
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'),
       (SELECT rolconnlimit FROM pg_roles WHERE rolname = current_user),
       (SELECT datconnlimit FROM pg_database WHERE datname = current_database())
"""

_PREPARED_FIX = (
    "in postgresql.conf, then restart PostgreSQL; it must cover the widest batch of every "
    "two_phase writer of the server at once"
)
_CONNECTIONS_FIX = "in the server's configuration, then restart it"


def postgres_limits(conn: Any, *, two_phase: bool) -> list[WorkLimit]:
    """PostgreSQL's limits: prepared transactions (``two_phase`` only) and connections,
    the lowest of ``max_connections`` (less the reserved ones), the role's and the
    database's ``CONNECTION LIMIT``."""
    row = conn.execute(_POSTGRES).fetchone()
    prepared, held, connections, connected, role_limit, database_limit = (
        int(v) if v is not None else -1 for v in row
    )
    limits = []
    if two_phase:
        limits.append(
            WorkLimit(
                holds="a prepared transaction",
                setting="max_prepared_transactions",
                allowed=prepared,
                each_partition=True,
                free=max(0, prepared - held),
                fix=_PREPARED_FIX,
            )
        )
    setting, allowed = "max_connections", connections
    for name, limit in (("the role's", role_limit), ("the database's", database_limit)):
        if 0 <= limit < allowed:
            setting, allowed = f"{name} CONNECTION LIMIT", limit
    limits.append(
        WorkLimit(
            holds="a connection",
            setting=setting,
            allowed=allowed,
            each_partition=False,
            free=max(0, connections - connected),
            fix=(
                "less superuser_reserved_connections and reserved_connections; " + _CONNECTIONS_FIX
                if setting == "max_connections"
                else "ALTER ROLE or ALTER DATABASE ... CONNECTION LIMIT"
            ),
        )
    )
    return limits


def mysql_limits(cursor: Any) -> list[WorkLimit]:
    """MySQL's and MariaDB's limit on connections: ``max_connections``, or the account's
    ``max_user_connections`` where lower (the session's value shows an account's own
    ``MAX_USER_CONNECTIONS``)."""
    cursor.execute(
        "SELECT @@max_connections, @@max_user_connections, "
        "(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
        "WHERE VARIABLE_NAME = 'THREADS_CONNECTED')"
    )
    most, per_user, connected = (int(v) if v is not None else 0 for v in cursor.fetchone())
    setting, allowed = "max_connections", most
    if 0 < per_user < allowed:
        setting, allowed = "max_user_connections", per_user
    return [
        WorkLimit(
            holds="a connection",
            setting=setting,
            allowed=allowed,
            each_partition=False,
            free=max(0, most - connected),
            fix="SET GLOBAL or the server's configuration file",
        )
    ]
