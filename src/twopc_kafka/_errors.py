"""How the Kafka sink classifies a failed client call: permanent for wrong credentials,
settings or records, transient otherwise, with the client's last error where the call
itself only says "timed out"."""

from __future__ import annotations

from confluent_kafka import KafkaError

from twopc import PermanentSinkError, SinkError, TransientSinkError

__all__ = ["PERMANENT_CODES", "ClientErrors", "classify", "error"]

PERMANENT_CODES = {
    KafkaError.INVALID_TRANSACTION_TIMEOUT: "transaction.timeout.ms is above the broker's "
    "transaction.max.timeout.ms (default 900000); lower it or raise the broker's maximum",
    KafkaError.MSG_SIZE_TOO_LARGE: "a record is larger than the broker's or topic's "
    "message.max.bytes",
    KafkaError.UNKNOWN_TOPIC_OR_PART: "the topic or partition does not exist",
    KafkaError._UNKNOWN_TOPIC: "the topic does not exist",
    KafkaError.INVALID_MSG_SIZE: "a record has an invalid size",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "not authorized to write to the topic",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "not authorized to use the transactional id",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "not authorized to commit the marker offsets",
    KafkaError.SASL_AUTHENTICATION_FAILED: "authentication failed (check the SASL settings)",
    KafkaError._AUTHENTICATION: "authentication failed (check the credentials)",
    KafkaError.RECORD_LIST_TOO_LARGE: "a batch of records is too large",
    KafkaError.INVALID_RECORD: "the broker rejected a record",
}


class ClientErrors:
    """The last client-level error librdkafka reported through ``error_cb`` (connection
    refused, authentication failed). A timed-out call does not carry it, so without this a
    wrong address or wrong credentials would only say "timed out"."""

    def __init__(self) -> None:
        self.last: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        if error.code() != KafkaError._ALL_BROKERS_DOWN or self.last is None:
            self.last = error


def classify(exc: BaseException, client_error: KafkaError | None) -> tuple[type[SinkError], str]:
    """The error class and cause text for a failed client call: permanent for wrong
    credentials or settings, transient otherwise, with the client's last error (connection
    refused, authentication failed) where the call itself only says "timed out"."""
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    timed_out = error is None and isinstance(exc, TimeoutError)
    if (
        (timed_out or (error is not None and error.code() == KafkaError._TIMED_OUT))
        and client_error is not None
        and client_error.code() in PERMANENT_CODES
    ):
        error = client_error  # e.g. wrong credentials: say so, not "timed out"
    if error is not None and error.code() in PERMANENT_CODES:
        return (
            PermanentSinkError,
            f"{PERMANENT_CODES[error.code()]} ({error.name()}: {error.str()})",
        )
    if error is not None:
        cause = f"{error.name()}: {error.str()}"
    elif timed_out:
        cause = "timed out"
    else:
        cause = f"{type(exc).__name__}: {exc}"
    if client_error is not None and client_error is not error:
        cause += f" (last client error: {client_error.name()}: {client_error.str()})"
    return TransientSinkError, cause


def error(exc: BaseException, what: str, client_error: KafkaError | None = None) -> SinkError:
    """The sink error for a failed client call: ``what`` failed, and why."""
    kind, cause = classify(exc, client_error)
    return kind(f"{what}: {cause}")
