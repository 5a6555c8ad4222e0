"""Integration tests against real Kafka, PostgreSQL and MariaDB (see docs/development.md)."""
