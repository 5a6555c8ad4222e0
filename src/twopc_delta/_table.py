"""The table the sink writes: loaded with deltalake, checked for what this sink can write,
and where its files live (an fsspec filesystem for its root).

:class:`TableAccess` holds strings and mappings only, so the sink that carries it pickles
to the executors. deltalake's errors leave as twopc's, naming the table, with the storage
options' credentials masked.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, DeltaProtocolError, TableNotFoundError

from twopc import PermanentSinkError, TransientSinkError
from twopc.secrets import redact
from twopc.storage import filesystem_for

if TYPE_CHECKING:
    from twopc_delta._log import TableInfo

__all__ = ["WRITABLE_FEATURES", "Place", "TableAccess", "arrow_schema", "unsupported_features"]

_log = logging.getLogger("twopc.delta")

_UNSUPPORTED = re.compile(
    r"Unsupported: Feature|unsupported table features|unsupported (reader|writer) feature", re.I
)
"""deltalake's words for a table whose protocol it cannot read or write: no retry helps."""

_SECRET_HINTS = ("secret", "key", "token", "password", "sas", "credential", "signature")

WRITABLE_FEATURES = frozenset(
    {
        "appendOnly",  # honoured: deltalake refuses removes on such a table (append mode only)
        "invariants",  # refused per table below when a column declares one
        "checkConstraints",  # refused per table below when a constraint exists
        "changeDataFeed",  # appends need no change files; upsert refuses a table with CDF on
        "generatedColumns",  # refused per table below when a column is generated
        "columnMapping",  # refused per table below unless the mapping mode is "none"
        "identityColumns",  # refused per table below when a column is an identity
        "timestampNtz",
        "domainMetadata",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "deletionVectors",  # upsert refuses to rewrite a file that has one
    }
)
"""Writer features (and the legacy writer versions' equivalents) of tables this sink
writes: what it writes is plain add and remove actions, so every feature that asks more of
a writer is refused up front."""


@dataclass(frozen=True)
class Place:
    """The table's root on its filesystem."""

    fs: Any
    path: str
    """The root as an fsspec path (no protocol)."""

    def join(self, relative: str) -> str:
        return f"{self.path.rstrip('/')}/{relative}"


@dataclass(frozen=True)
class TableAccess:
    """How to reach one table: its URI and storage options, and what creating it takes."""

    uri: str
    storage_options: Mapping[str, str] = field(repr=False)
    """May hold credentials: never in ``repr`` or messages."""
    create_table: bool = False
    partition_by: tuple[str, ...] = ()
    configuration: Mapping[str, str] = field(default_factory=dict)

    def clean(self, exc: BaseException) -> str:
        """An exception's text with the storage options' credentials masked."""
        secrets = [
            str(v)
            for k, v in self.storage_options.items()
            if any(hint in k.lower() for hint in _SECRET_HINTS)
        ]
        return redact(f"{type(exc).__name__}: {exc}", secrets)

    @cached_property
    def place(self) -> Place:
        fs, root = filesystem_for(self.uri, dict(self.storage_options))
        return Place(fs, root)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("place", None)  # a filesystem object: opened again where it is used
        return state

    def load(self) -> DeltaTable | None:
        """The table as its log holds it now, or ``None`` when there is none yet."""
        try:
            return DeltaTable(self.uri, storage_options=dict(self.storage_options) or None)
        except TableNotFoundError:
            return None
        except DeltaError as exc:
            raise self.error("cannot load", exc) from None
        except OSError as exc:
            raise self.error("cannot load", exc) from None

    def require(self) -> DeltaTable:
        """The table; a clear error when it does not exist."""
        table = self.load()
        if table is None:
            self.require_log()
        assert table is not None
        return table

    def require_log(self) -> NoReturn:
        """Raise the clear error of a table that does not exist."""
        raise PermanentSinkError(
            f"Delta table {self.uri} does not exist (set create_table=True to create it "
            "from the first batch's columns)"
        )

    def error(self, what: str, exc: BaseException) -> PermanentSinkError | TransientSinkError:
        """``exc`` as twopc's error: permanent for a denied permission or a protocol the
        sink cannot write, else transient."""
        cause = self.clean(exc)
        text = f"{what} Delta table {self.uri}: {cause}"
        if isinstance(exc, PermissionError) or "ermission denied" in cause:
            return PermanentSinkError(f"{text} (no permission on the table's location)")
        if isinstance(exc, DeltaProtocolError):
            return PermanentSinkError(text)
        if _UNSUPPORTED.search(cause):
            return PermanentSinkError(
                f"{text} (the table's protocol asks for a feature deltalake does not support: "
                "the twopc delta sink cannot write this table)"
            )
        return TransientSinkError(text)

    def check_writable(self, info: TableInfo, *, upsert: bool) -> None:
        """Refuse a table whose protocol asks more of a writer than this sink does."""
        reasons = unsupported_features(info, upsert=upsert)
        if reasons:
            raise PermanentSinkError(
                f"Delta table {self.uri} uses what the twopc delta sink cannot write: "
                f"{'; '.join(reasons)}"
            )


def arrow_schema(table: DeltaTable) -> pa.Schema:
    """The table's schema as pyarrow's (deltalake hands out arro3's)."""
    return pa.schema(table.schema().to_arrow())


def unsupported_features(info: TableInfo, *, upsert: bool) -> list[str]:
    """Why the sink cannot write the table ``info`` describes (empty when it can)."""
    config = info.configuration
    reasons = []
    features = set(info.writer_features or ())
    unknown = sorted(features - WRITABLE_FEATURES)
    if unknown:
        reasons.append(f"writer feature(s) {', '.join(unknown)}")
    if info.writer_features is None and info.min_writer_version > 7:
        reasons.append(f"writer version {info.min_writer_version}")
    mapping = config.get("delta.columnMapping.mode", "none")
    if mapping not in ("none", None):
        reasons.append(f"column mapping (delta.columnMapping.mode={mapping})")
    constraints = sorted(k for k in config if k.startswith("delta.constraints."))
    if constraints:
        reasons.append(f"check constraints ({', '.join(constraints)})")
    for name, metadata in info.column_metadata().items():
        for key, what in (
            ("delta.invariants", "an invariant"),
            ("delta.generationExpression", "a generated column"),
            ("delta.identity.start", "an identity column"),
        ):
            if key in metadata:
                reasons.append(f"column {name!r} is {what}")
    if upsert and str(config.get("delta.enableChangeDataFeed", "false")).lower() == "true":
        reasons.append("mode='upsert' on a table with the change data feed on")
    if upsert and str(config.get("delta.appendOnly", "false")).lower() == "true":
        reasons.append("mode='upsert' on an append-only table (delta.appendOnly=true)")
    return reasons
