"""The Iceberg sink's pure parts: option checks and the ``partition_by`` notation, the
marker's arithmetic and its property text, a data file's description through JSON, the
embedded catalog's properties and their masking."""

from __future__ import annotations

import decimal
import uuid
from typing import Any

import pytest

pytest.importorskip("pyiceberg")

from twopc import ConfigurationError, SourceOffsets
from twopc_iceberg._catalogs import catalog_properties, public_properties
from twopc_iceberg._datafiles import WrittenFile
from twopc_iceberg._markers import NO_MARKER, _parse_property
from twopc_iceberg._options import PartitionField, parse_partition_by, s3_storage_options
from twopc_iceberg.sink import IcebergSink

pytestmark = pytest.mark.unit


def test_partition_by_reads_columns_and_transforms() -> None:
    assert parse_partition_by(["region", "day(ts)", "bucket(16, id)", " truncate( 4 ,name) "]) == (
        PartitionField("region", "identity"),
        PartitionField("ts", "day"),
        PartitionField("id", "bucket", 16),
        PartitionField("name", "truncate", 4),
    )
    assert [f.name for f in parse_partition_by(["day(ts)", "bucket(16, id)"])] == [
        "ts_day",
        "id_bucket_16",
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("day(ts)", "a list of fields"),
        (["bucket(id)"], "take a width first"),
        (["day(3, ts)"], "take a width first"),
        (["weekday(ts)"], r"cannot read 'weekday\(ts\)'"),
        (["bucket(0, id)"], "width below 1"),
        ([""], "is not a column or transform"),
    ],
)
def test_a_partition_by_it_cannot_read_is_refused(value: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_partition_by(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"table": "events"}, "'namespace.table'"),
        ({"table": "db.t", "mode": "merge"}, "mode must be one of 'append', 'upsert'"),
        ({"table": "db.t", "key_columns": ["id"]}, "key_columns only apply to mode='upsert'"),
        ({"table": "db.t", "mode": "upsert", "key_columns": "id"}, "a list of columns"),
        ({"table": "db.t", "partition_by": ["id"]}, "needs create_table=True"),
        ({"table": "db.t", "target_file_size": 10}, "at least 1024 bytes"),
        ({"table": "db.t", "commit_retries": -1}, "0 or more"),
        ({"table": "db.t", "schema_evolution": "all"}, "schema_evolution must be one of"),
        ({"table": "db.t", "warehouse": "s3://lake/wh"}, "must then be a local directory"),
    ],
)
def test_bad_options_are_refused_naming_the_option(
    options: dict[str, object], message: str
) -> None:
    table = options.pop("table")
    with pytest.raises(ConfigurationError, match=message):
        IcebergSink(table, **options)  # type: ignore[arg-type]


def test_the_marker_holds_a_batch_and_every_earlier_one() -> None:
    marker = NO_MARKER.after(4, {0: 11, 2: 12})
    assert marker.holds(4, 0) and marker.holds(4, 2) and not marker.holds(4, 1)
    assert marker.holds(3, 1) and not marker.holds(5, 0)
    assert marker.committed_attempt(4, 2) == 12 and marker.committed_attempt(3, 0) is None
    grown = marker.after(4, {1: 13})
    assert grown.partitions == {0, 1, 2}
    later = marker.after(5, {0: 14})
    assert (later.batch_id, later.attempts, later.committed_at is not None) == (5, {0: 14}, True)
    assert _parse_property(grown.to_property()) == grown
    offsets = SourceOffsets(5, {"orders": {0: 7, 1: 9}})
    counted = marker.after(5, {0: 14}, count=2, offsets=offsets)
    assert _parse_property(counted.to_property()) == counted
    assert counted.after(5, {1: 15}).offsets == offsets  # kept as the batch completes
    assert counted.summary("ev", "q1", [0])["twopc.partition-count"] == "2"
    assert _parse_property("not json") is None
    summary = grown.summary("ev", "q1", [1])
    assert summary == {
        "twopc.sink-id": "ev",
        "twopc.query-id": "q1",
        "twopc.batch-id": "4",
        "twopc.partitions": "1",
    }


def test_a_data_file_description_survives_json() -> None:
    written = WrittenFile(
        path="s3://lake/wh/db/t/data/part-00000.parquet",
        spec_id=1,
        partition=(19723, "eu", decimal.Decimal("1.50"), b"\x00\xff", uuid.UUID(int=7), None),
        partition_path="ts_day=2024-01-01/region=eu",
        size=1234,
        stats={
            "record_count": 10,
            "column_sizes": {1: 40, 2: 30},
            "lower_bounds": {1: b"\x01\x00", 2: b"a"},
            "upper_bounds": {1: b"\x09\x00", 2: b"z"},
            "split_offsets": [4],
        },
    )
    import json

    again = WrittenFile.from_json(json.loads(json.dumps(written.to_json())))
    assert again == written
    assert again.rows == 10
    data_file = again.data_file()
    assert data_file.file_path == written.path and data_file.record_count == 10
    assert data_file.lower_bounds == {1: b"\x01\x00", 2: b"a"}


def test_a_file_without_field_ids_says_so_in_json() -> None:
    import json
    from dataclasses import replace

    written = WrittenFile("file:///t/data/a.parquet", 0, (), "", 10, {"record_count": 1})
    assert "field_ids" not in written.to_json()  # what the Python path wrote before
    spark = replace(written, field_ids=False)
    assert WrittenFile.from_json(json.loads(json.dumps(spark.to_json()))) == spark


def test_spark_writes_flat_types_with_the_table_s_settings() -> None:
    from pyiceberg.types import DecimalType, ListType, StringType, UUIDType

    from twopc_iceberg._spark_write import spark_options, spark_type

    assert spark_type(DecimalType(12, 2)) == "DECIMAL(12,2)"
    assert spark_type(StringType()) == "STRING"
    assert spark_type(UUIDType()) is None
    assert spark_type(ListType(1, StringType())) is None
    assert spark_options({}) == {
        "compression": "zstd",
        "partitionOverwriteMode": "static",
    }
    options = spark_options(
        {
            "write.parquet.compression-codec": "uncompressed",
            "write.parquet.row-group-size-bytes": "1048576",
        }
    )
    assert options["compression"] == "none" and options["parquet.block.size"] == "1048576"


def test_the_embedded_catalog_is_a_sqlite_file_in_the_warehouse(tmp_path: object) -> None:
    properties = catalog_properties("/data/wh", {})
    assert properties == {
        "type": "sql",
        "uri": "sqlite:////data/wh/twopc-catalog.db",
        "warehouse": "file:///data/wh",
    }
    given = {"type": "rest", "uri": "http://catalog:8181"}
    assert catalog_properties(None, given) == given


def test_credentials_never_show() -> None:
    shown = public_properties(
        {
            "uri": "postgresql+psycopg://etl:pw-123@db/lake",
            "s3.secret-access-key": "sk-456",
            "s3.access-key-id": "AKIA",
            "token": "tok-789",
        }
    )
    text = repr(shown)
    assert "pw-123" not in text and "sk-456" not in text and "tok-789" not in text
    assert "AKIA" in text  # a key id is not a secret
    options = s3_storage_options(
        {"s3.endpoint": "http://s3:9000", "s3.access-key-id": "AKIA", "s3.region": "eu-west-1"}
    )
    assert options == {
        "key": "AKIA",
        "client_kwargs": {"endpoint_url": "http://s3:9000", "region_name": "eu-west-1"},
    }


def test_the_driver_s_loaded_table_never_travels_to_the_tasks(tmp_path: object) -> None:
    """The Spark path keeps the table it loaded for the run's staging and commit; a copy of
    the sink pickled for the tasks leaves it behind (it holds the catalog's connections)."""
    import pickle

    sink = IcebergSink("db.t", warehouse=str(tmp_path))
    sink._loaded = (None, lambda: None)  # type: ignore[assignment]  # not picklable
    copy = pickle.loads(pickle.dumps(sink))
    assert not hasattr(copy, "_loaded") and copy.table == "db.t"
    assert sink._loaded is not None  # the driver's own object keeps it


def test_a_batch_already_of_the_table_s_types_is_written_without_the_projection() -> None:
    """Spark's write job skips its casts only for a batch of exactly the table's columns, in
    order, of the types they are cast to, into an unpartitioned table (the engine compares
    ``df.dtypes`` with this)."""
    from pyiceberg.partitioning import PartitionField as SpecField
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DecimalType, LongType, NestedField, StringType, TimestampType

    from twopc_iceberg._spark_write import identity_dtypes

    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "ts", TimestampType()),
        NestedField(3, "name", StringType()),
        NestedField(4, "amount", DecimalType(10, 2)),
    )
    unpartitioned = PartitionSpec()
    columns = ["id", "ts", "name", "amount"]
    assert identity_dtypes(schema, unpartitioned, columns) == (
        ("id", "bigint"),
        ("ts", "timestamp_ntz"),
        ("name", "string"),
        ("amount", "decimal(10,2)"),
    )
    assert identity_dtypes(schema, unpartitioned, ["ts", "id", "name", "amount"]) == ()
    assert identity_dtypes(schema, unpartitioned, ["id", "ts", "name"]) == ()
    by_name = PartitionSpec(SpecField(3, 1000, IdentityTransform(), "name"))
    assert identity_dtypes(schema, by_name, columns) == ()


def test_a_batch_transaction_works_its_view_out_once_per_change(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyiceberg recomputes a transaction's metadata view (a deep copy of the whole
    metadata) at every read; the batch's transaction reads the loaded metadata until
    something is staged and keeps each view until the next update, and the commit it makes
    is pyiceberg's: the table gains the snapshot and the property."""
    import pyarrow as pa
    import pyiceberg.table as pyiceberg_table

    from twopc_iceberg._transaction import batch_transaction

    sink = IcebergSink("db.events", warehouse=str(tmp_path), create_table=True)
    catalog = sink.access.catalog_object()
    catalog.create_namespace("db")
    table = catalog.create_table("db.events", schema=pa.schema([("id", pa.int64())]))
    computed = []
    original = pyiceberg_table.update_table_metadata

    def counted(*args: object, **kwargs: object) -> object:
        computed.append(True)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pyiceberg_table, "update_table_metadata", counted)
    txn = batch_transaction(table)
    assert txn.table_metadata is txn.table_metadata
    assert txn.table_metadata.properties["commit.retry.num-retries"] == "0"
    assert computed == []  # nothing staged yet: the loaded metadata as it is
    txn.set_properties({"twopc.test": "1"})
    assert txn.table_metadata.properties["twopc.test"] == "1"
    assert txn.table_metadata is txn.table_metadata
    assert len(computed) == 1
    txn.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    txn.commit_transaction()
    landed = catalog.load_table("db.events")
    assert landed.properties["twopc.test"] == "1"
    assert "commit.retry.num-retries" not in landed.properties
    assert landed.scan().to_arrow().num_rows == 2
    assert len(landed.metadata.snapshots) == 1


def test_truncate_of_int_and_long_is_computed_in_spark_sql_and_of_strings_refused() -> None:
    from types import SimpleNamespace

    from pyiceberg.partitioning import PartitionField as SpecField
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import TruncateTransform
    from pyiceberg.types import IntegerType, LongType, NestedField, StringType

    from twopc_iceberg._spark_write import projection, table_refusals

    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "small", IntegerType()),
        NestedField(3, "name", StringType()),
    )

    def table(*fields: SpecField) -> Any:
        return SimpleNamespace(schema=lambda: schema, spec=lambda: PartitionSpec(*fields))

    numbers = table(
        SpecField(1, 1000, TruncateTransform(10), "id_trunc"),
        SpecField(2, 1001, TruncateTransform(3), "small_trunc"),
    )
    assert table_refusals(numbers) == []
    select, partition_by = projection(numbers, ["id", "small"], "db.t")
    assert partition_by == ("__twopc_partition_0", "__twopc_partition_1")
    assert select[-2:] == (
        "CAST((CAST(`id` AS BIGINT)) - pmod(CAST(`id` AS BIGINT), 10) AS BIGINT)"
        " AS `__twopc_partition_0`",
        "CAST((CAST(`small` AS INT)) - pmod(CAST(`small` AS INT), 3) AS INT)"
        " AS `__twopc_partition_1`",
    )
    strings = table(SpecField(3, 1000, TruncateTransform(4), "name_trunc"))
    assert table_refusals(strings) == [
        "partition field 'name_trunc' is truncate[4](name) of a string column "
        "(Spark's writer truncates int and long columns)"
    ]


def test_a_snapshot_summary_names_its_partitions_as_runs() -> None:
    from twopc_iceberg._markers import _parse_partitions, partition_ranges

    assert partition_ranges(range(1000)) == "0-999"
    assert partition_ranges([9, 0, 1, 2, 3, 4, 7, 10, 11, 12, 4]) == "0-4,7,9-12"
    assert partition_ranges([5]) == "5" and partition_ranges([]) == ""
    for partitions in ([], [5], list(range(1000)), [0, 1, 2, 3, 4, 7, 9, 10, 11, 12]):
        assert sorted(_parse_partitions(partition_ranges(partitions))) == partitions
    # what twopc 0.2 wrote still reads
    assert sorted(_parse_partitions("0,1,2,5")) == [0, 1, 2, 5]
    assert _parse_partitions("0-x,3") == {3: -1}
