"""The librdkafka clients the Kafka sink makes: transactional producers, an admin client,
consumers that read marker groups. One place for the settings they share."""

from __future__ import annotations

import logging
import os
import threading
import time
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
TOPICS_TTL_SECONDS = 60.0
"""How long a process trusts the cluster's topic list it read (a topic created meanwhile is
looked up again at once; one deleted fails the produce instead of the check)."""

_SHARED: dict[str, tuple[int, Any]] = {}
"""Per process (its pid): one admin client per set of connection settings, for what every
task of a Python worker asks again (topics, marker offsets). A client made before a fork
is never used after it: librdkafka's threads do not survive it."""
_TOPICS: dict[str, tuple[int, float, dict[str, int]]] = {}
_LOCK = threading.Lock()


def _before_fork() -> None:
    """Destroy this process's shared clients before it forks (the local engine forks its
    tasks): a child forked while librdkafka's threads run may crash in its own clients."""
    _SHARED.clear()


os.register_at_fork(before=_before_fork)


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
            # Each task's producer is new. With sparse connections (librdkafka's default) it
            # connects to the brokers it learns of lazily and asks for its producer id
            # before they are up, then waits for a timer: 55 to 560 ms to
            # init_transactions on the test machine, 2 to 5 ms with every broker connected
            # at once. A cluster of many brokers may prefer the default: producer_config
            # may set it back.
            "enable.sparse.connections": False,
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

    def shared_admin(self) -> Any:
        """This process's admin client for these settings, made on first use: the tasks a
        Python worker runs one after another share it instead of connecting each time."""
        key = self._key()
        pid = os.getpid()
        with _LOCK:
            known = _SHARED.get(key)
            if known is None or known[0] != pid:
                known = _SHARED[key] = (pid, AdminClient(self.admin_only()))
            return known[1]

    def topics(self, *, refresh: bool = False) -> dict[str, int]:
        """The cluster's topics and their partition counts, as this process last read them
        (within :data:`TOPICS_TTL_SECONDS`), else read now through :meth:`shared_admin`."""
        key = self._key()
        pid, now = os.getpid(), time.monotonic()
        known = _TOPICS.get(key)
        if (
            not refresh
            and known is not None
            and known[0] == pid
            and now - known[1] < TOPICS_TTL_SECONDS
        ):
            return known[2]
        metadata = self.shared_admin().list_topics(timeout=self.timeout)
        topics = {name: len(t.partitions) for name, t in metadata.topics.items()}
        _TOPICS[key] = (pid, now, topics)
        return topics

    def forget_shared(self) -> None:
        """Drop this process's shared admin client and topic list (after a failure: the
        next task connects anew)."""
        key = self._key()
        with _LOCK:
            _SHARED.pop(key, None)
            _TOPICS.pop(key, None)

    def _key(self) -> str:
        return repr(sorted((k, repr(v)) for k, v in self.admin_only().items()))

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
