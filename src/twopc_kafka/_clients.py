"""The librdkafka clients the Kafka sink makes: transactional producers, an admin client,
consumers that read marker groups. One place for the settings they share."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from twopc.secrets import redact
from twopc_kafka._errors import ClientErrors

__all__ = ["ENFORCED", "KafkaClients", "is_secret", "redact_text", "settings_problem"]

ENFORCED = {"enable.idempotence": True, "acks": "all"}
"""Producer settings exactly-once needs; a user setting that contradicts them is refused."""
_SECRET_KEYS = (
    "sasl.password",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
    "sasl.oauthbearer",
)
_QUIET = logging.Logger("twopc.kafka.settings-check")
"""The logger of the client that checks settings: never served (no poll), never shown."""
_QUIET.disabled = True
_PRODUCER_ONLY = ("linger.ms", "batch.size", "compression.type", "queue.buffering")


@dataclass(frozen=True)
class KafkaClients:
    """Connection settings, passed through to every client (TLS, SASL ...)."""

    bootstrap_servers: str
    config: dict[str, Any] = field(default_factory=dict)
    timeout: float = 30.0
    """Seconds any one blocking call may take."""
    transaction_timeout_ms: int = 60_000

    def base(self) -> dict[str, Any]:
        return {**self.config, "bootstrap.servers": self.bootstrap_servers}

    def admin_only(self) -> dict[str, Any]:
        """The settings for admin clients and consumers: without producer-only keys."""
        return {k: v for k, v in self.base().items() if not k.startswith(_PRODUCER_ONLY)}

    def redacted(self) -> dict[str, Any]:
        """The user's settings with secrets masked, for ``repr``."""
        return {k: ("***" if is_secret(k) else v) for k, v in self.config.items()}

    def request_timeout_ms(self) -> int:
        """librdkafka's ``socket.timeout.ms`` for the producers: the operation timeout."""
        return max(10, min(int(self.timeout * 1000), self.transaction_timeout_ms))

    def producer(self, transactional_id: str, errors: ClientErrors | None = None) -> Any:
        config = {
            # A Python callback per delivered record costs more than producing it; failures
            # still report, and flush() still waits for every record.
            "delivery.report.only.error": True,
            # A stalled broker answers nothing, and librdkafka then waits for each request
            # until socket.timeout.ms (60 s, capped at transaction.timeout.ms), whatever the
            # call's own timeout: send_offsets_to_transaction would block that long.
            "socket.timeout.ms": self.request_timeout_ms(),
            **self.base(),
            **ENFORCED,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": self.transaction_timeout_ms,
        }
        if errors is not None and "error_cb" not in config:
            config["error_cb"] = errors
        return Producer(config)

    def admin(self, errors: ClientErrors | None = None) -> Any:
        config = self.admin_only()
        if errors is not None:
            config["error_cb"] = errors
        return AdminClient(config)

    def consumer(self, group_id: str, **settings: Any) -> Any:
        return Consumer({**self.admin_only(), "group.id": group_id, **settings})

    def group_metadata(self, group_id: str) -> Any:
        """What ``send_offsets_to_transaction`` needs to commit offsets for ``group_id``
        (a consumer that never joins the group: generation -1)."""
        consumer = self.consumer(group_id)
        try:
            return consumer.consumer_group_metadata()
        finally:
            consumer.close()


def is_secret(key: str) -> bool:
    """Whether a librdkafka setting holds a secret (a password, a private key, a token)."""
    return key.startswith(_SECRET_KEYS)


def redact_text(text: str, config: Mapping[str, Any]) -> str:
    """``text`` with the value of every secret setting of ``config`` masked (``***``)."""
    return redact(text, [v for k, v in config.items() if is_secret(k) and isinstance(v, str)])


def settings_problem(config: Mapping[str, Any]) -> str | None:
    """What librdkafka refuses in ``config``: unknown names, values of the wrong kind, files
    it cannot read, mechanisms it was built without; ``None`` when it takes them all.

    It builds a producer with no ``bootstrap.servers`` (so nothing connects) and destroys it
    at once. When the set is refused, the setting refused alone for the same reason is
    named (librdkafka's message may name an alias: ``linger.ms`` is
    ``queue.buffering.max.ms``); a problem of a combination is reported as librdkafka
    words it."""
    whole = _refusal(config)
    if whole is None:
        return None
    for key, value in config.items():
        if _refusal({key: value}) == whole:
            shown = "***" if is_secret(key) else repr(value)
            return redact_text(f"producer_config[{key!r}] = {shown}: {whole}", config)
    return redact_text(f"producer_config: {whole}", config)


def _refusal(config: Mapping[str, Any]) -> str | None:
    """librdkafka's reason to refuse building a client from ``config``, or ``None``."""
    settings = {k: v for k, v in config.items() if k != "bootstrap.servers" and not callable(v)}
    settings["logger"] = _QUIET  # librdkafka's warnings (no brokers...) go nowhere
    try:
        producer = Producer(settings)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        return str(error.str()) if hasattr(error, "str") else str(error)
    except (TypeError, ValueError) as exc:  # confluent-kafka's own checks (callbacks)
        return str(exc)
    del producer  # destroyed now: no client thread may outlive the check (forks follow)
    return None
