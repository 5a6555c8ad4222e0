"""Options shared by the SQL sinks, validated when the sink is created.

Every error names the backend and the option and says what to do. Nothing here ever
quotes a part of the connection URL that may hold a password: a URL with an unencoded
``/``, ``?`` or ``#`` in its password is split in the wrong place, so the "port" or the
"database" of such a URL may be a piece of the password.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from twopc import ConfigurationError

__all__ = [
    "MODES",
    "SCHEMA_EVOLUTIONS",
    "TRANSACTION_MODES",
    "ConnectionSettings",
    "SqlOptions",
    "TableName",
    "option_error",
]

MODES = ("append", "upsert")
TRANSACTION_MODES = ("transaction", "two_phase")
SCHEMA_EVOLUTIONS = ("none", "add_columns")
TIMEOUTS = ("lock_timeout_seconds", "connect_timeout_seconds", "read_timeout_seconds")

ENCODE_HINT = (
    "special characters in the user name or password (/ ? # @ : %) must be "
    "percent-encoded, e.g. urllib.parse.quote(password, safe='')"
)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SECRET_KEY = re.compile(r"pass(word|wd|phrase)|secret", re.IGNORECASE)
_SHORTEST_MASKED = 4
"""Secrets shorter than this are not masked as plain text: masking every ``ab`` would make
messages unreadable. URL and ``password=`` forms are masked whatever their length."""


def option_error(backend: str, name: str, problem: str) -> ConfigurationError:
    """``the <backend> backend's option <name> <problem>``."""
    return ConfigurationError(f"the {backend} backend's option {name} {problem}")


def _kind(value: object) -> str:
    """``5 (int)``: a value and its type, for messages about options that hold no secret."""
    return f"{value!r} ({type(value).__name__})"


@dataclass(frozen=True)
class TableName:
    """A table name, optionally qualified by a schema (``schema.table``).

    Kept as parts and quoted by the driver's own tools, never spliced into SQL raw.
    """

    name: str
    schema: str | None = None

    @classmethod
    def parse(cls, text: object, backend: str = "sql", option: str = "table") -> TableName:
        if not isinstance(text, str) or not text.strip():
            raise option_error(
                backend,
                option,
                f"must be a table name ('name' or 'schema.name'), not {_kind(text)}",
            )
        schema, dot, name = text.rpartition(".")
        if dot and schema and name:
            return cls(name=name, schema=schema)
        return cls(name=text)

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


@dataclass(frozen=True)
class _UrlParts:
    """What a connection URL says, decoded; None where it says nothing."""

    host: str | None = None
    port: int | None = None
    user: str | None = None
    password: str | None = None
    database: str | None = None
    query: dict[str, str] = field(default_factory=dict)


_FIELDS = ("host", "port", "user", "password", "database")


@dataclass(frozen=True)
class ConnectionSettings:
    """Where and how to connect. ``repr`` and ``describe`` never show secrets."""

    host: str = "127.0.0.1"
    port: int | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    database: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_url(
        cls,
        url: str | None,
        schemes: Sequence[str],
        options: Mapping[str, Any] | None,
        *,
        backend: str = "sql",
        keys: Mapping[str, Sequence[str]] | None = None,
    ) -> ConnectionSettings:
        """Settings from the DSN and ``connect_options``.

        ``keys`` names the driver's keyword for each connection field (``database`` is
        ``dbname`` for libpq): such keys in the URL's query or in ``connect_options`` set
        the field. A field or option given twice with different values is refused, since
        one of them would silently do nothing.
        """
        if url is not None and not isinstance(url, str):
            raise option_error(
                backend, "dsn", f"must be a connection URL (a string), not {type(url).__name__}"
            )
        if options is not None and not (
            isinstance(options, Mapping) and all(isinstance(k, str) for k in options)
        ):
            raise option_error(
                backend,
                "connect_options",
                "must be a dict of the driver's keyword arguments (string keys), "
                f"not {type(options).__name__}",
            )
        parts = _parse_url(url, schemes, backend) if url else _UrlParts()
        given = dict(options or {})
        extra = _merge_query(parts.query, given, backend)
        found: dict[str, Any] = {}
        for name in _FIELDS:
            value = _field_value(name, parts, extra, tuple((keys or {}).get(name, ())), backend)
            if value is not None:
                found[name] = value
        return cls(
            host=found.get("host", "127.0.0.1"),
            port=found.get("port"),
            user=found.get("user"),
            password=found.get("password"),
            database=found.get("database"),
            options=extra,
        )

    def describe(self) -> str:
        """``user@host:port/database`` without the password or other secrets."""
        who = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        database = f"/{self.database}" if self.database else ""
        return f"{who}{self.host}{port}{database}"

    def secrets(self) -> tuple[str, ...]:
        """What messages must never show: the password and every option that looks like
        one (``sslpassword``, ``passphrase`` ...). A password equal to the user, host or
        database name is no secret from the messages that name those."""
        candidates = [self.password] + [
            v for k, v in self.options.items() if _SECRET_KEY.search(k) and isinstance(v, str)
        ]
        public = {self.user, self.host, self.database}
        return tuple(
            s
            for s in candidates
            if isinstance(s, str) and len(s) >= _SHORTEST_MASKED and s not in public
        )


def _parse_url(url: str, schemes: Sequence[str], backend: str) -> _UrlParts:
    """Split ``scheme://user:password@host:port/database?key=value`` by hand: urllib
    splits an unencoded delimiter in the password silently in the wrong place and then
    quotes the pieces in its errors."""
    head, sep, rest = url.partition("://")
    expected = " or ".join(f"{s}://" for s in schemes)
    if not sep:
        raise option_error(
            backend,
            "dsn",
            f"is not a connection URL: write {schemes[0]}://user:password@host:port/database "
            f"(it must start with {expected})",
        )
    if head.lower() not in schemes:
        shown = f"the scheme {head!r}" if _SCHEME.fullmatch(head) else "another scheme"
        raise option_error(backend, "dsn", f"has {shown}; it must start with {expected}")
    if "#" in rest:
        raise option_error(
            backend,
            "dsn",
            "contains '#', which ends a URL's address part (connection URLs have no "
            f"fragment); if the password contains '#', write it as %23: {ENCODE_HINT}",
        )
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in tail:
        raise option_error(
            backend,
            "dsn",
            "has an '@' after its host part: the user name or password probably contains "
            f"'/' or '?', which end the address part early; {ENCODE_HINT} (an '@' in the "
            "database name or a parameter is written %40)",
        )
    userinfo, at, hostport = authority.rpartition("@")
    user, _, password = userinfo.partition(":")
    host, port = _host_port(hostport, backend)
    path, _, query = tail.partition("?")
    database = unquote(path[1:]) if path.startswith("/") else ""
    return _UrlParts(
        host=unquote(host) or None,
        port=port,
        user=unquote(user) if at and user else None,
        password=unquote(password) if at and password else None,
        database=database or None,
        query=_parse_query(query, backend),
    )


def _host_port(text: str, backend: str) -> tuple[str, int | None]:
    """Host and port of ``host:port``, ``[ipv6]:port`` or ``host``."""
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise option_error(
                backend,
                "dsn",
                "has a malformed host part: '[' without its ']' (an IPv6 address is "
                f"written in brackets, e.g. [::1]:5432); {ENCODE_HINT}",
            )
        host, after = text[1:close], text[close + 1 :]
        if after and not after.startswith(":"):
            raise option_error(
                backend, "dsn", f"has a malformed host part: text after ']'; {ENCODE_HINT}"
            )
        return host, _port(after[1:], backend)
    if "]" in text or text.count(":") > 1:
        raise option_error(
            backend,
            "dsn",
            "has a malformed host part (an IPv6 address is written in brackets, e.g. "
            f"[::1]:5432); {ENCODE_HINT}",
        )
    host, _, port = text.partition(":")
    return host, _port(port, backend)


def _port(text: str, backend: str) -> int | None:
    if not text:
        return None
    if not text.isascii() or not text.isdigit() or not 0 < int(text) < 65536:
        raise option_error(
            backend,
            "dsn",
            f"has a bad port: it must be a number from 1 to 65535; {ENCODE_HINT}",
        )
    return int(text)


def _parse_query(query: str, backend: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in filter(None, query.split("&")):
        raw_key, eq, raw_value = item.partition("=")
        key = unquote(raw_key)
        if not eq or not key:
            raise option_error(
                backend,
                "dsn",
                "has a query parameter that is not key=value (write ?key=value&key=value); "
                + ENCODE_HINT,
            )
        value = unquote(raw_value)
        if key in found and found[key] != value:
            raise option_error(
                backend, "dsn", f"sets the query parameter {_name(key)} twice; give it once"
            )
        found[key] = value
    return found


def _name(key: str) -> str:
    return repr(key) if _KEY.fullmatch(key) else "(a parameter)"


def _merge_query(
    query: Mapping[str, str], given: Mapping[str, Any], backend: str
) -> dict[str, Any]:
    """``connect_options`` plus the URL's query parameters; a key in both must agree."""
    merged = dict(given)
    for key, value in query.items():
        if key in merged and str(merged[key]) != value:
            raise option_error(
                backend,
                "connect_options",
                f"and the dsn's query both set {_name(key)}, to different values; give it once",
            )
        merged.setdefault(key, value)
    return merged


def _field_value(
    name: str, parts: _UrlParts, extra: dict[str, Any], keys: tuple[str, ...], backend: str
) -> Any:
    """The one value of a connection field, from the URL or the options (whose keys are
    removed from ``extra``); refused when they disagree, without showing either value."""
    values = [getattr(parts, name)] if getattr(parts, name) is not None else []
    for key in keys:
        value = extra.pop(key, None)
        if value is not None:
            values.append(value)
    if name == "port":
        values = [_option_port(v, backend) for v in values]
    distinct = {str(v) for v in values}
    if len(distinct) > 1:
        raise option_error(
            backend,
            "connect_options",
            f"and the dsn set the {name} ({' / '.join(keys)}) to different values; give it once",
        )
    return values[0] if values else None


def _option_port(value: object, backend: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and 0 < int(value) < 65536:
        return int(value)
    raise option_error(
        backend, "connect_options", "has a bad port: it must be a number from 1 to 65535"
    )


_COLUMN = re.compile(r"^[^\x00]{1,63}$")


def column_names(backend: str, value: object) -> tuple[str, ...]:
    """``key_columns`` as a tuple: one name, or a list or tuple of names."""
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise option_error(
            backend,
            "key_columns",
            f"must be a column name or a list of column names, not {_kind(value)}",
        )
    return tuple(value)


def seconds(backend: str, name: str, value: object, most: float) -> float:
    """A positive, finite number of seconds of at most ``most``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise option_error(backend, name, f"must be a number of seconds, not {_kind(value)}")
    if not value > 0:
        raise option_error(backend, name, f"must be positive (a number of seconds), not {value!r}")
    if not math.isfinite(value) or value > most:
        raise option_error(
            backend, name, f"must be a finite number of seconds up to {most:.0f}, not {value!r}"
        )
    return float(value)


@dataclass(frozen=True)
class SqlOptions:
    """What to write and how; see each backend's documentation for the table of options."""

    table: TableName
    mode: str = "append"
    key_columns: tuple[str, ...] = ()
    order_column: str | None = None
    delete_column: str | None = None
    shuffle_by_key: bool = True
    """Shuffle the batch by ``key_columns`` before phase 1, so all rows of a key meet in one
    task. ``False``: the caller promises each key is in one partition of a batch already."""
    create_table: bool = False
    schema_evolution: str = "none"
    """``add_columns``: add the data's new columns to the table as nullable columns."""
    transaction_mode: str = "transaction"
    marker_table: TableName = TableName("twopc_markers")
    lock_timeout_seconds: float = 60.0
    connect_timeout_seconds: float = 60.0
    read_timeout_seconds: float = 300.0
    """Client side: how long the sink waits for any answer of the server (a stalled server
    keeps the connection open and silent; no server-side setting can end that wait)."""
    backend: str = field(default="sql", compare=False)
    """The backend's name, for messages."""

    def __post_init__(self) -> None:
        self._check_choices()
        self._check_columns()
        self._check_combinations()

    def _error(self, name: str, problem: str) -> ConfigurationError:
        return option_error(self.backend, name, problem)

    def _check_choices(self) -> None:
        for name, allowed in (
            ("mode", MODES),
            ("transaction_mode", TRANSACTION_MODES),
            ("schema_evolution", SCHEMA_EVOLUTIONS),
        ):
            value = getattr(self, name)
            if not isinstance(value, str) or value not in allowed:
                raise self._error(name, f"must be one of {', '.join(allowed)}, not {value!r}")
        for name in ("create_table", "shuffle_by_key"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise self._error(name, f"must be True or False, not {_kind(value)}")

    def _check_columns(self) -> None:
        for name in ("order_column", "delete_column"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise self._error(name, f"must be a column name or None, not {_kind(value)}")
        for column in (*self.key_columns, self.order_column, self.delete_column):
            if column is not None and not _COLUMN.match(column):
                raise self._error(
                    "key_columns" if column in self.key_columns else "order_column/delete_column",
                    f"has an invalid column name {column!r} (1 to 63 characters, no NUL)",
                )
        if len(set(self.key_columns)) != len(self.key_columns):
            raise self._error("key_columns", "has duplicates; name each key column once")

    def _check_combinations(self) -> None:
        keys = self.key_columns
        if self.mode == "upsert" and not keys:
            raise self._error("mode", "'upsert' needs key_columns: the columns that identify a row")
        if self.delete_column and not keys:
            raise self._error("delete_column", "needs key_columns to find the rows to delete")
        if not self.needs_staging and keys:
            raise self._error(
                "key_columns",
                "does nothing with mode='append' (only upserts and delete_column use keys): "
                "use mode='upsert' to update rows by key, or leave key_columns out",
            )
        if not self.needs_staging and self.order_column:
            raise self._error(
                "order_column",
                "does nothing with mode='append': it only picks one row among rows with the "
                "same key, for mode='upsert' or a delete_column; use mode='upsert' with "
                "key_columns, or leave order_column out",
            )
        if not self.needs_staging and not self.shuffle_by_key:
            raise self._error(
                "shuffle_by_key",
                "does nothing with mode='append': only upserts and a delete_column shuffle "
                "the batch by key; leave shuffle_by_key out",
            )
        if self.order_column in keys:
            raise self._error(
                "order_column",
                f"{self.order_column!r} is one of key_columns: rows with the same key have "
                "the same value in it, so it decides nothing; name another column (an event "
                "time, a version), or leave order_column out",
            )
        if self.delete_column is not None and self.delete_column in keys:
            raise self._error(
                "delete_column",
                f"{self.delete_column!r} is one of key_columns; the delete flag must be a "
                "boolean column of its own",
            )
        if self.delete_column is not None and self.delete_column == self.order_column:
            raise self._error(
                "delete_column", "and order_column are the same column; name two columns"
            )
        if self.marker_table == self.table:
            raise self._error(
                "marker_table", f"is the target table {self.table} itself; name another table"
            )

    @property
    def needs_staging(self) -> bool:
        """Upserts, deletes and de-duplication go through a staging table."""
        return self.mode == "upsert" or self.delete_column is not None
