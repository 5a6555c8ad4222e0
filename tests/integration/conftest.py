"""The SQL fixtures of the integration tests: ``db`` (each SQL server in turn) and ``env``
(a test's tables and sinks on it). The service fixtures (``postgres_dsn``, ``mysql_dsn``,
``kafka_bootstrap``, ``s3_store``, ``services``...) are the whole suite's:
``tests/harness/service_fixtures.py``."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.services import MysqlParams
from tests.harness.sql_servers import MariaDb, PostgresDb
from tests.harness.sql_sink_cases import Db, Env


@pytest.fixture(params=["postgres", "mariadb"])
def db(request: pytest.FixtureRequest) -> Db:
    """Each SQL server in turn, for the modules that test both alike (a module or class
    that tests one server defines its own ``db``)."""
    if request.param == "postgres":
        return PostgresDb(request.getfixturevalue("postgres_dsn"))
    params: MysqlParams = request.getfixturevalue("mysql_params")
    return MariaDb(request.getfixturevalue("mysql_dsn"), params)


@pytest.fixture
def env(db: Db, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    """Tables, sinks and clean-up of one test on ``db``, named after the test."""
    label = db.name[:2] + "-" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:6]
    env = Env(db, tmp_path, label)
    try:
        yield env
    finally:
        env.cleanup()
