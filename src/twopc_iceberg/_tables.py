"""The table the sink writes: loaded from its catalog, created from a batch's columns,
widened by new columns; and where its files live (fsspec filesystems for its locations).

:class:`TableAccess` holds strings and mappings only, so the sink that carries it pickles
to the executors; every process opens the catalog once (:func:`load_catalog_cached`).
pyiceberg's and the catalog's errors leave as twopc's, with credentials masked.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import Table

from twopc import ConfigurationError, PermanentSinkError, TransientSinkError
from twopc.secrets import redact
from twopc.storage import filesystem_for
from twopc_iceberg._catalogs import catalog_secrets, forget_catalog, load_catalog_cached
from twopc_iceberg._options import PartitionField

__all__ = ["DEFAULT_FILE_SIZE", "Place", "TableAccess"]

_log = logging.getLogger("twopc.iceberg")

DEFAULT_FILE_SIZE = 512 * 1024 * 1024
"""Iceberg's own default for ``write.target-file-size-bytes``."""


@dataclass(frozen=True)
class Place:
    """A location of the table on its filesystem."""

    fs: Any
    path: str
    """The location as an fsspec path (no protocol)."""
    prefix: str
    """What turns a path back into the URL Iceberg keeps (``file://``, ``s3://``)."""

    def path_of(self, url: str) -> str:
        return url.removeprefix(self.prefix) if self.prefix else url


@dataclass(frozen=True)
class TableAccess:
    """How to reach one table: catalog, identifier, and what creating it takes."""

    table: str
    catalog: str
    properties: Mapping[str, str] = field(repr=False)
    """May hold credentials: never in ``repr`` (:func:`public_properties` masks them)."""
    storage_options: Mapping[str, Any] = field(repr=False)
    create_table: bool = False
    partition_by: tuple[PartitionField, ...] = ()
    table_properties: Mapping[str, str] = field(default_factory=dict)
    add_columns: bool = False
    retries: int = 10

    # -- the catalog ----------------------------------------------------------------------

    def catalog_object(self) -> Catalog:
        try:
            return load_catalog_cached(self.catalog, self.properties)
        except ConfigurationError:
            raise
        except Exception as exc:
            raise TransientSinkError(
                f"cannot open the Iceberg catalog {self.catalog!r}: {self.clean(exc)}"
            ) from None

    def clean(self, exc: BaseException) -> str:
        """An exception's text with the catalog's credentials masked."""
        return redact(f"{type(exc).__name__}: {exc}", catalog_secrets(self.properties))

    def load(self) -> Table | None:
        """The table as the catalog holds it now, or ``None`` when it does not exist."""
        catalog = self.catalog_object()
        try:
            return catalog.load_table(self.table)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None
        except Exception as exc:
            forget_catalog(self.catalog, self.properties)
            raise TransientSinkError(
                f"cannot load table {self.table} from catalog {self.catalog!r}: {self.clean(exc)}"
            ) from None

    def require(self) -> Table:
        """The table; a clear error when it does not exist."""
        table = self.load()
        if table is None:
            raise PermanentSinkError(
                f"table {self.table} does not exist in catalog {self.catalog!r} (set "
                "create_table=True to create it from the first batch's columns)"
            )
        return table

    def for_data(self, schema: pa.Schema) -> Table:
        """The table a task writes ``schema``'s rows into: created if missing and allowed,
        with the data's new columns added if allowed, else a clear refusal."""
        table = self.load()
        if table is None:
            if not self.create_table:
                self.require()
            table = self._create(schema)
        return self._evolve(table, schema)

    def _create(self, schema: pa.Schema) -> Table:
        """Create the table from the data's columns (another task may win the race)."""
        catalog = self.catalog_object()
        self._create_namespace(catalog, self.table.rsplit(".", 1)[0])
        for partition in self.partition_by:
            if partition.column not in schema.names:
                raise PermanentSinkError(
                    f"partition_by names column {partition.column!r}, which the data does "
                    f"not have (columns: {schema.names})"
                )
        try:
            with catalog.create_table_transaction(
                self.table, schema=schema, properties=dict(self.table_properties)
            ) as txn:
                if self.partition_by:
                    with txn.update_spec() as spec:
                        for partition in self.partition_by:
                            spec.add_field(
                                partition.column, partition.iceberg_transform(), partition.name
                            )
        except TableAlreadyExistsError:
            pass
        except CommitFailedException as exc:
            # another task created it between our look and our create (the SQL catalog
            # says so with a failed commit, not TableAlreadyExistsError)
            existing = self.load()
            if existing is not None:
                return existing
            raise TransientSinkError(
                f"cannot create table {self.table}: {self.clean(exc)}"
            ) from None
        except ValueError as exc:
            raise PermanentSinkError(
                f"cannot create table {self.table}: {self.clean(exc)}"
            ) from None
        else:
            _log.info("twopc iceberg: created table %s", self.table)
        return self.require()

    def _create_namespace(self, catalog: Catalog, namespace: str) -> None:
        """Create the namespace unless it exists; another task creating it at the same
        time is fine (the SQL catalog then fails with a unique-key violation)."""
        try:
            catalog.create_namespace_if_not_exists(namespace)
        except NamespaceAlreadyExistsError:
            pass
        except Exception as exc:
            with contextlib.suppress(Exception):
                if catalog.namespace_exists(namespace):
                    return
            raise TransientSinkError(
                f"cannot create namespace {namespace} for table {self.table}: {self.clean(exc)}"
            ) from None

    def _evolve(self, table: Table, schema: pa.Schema) -> Table:
        """Add the data's columns the table lacks (nullable) if allowed, else refuse."""
        new = _new_columns(table, schema)
        if not new:
            return table
        names = [f.name for f in new]
        if not self.add_columns:
            raise PermanentSinkError(
                f"the data has column(s) {names} that table {self.table} does not have "
                "(schema_evolution='add_columns' adds them)"
            )
        for attempt in range(self.retries + 1):
            try:
                with table.update_schema() as update:
                    update.union_by_name(pa.schema([f.with_nullable(True) for f in new]))
            except CommitFailedException:
                # another task changed the schema first (maybe adding these): look again
                time.sleep(0.05 * (attempt + 1))
                table = self.require()
                new = _new_columns(table, schema)
                if not new:
                    return table
                continue
            except (ValueError, TypeError) as exc:
                raise PermanentSinkError(
                    f"cannot add column(s) {names} to table {self.table}: {exc}"
                ) from None
            _log.info("twopc iceberg: added column(s) %s to %s", names, self.table)
            return self.require()
        raise TransientSinkError(
            f"adding column(s) {names} to table {self.table} kept losing to other writers"
        )

    # -- where the files are ---------------------------------------------------------------

    def place(self, location: str) -> Place:
        """``location`` (a URL the table names) on its fsspec filesystem."""
        fs, path = filesystem_for(location, dict(self.storage_options))
        prefix = location[: len(location) - len(path)] if location.endswith(path) else ""
        if not prefix and "://" in location:
            prefix = location.split("://", 1)[0] + "://"
        return Place(fs, path, prefix)

    def home(self, table: Table) -> Place:
        """The table's own location (the sink's records live there)."""
        return self.place(table.location())

    def data(self, table: Table) -> Place:
        """Where the table's data files go (``write.data.path``, else ``<location>/data``)."""
        return self.place(
            table.properties.get("write.data.path") or f"{table.location().rstrip('/')}/data"
        )

    @staticmethod
    def target_size(table: Table, chosen: int | None) -> int:
        return chosen or int(
            table.properties.get("write.target-file-size-bytes", DEFAULT_FILE_SIZE)
        )


def _new_columns(table: Table, schema: pa.Schema) -> list[pa.Field]:
    known = {f.name for f in table.schema().fields}
    return [f for f in schema if f.name not in known]
