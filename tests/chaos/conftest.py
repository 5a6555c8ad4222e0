"""The real-service fixtures (PostgreSQL, MariaDB, Kafka) of the integration tests."""

from tests.integration.conftest import (  # noqa: F401
    kafka_bootstrap,
    mysql_dsn,
    postgres_dsn,
    services_cli,
)
