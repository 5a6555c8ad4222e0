"""The one exception tree of twopc.

Every error twopc raises derives from :class:`TwoPCError`. Errors about a batch carry the
sink id, the batch id and, where one partition is to blame, the partition, so that a failed
streaming query names what failed and why::

    TwoPCError
    ├── ConfigurationError            bad options; will never succeed as configured
    │   ├── CheckpointMismatchError   commit log and checkpoint disagree (e.g. reset checkpoint)
    │   ├── ExtraNotInstalledError    a feature's optional extra is missing (pip install hint)
    │   ├── ReplayMismatchError       a partly committed batch replayed in another shape
    │   ├── TargetLimitError          a batch needs more work at once than the target allows
    │   ├── StartingOffsetsError      the target cannot give a restart position:
    │   │   ├── NoStoredOffsetsError  it holds no source offsets for the sink id
    │   │   ├── UnsafeStartError      a batch is partly committed, or prepared work waits
    │   │   └── OffsetsMismatchError  the stored offsets are for other topics
    │   └── UnsupportedFormatError    a record written by another twopc or sink version
    ├── PluginError                   plugin discovery and loading
    │   ├── BackendNotFoundError      no backend registered under that name
    │   ├── BackendNotInstalledError  the backend's optional dependencies are missing
    │   └── BackendUnavailableError   the backend is registered but cannot be used
    ├── SinkError                     raised by or on behalf of a sink
    │   ├── TransientSinkError        retry may help (connection reset, timeout, broker restart)
    │   │   └── GaveWay               another process prepared the attempt (twopc.table_formats)
    │   ├── PermanentSinkError        will never succeed for this input (bad record, schema)
    │   └── CommitError               phase 2 failed
    │       └── CommitStateUnknownError  we cannot tell whether the commit happened
    ├── BatchFailedError              phase 1 failed; nothing of the batch was committed
    │                                 (CommitsInTask sinks: partitions already committed stay)
    └── InjectedFault                 raised by fault injection (tests, demo, conformance kit)

``retryable`` tells the coordinator whether retrying the same call may help
(Flink's ``retryLater`` versus ``signalFailedWithKnownReason``).

Sinks raise these without saying where: the core fills in the sink id, batch and
partition once, where an error leaves the sink (:meth:`TwoPCError.at`), and turns any
other exception leaving a sink into a :class:`SinkError` that names its type.
"""

from __future__ import annotations

from typing import Self

__all__ = [
    "BackendNotFoundError",
    "BackendNotInstalledError",
    "BackendUnavailableError",
    "BatchFailedError",
    "CheckpointMismatchError",
    "CommitError",
    "CommitStateUnknownError",
    "ConfigurationError",
    "ExtraNotInstalledError",
    "InjectedFault",
    "NoStoredOffsetsError",
    "OffsetsMismatchError",
    "PermanentSinkError",
    "PluginError",
    "ReplayMismatchError",
    "SinkError",
    "StartingOffsetsError",
    "TargetLimitError",
    "TransientSinkError",
    "TwoPCError",
    "UnsafeStartError",
    "UnsupportedFormatError",
]


class TwoPCError(Exception):
    """Root of every error raised by twopc.

    The message names the sink, batch and partition when they are known, followed by the
    cause. The same values are available as attributes for programs.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        sink_id: str | None = None,
        batch_id: int | None = None,
        partition: int | None = None,
    ) -> None:
        self.cause_message = message
        self.sink_id = sink_id
        self.batch_id = batch_id
        self.partition = partition
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.sink_id is not None:
            where.append(f"sink {self.sink_id!r}")
        if self.batch_id is not None:
            where.append(f"batch {self.batch_id}")
        if self.partition is not None:
            where.append(f"partition {self.partition}")
        if not where:
            return self.cause_message
        return f"{', '.join(where)}: {self.cause_message}"

    def at(
        self,
        *,
        sink_id: str | None = None,
        batch_id: int | None = None,
        partition: int | None = None,
    ) -> Self:
        """Fill in where the error happened, for the fields not known yet, and return the
        error itself. The core calls it where an error leaves a sink; a field a sink set
        itself is kept."""
        if self.sink_id is None and sink_id is not None:
            self.sink_id = sink_id
        if self.batch_id is None and batch_id is not None:
            self.batch_id = batch_id
        if self.partition is None and partition is not None:
            self.partition = partition
        self.args = (self._render(),)
        return self

    def __reduce__(self) -> tuple[object, ...]:
        # Errors cross process boundaries (executor -> driver); keep the keyword fields.
        return (
            _rebuild_error,
            (type(self), self.cause_message, self.sink_id, self.batch_id, self.partition),
        )


def _rebuild_error(
    cls: type[TwoPCError],
    message: str,
    sink_id: str | None,
    batch_id: int | None,
    partition: int | None,
) -> TwoPCError:
    return cls(message, sink_id=sink_id, batch_id=batch_id, partition=partition)


class ConfigurationError(TwoPCError):
    """An option or combination of options is invalid; fix the configuration."""


class CheckpointMismatchError(ConfigurationError):
    """The sink's commit log does not match the streaming query's checkpoint."""


class ExtraNotInstalledError(ConfigurationError):
    """A feature needs an optional extra that is not installed; the message says which
    (``pip install "twopc[prometheus]"``)."""


class ReplayMismatchError(ConfigurationError):
    """A batch that may be partly committed is replayed in another shape (partition count,
    naming options or input) than its first run, so it can be neither skipped nor
    rewritten partition by partition without duplicating or losing rows."""


class TargetLimitError(ConfigurationError):
    """A batch would hold more work at once than its target allows (prepared transactions,
    connections: :class:`~twopc.WorkLimit`); refused before phase 1, so nothing of it was
    written. The message names both numbers and the fixes."""


class StartingOffsetsError(ConfigurationError):
    """:func:`twopc.starting_offsets` cannot say where a new query may start; the message
    says what the target holds and what to do."""


class NoStoredOffsetsError(StartingOffsetsError):
    """The target holds no source offsets for the sink id: nothing written yet, a query
    whose source is not Kafka, a sink that does not keep them, or another sink id."""


class UnsafeStartError(StartingOffsetsError):
    """A batch is committed in some partitions and not in others, or prepared work of the
    sink id waits for recovery: no start position gives every record exactly once until
    ``twopc recover`` (with the commit log) has settled it."""


class OffsetsMismatchError(StartingOffsetsError):
    """The stored offsets are for other topics than the new query reads."""


class UnsupportedFormatError(ConfigurationError):
    """A commit log entry, committable or task report was written in a format this
    version cannot read (another twopc or sink version): refused, never misread."""


class PluginError(TwoPCError):
    """Plugin discovery or loading failed."""


class BackendNotFoundError(PluginError):
    """No backend is registered under the requested name."""


class BackendNotInstalledError(PluginError):
    """The backend exists but its optional dependencies are not installed."""


class BackendUnavailableError(PluginError):
    """The backend is registered but cannot be used (its plugin says why)."""


class SinkError(TwoPCError):
    """An error raised by a sink, or by the coordinator on a sink's behalf."""


class TransientSinkError(SinkError):
    """A failure that may go away when the call is retried."""

    retryable = True


class PermanentSinkError(SinkError):
    """A failure that retrying will not fix: bad input, schema mismatch, missing target."""


class CommitError(SinkError):
    """Phase 2 failed. The decision is recorded, so a restart commits the batch."""


class CommitStateUnknownError(CommitError):
    """The commit may or may not have happened; recovery on restart resolves it."""


class BatchFailedError(TwoPCError):
    """Phase 1 failed for the batch. Everything prepared was aborted; nothing is visible,
    except, for :class:`~twopc.CommitsInTask` sinks, partitions whose tasks had committed
    (a rerun of the batch skips them)."""


class InjectedFault(TwoPCError):
    """Raised by fault injection at a configured crash point."""
