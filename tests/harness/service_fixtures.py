"""Session fixtures that start the real services on demand through ``scripts/services``
(loaded for the whole suite by ``tests/conftest.py``).

Fixtures:

* ``kafka_bootstrap`` -> ``"127.0.0.1:19092"`` (Kafka 4.x, KRaft, one node)
* ``postgres_dsn``    -> ``"postgresql://twopc:twopc@127.0.0.1:15432/twopc"``
* ``mysql_dsn``       -> ``"mysql://twopc:twopc@127.0.0.1:13306/twopc"`` (MariaDB)
* ``mysql_params``    -> :class:`MysqlParams` (``.connect_kwargs()`` for ``pymysql.connect``)
* ``s3_store``        -> :class:`S3Store` (S3Proxy on ``127.0.0.1:19000``, bucket ``twopc``;
  ``.storage_options()`` for s3fs)
* ``schema_registry_url`` -> ``"http://127.0.0.1:18081/apis/ccompat/v7"`` (Apicurio Registry,
  Confluent-compatible API)
* ``iceberg_rest_uri`` -> ``"http://127.0.0.1:18181"`` (an Iceberg REST catalog)
* ``services``        -> :class:`ServiceControl`: ``kill(name)``, ``restart(name)``,
  ``start(name)``, ``stop(name)``, ``status()``; a service a test killed or stopped and did
  not bring back is restarted when the test ends, so later tests find it running.

Each service is started at most once per session (when a test first asks for it); a
service that is already running is reused. Services are left running after the session.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.harness.services import MysqlParams, ServiceControl, Services, parse_mysql_dsn


@pytest.fixture(scope="session")
def services_cli() -> Services:
    """The raw ``scripts/services`` wrapper (session-wide)."""
    return Services()


@pytest.fixture
def services(services_cli: Services) -> Iterator[ServiceControl]:
    """Kill/restart helper; anything left down by the test is started again afterwards."""
    control = ServiceControl(services_cli)
    yield control
    control.bring_back()


@pytest.fixture(scope="session")
def kafka_bootstrap(services_cli: Services) -> str:
    """``host:port`` of the test Kafka broker, started if needed."""
    return services_cli.start("kafka")["KAFKA_BOOTSTRAP_SERVERS"]


@pytest.fixture(scope="session")
def postgres_dsn(services_cli: Services) -> str:
    """``postgresql://`` URL of the test database (max_prepared_transactions=64)."""
    return services_cli.start("postgres")["POSTGRES_DSN"]


@pytest.fixture(scope="session")
def mysql_dsn(services_cli: Services) -> str:
    """``mysql://`` URL of the test MariaDB database (local_infile on, binlog on)."""
    return services_cli.start("mariadb")["MYSQL_DSN"]


@pytest.fixture(scope="session")
def mysql_params(mysql_dsn: str) -> MysqlParams:
    """The MariaDB URL split for ``pymysql.connect(**mysql_params.connect_kwargs())``."""
    return parse_mysql_dsn(mysql_dsn)


@pytest.fixture(scope="session")
def schema_registry_url(services_cli: Services) -> str:
    """Base URL of the test schema registry's Confluent-compatible API, started if needed."""
    return services_cli.start("registry")["SCHEMA_REGISTRY_URL"]


@pytest.fixture(scope="session")
def iceberg_rest_uri(services_cli: Services) -> str:
    """URL of the test Iceberg REST catalog (iceberg-core's handlers, tables in SQLite, the
    warehouse under ``.services/iceberg-rest``), started if needed."""
    return services_cli.start("iceberg-rest")["ICEBERG_REST_URI"]


@dataclass(frozen=True)
class S3Store:
    """The test S3 API (S3Proxy over files): where it is, its bucket and its credentials."""

    endpoint_url: str
    bucket: str
    access_key_id: str
    secret_access_key: str

    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs options, as a user passes them for any S3-compatible store."""
        return {
            "key": self.access_key_id,
            "secret": self.secret_access_key,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"},
        }

    def url(self, *parts: str) -> str:
        return "s3://" + "/".join([self.bucket, *parts])

    def env(self) -> dict[str, str]:
        """The store as ``scripts/services env`` prints it (what chaos targets take)."""
        return {
            "S3_ENDPOINT_URL": self.endpoint_url,
            "S3_BUCKET": self.bucket,
            "S3_ACCESS_KEY_ID": self.access_key_id,
            "S3_SECRET_ACCESS_KEY": self.secret_access_key,
        }


@pytest.fixture(scope="session")
def s3_store(services_cli: Services) -> S3Store:
    """The test S3 API, started if needed (bucket ``twopc``)."""
    env = services_cli.start("s3")
    return S3Store(
        env["S3_ENDPOINT_URL"],
        env["S3_BUCKET"],
        env["S3_ACCESS_KEY_ID"],
        env["S3_SECRET_ACCESS_KEY"],
    )


@pytest.fixture(scope="session")
def kafka_sasl(services_cli: Services) -> dict[str, str]:
    """The test broker's SASL/PLAIN listener: ``bootstrap``, ``username``, ``password``."""
    env = services_cli.start("kafka")
    return {
        "bootstrap": env["KAFKA_SASL_BOOTSTRAP_SERVERS"],
        "username": env["KAFKA_SASL_USERNAME"],
        "password": env["KAFKA_SASL_PASSWORD"],
    }
