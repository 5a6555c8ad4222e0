"""Avro and Protobuf record values through a schema registry (confluent-kafka's serializers).

``value_format="avro"`` or ``"protobuf"`` turns each row into a record value with
confluent-kafka's ``AvroSerializer`` or ``ProtobufSerializer``, which register (or look up)
the schema in a registry speaking Confluent's REST API and frame the value with its id.
Those serializers need ``twopc[avro]`` / ``twopc[protobuf]``; this module imports them only
when a sink asks for one, so the Kafka backend works without them.

The serializer (and its registry client, which holds an HTTP connection pool and a schema
cache) is built in the task that uses it, once per process and configuration, never on the
driver and never pickled.

Registry failures are told apart from rows that do not fit the schema: a row is bad input
(the batch can never succeed), an unreachable registry may come back (retry), a request the
registry refuses (authentication, incompatible schema, unknown subject) will not.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from twopc import BackendNotInstalledError, ConfigurationError
from twopc.retrying import RetryPolicy, retry_while

__all__ = [
    "REGISTRY_FORMATS",
    "RegistryOptions",
    "SerializerServiceError",
    "redact_url",
    "registry_failure",
]

REGISTRY_FORMATS = ("avro", "protobuf")
_INSTALL_HINTS = {
    "avro": 'pip install "twopc[avro]"',
    "protobuf": 'pip install "twopc[protobuf]"',
}
_SERIALIZER_MODULES = {
    "avro": "confluent_kafka.schema_registry.avro",
    "protobuf": "confluent_kafka.schema_registry.protobuf",
}
# parts of schema-registry client settings whose values are secrets
_SECRET_PARTS = ("password", "secret", "token", "user.info")
# HTTP statuses after which the same request may succeed later
_RETRYABLE_STATUS = frozenset({408, 429})
_USERINFO = re.compile(r"//[^/@\s]+@")
# client libraries whose exceptions mean "the HTTP request did not get an answer"
_HTTP_LIBRARIES = frozenset({"httpx", "httpx2", "requests", "urllib3", "httpcore"})
# tries of one value when the registry answers 409 (see _RowSerializer)
_CONFLICT_RETRIES = RetryPolicy(max_attempts=3, initial_backoff_seconds=0.1)
"""A subject registered by two tasks at once: the loser asks again, twice at most."""
_CONFLICT_TIMEOUT_SECONDS = 30.0


class SerializerServiceError(Exception):
    """The schema registry could not be used: unreachable, or it refused a request.

    ``retryable`` says whether the same request may succeed later (registry down, timeout,
    HTTP 5xx) or not (authentication, incompatible schema, unknown subject).
    """

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` part replaced by ``***@``."""
    return _USERINFO.sub("//***@", url)


def registry_failure(exc: BaseException, url: str | None = None) -> SerializerServiceError | None:
    """The registry failure behind ``exc``, or None when ``exc`` is about the row itself.

    Works for confluent-kafka's serializers whether twopc built them or a user's
    ``value_serializer`` factory did; ``url`` names the registry when it is known.
    """
    status = getattr(exc, "http_status_code", None)
    if type(exc).__module__.startswith("confluent_kafka.schema_registry") and isinstance(
        status, int
    ):
        where = f" at {redact_url(url)}" if url else ""
        detail = getattr(exc, "error_message", None) or str(exc)
        return SerializerServiceError(
            redact_url(f"the schema registry{where} refused the request: HTTP {status}: {detail}"),
            retryable=status >= 500 or status in _RETRYABLE_STATUS,
        )
    libraries = {cls.__module__.split(".")[0] for cls in type(exc).__mro__}
    if libraries & _HTTP_LIBRARIES or (url and isinstance(exc, ConnectionError | TimeoutError)):
        target = url or _request_url(exc) or "(unknown URL)"
        return SerializerServiceError(
            redact_url(
                f"cannot reach the schema registry at {target}: {type(exc).__name__}: {exc}"
            ),
            retryable=True,
        )
    return None


def _request_url(exc: BaseException) -> str | None:
    """The URL of the failed HTTP request, when the client library recorded it."""
    try:
        request = getattr(exc, "request", None)
    except RuntimeError:  # httpx: the exception was raised without a request attached
        return None
    request_url = getattr(request, "url", None)
    if request_url is None:
        return None
    return str(request_url).split("?", 1)[0]


def _is_secret(key: str) -> bool:
    return any(part in key for part in _SECRET_PARTS)


@dataclass(frozen=True)
class RegistryOptions:
    """How rows become Avro or Protobuf values; validated when the sink is created.

    Args:
        value_format: ``avro`` or ``protobuf``.
        url: the registry's base URL (Confluent API), e.g. ``http://registry:8081``;
            several may be given comma-separated.
        value_schema: for Avro the schema as JSON text; for Protobuf the generated
            message class as ``"package.module:Message"``.
        client_config: more ``SchemaRegistryClient`` settings (``basic.auth.user.info``,
            ``ssl.ca.location``, ``timeout``, ``max.retries`` ...).
        serializer_config: settings of the ``AvroSerializer`` / ``ProtobufSerializer``
            (``auto.register.schemas``, ``use.latest.version``, ``subject.name.strategy``
            ...).
    """

    value_format: str
    url: str
    value_schema: str
    client_config: Mapping[str, Any] = field(default_factory=dict)
    serializer_config: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.value_format not in REGISTRY_FORMATS:
            raise ConfigurationError(
                f"kafka sink: no schema registry serializer for value_format="
                f"{self.value_format!r}; expected one of {', '.join(REGISTRY_FORMATS)}"
            )
        if not self.url:
            raise ConfigurationError(
                f"kafka sink: value_format={self.value_format!r} needs schema_registry_url"
            )
        for one in self.url.split(","):
            if not one.strip().startswith(("http://", "https://")):
                raise ConfigurationError(
                    "kafka sink: schema_registry_url must be http:// or https:// URLs, not "
                    f"{redact_url(one.strip())!r}"
                )
        if "url" in self.client_config:
            raise ConfigurationError(
                "kafka sink: give the registry's address as schema_registry_url, not as "
                "schema_registry_config['url']"
            )
        if not self.value_schema:
            what = (
                "an Avro schema (JSON text)"
                if self.value_format == "avro"
                else "the message class as 'package.module:Message'"
            )
            raise ConfigurationError(
                f"kafka sink: value_format={self.value_format!r} needs value_schema: {what}"
            )
        self._check_installed()
        if self.value_format == "avro":
            self._check_avro_schema()
        else:
            self._message_class()
        # Building the serializer checks both configs (unknown keys, malformed credentials);
        # it sends no request.
        try:
            _, client = self._build()
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(
                redact_url(f"kafka sink: schema registry settings rejected: {exc}")
            ) from exc
        _close(client)

    def __repr__(self) -> str:
        safe = {k: ("***" if _is_secret(k) else v) for k, v in self.client_config.items()}
        return (
            f"RegistryOptions({self.value_format!r}, url={redact_url(self.url)!r}, "
            f"client_config={safe!r}, serializer_config={dict(self.serializer_config)!r})"
        )

    @property
    def label(self) -> str:
        """Names the serializer in messages: ``the Avro serializer (schema shop.Order)``."""
        if self.value_format == "avro":
            return f"the Avro serializer (schema {self._avro_name()})"
        return f"the Protobuf serializer (message {self.value_schema})"

    # -- checks ------------------------------------------------------------------------------

    def _check_installed(self) -> None:
        module = _SERIALIZER_MODULES[self.value_format]
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise BackendNotInstalledError(
                f"kafka sink: value_format={self.value_format!r} needs confluent-kafka's "
                f"schema registry support ({exc}): {_INSTALL_HINTS[self.value_format]}"
            ) from exc

    def _check_avro_schema(self) -> None:
        from fastavro import parse_schema
        from fastavro.schema import SchemaParseException, UnknownType

        try:
            parse_schema(json.loads(self.value_schema))
        except (ValueError, TypeError, SchemaParseException, UnknownType) as exc:
            raise ConfigurationError(
                f"kafka sink: value_schema is not a valid Avro schema: {type(exc).__name__}: {exc}"
            ) from exc

    def _avro_name(self) -> str:
        schema = json.loads(self.value_schema)
        if isinstance(schema, dict):
            name = schema.get("name")
            namespace = schema.get("namespace")
            if name:
                return f"{namespace}.{name}" if namespace and "." not in name else str(name)
            return str(schema.get("type", "?"))
        return str(schema)[:40]

    def _message_class(self) -> type[Any]:
        from google.protobuf.message import Message

        module_name, sep, attribute = self.value_schema.partition(":")
        if not sep or not module_name or not attribute:
            raise ConfigurationError(
                "kafka sink: for value_format='protobuf', value_schema must be the message "
                f"class as 'package.module:Message', not {self.value_schema!r}"
            )
        try:
            found = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(
                f"kafka sink: cannot import the Protobuf message class {self.value_schema!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not (isinstance(found, type) and issubclass(found, Message)):
            raise ConfigurationError(
                f"kafka sink: {self.value_schema!r} is not a Protobuf message class"
            )
        return found

    # -- the serializer, in the task ----------------------------------------------------------

    def _build(self) -> tuple[Callable[[Any, Any], bytes | None], Any]:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        client = SchemaRegistryClient({**self.client_config, "url": self.url})
        try:
            serializer: Callable[[Any, Any], bytes | None]
            conf = dict(self.serializer_config)
            if self.value_format == "avro":
                from confluent_kafka.schema_registry.avro import AvroSerializer

                serializer = AvroSerializer(client, self.value_schema, conf=conf)
            else:
                from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

                serializer = ProtobufSerializer(self._message_class(), client, conf=conf)
        except BaseException:
            _close(client)
            raise
        return serializer, client

    def row_serializer(self) -> Callable[[dict[str, Any], str], bytes]:
        """``serialize(row, topic) -> bytes``, shared by every task of this process."""
        key = json.dumps(
            [
                self.value_format,
                self.url,
                self.value_schema,
                dict(self.client_config),
                dict(self.serializer_config),
            ],
            sort_keys=True,
            default=repr,
        )
        with _LOCK:
            cached = _SERIALIZERS.get(key)
            if cached is None or cached.pid != os.getpid():
                # An entry from the parent of a forked process shares its sockets: not ours.
                serializer, client = self._build()
                message_class = self._message_class() if self.value_format == "protobuf" else None
                cached = _CachedSerializer(
                    os.getpid(), client, _RowSerializer(serializer, message_class, self.url)
                )
                _SERIALIZERS[key] = cached
        return cached.row_serializer


class _RowSerializer:
    """Calls a confluent-kafka serializer for one row and names registry failures."""

    def __init__(
        self,
        serializer: Callable[[Any, Any], bytes | None],
        message_class: type[Any] | None,
        url: str,
    ) -> None:
        from confluent_kafka.serialization import MessageField, SerializationContext

        self._serializer = serializer
        self._message_class = message_class
        self._url = url
        self._context_type = SerializationContext
        self._value_field = MessageField.VALUE

    def __call__(self, row: dict[str, Any], topic: str) -> bytes:
        # Protobuf: a null column leaves the field unset (its default value).
        value: Any = row if self._message_class is None else self._message_class(**row)
        context = self._context_type(topic, self._value_field)
        try:
            # Apicurio answers 409 "artifact already exists" to the loser of two tasks
            # registering a new subject at once; asked again it returns the id. A truly
            # incompatible schema gets 409 again and fails below.
            data: bytes | None = retry_while(
                lambda: self._serializer(value, context),
                _is_conflict,
                timeout=_CONFLICT_TIMEOUT_SECONDS,
                what=f"registering the value schema of topic {topic!r}",
                policy=_CONFLICT_RETRIES,
            )
        except Exception as exc:
            failure = registry_failure(exc, self._url)
            if failure is not None:
                raise failure from exc
            raise
        if data is None:  # only for a None value, which a row never is
            raise ValueError("the serializer returned no value")
        return data


def _close(client: Any) -> None:
    """Close a registry client's HTTP session.

    ``SchemaRegistryClient.close()`` arrived in confluent-kafka 2.16; its context-manager exit
    does the same in every release twopc supports.
    """
    client.__exit__(None, None, None)


def _is_conflict(exc: BaseException) -> bool:
    return getattr(exc, "http_status_code", None) == 409 and type(exc).__module__.startswith(
        "confluent_kafka.schema_registry"
    )


@dataclass(frozen=True)
class _CachedSerializer:
    pid: int
    client: Any
    row_serializer: _RowSerializer


_LOCK = threading.Lock()
_SERIALIZERS: dict[str, _CachedSerializer] = {}


@atexit.register
def _close_clients() -> None:
    """Close this process's registry clients (their HTTP connections) at exit."""
    with _LOCK:
        for cached in _SERIALIZERS.values():
            if cached.pid == os.getpid():
                _close(cached.client)
        _SERIALIZERS.clear()
