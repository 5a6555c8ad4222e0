"""The Delta backend's pieces without a table: option checks, file statistics, partition
values, the protocol check, the layout's names, the payload's round trip."""

from __future__ import annotations

import datetime
import json
import pickle

import pyarrow as pa
import pytest

from twopc import ConfigurationError, PermanentSinkError
from twopc.table_formats import AttemptId, parse_record_name

pytest.importorskip("deltalake")

from twopc_delta import DeltaPayload, DeltaSink
from twopc_delta._datafiles import (
    WrittenFile,
    check_partition_types,
    conform,
    file_stats,
    split_by_partition,
)
from twopc_delta._layout import attempt_data_dir, relative_uri
from twopc_delta._log import TableInfo
from twopc_delta._table import unsupported_features

pytestmark = pytest.mark.unit

SCHEMA = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "merge"}, "mode must be one of"),
        ({"mode": "upsert"}, "needs key_columns"),
        ({"key_columns": ["id"]}, "only apply to mode='upsert'"),
        ({"partition_by": ["v"]}, "needs create_table=True"),
        ({"schema_evolution": "all"}, "schema_evolution must be one of"),
        ({"commit_retries": -1}, "commit_retries must be 0 or more"),
        ({"key_columns": "id", "mode": "upsert"}, "list of column names"),
    ],
)
def test_bad_options_are_refused_naming_the_option(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        DeltaSink("/tmp/t", **options)  # type: ignore[arg-type]


def test_the_sink_pickles_and_keeps_credentials_out_of_its_repr() -> None:
    sink = DeltaSink("s3://b/t", storage_options={"aws_secret_access_key": "s3cr3t"})
    assert "s3cr3t" not in repr(sink)
    assert pickle.loads(pickle.dumps(sink)).table_uri == "s3://b/t"
    error = sink.access.error("cannot load", OSError("denied for key s3cr3t"))
    assert "s3cr3t" not in str(error)


def test_file_statistics_keep_bounds_only_where_they_are_exact() -> None:
    table = pa.table(
        {
            "id": pa.array([3, 1, None], pa.int64()),
            "name": ["b", "a", "x" * 100],
            "f": pa.array([1.0, float("nan"), 2.0]),
            "day": pa.array([datetime.date(2026, 1, 2)] * 3),
            "ts": pa.array([datetime.datetime(2026, 1, 1)] * 3, pa.timestamp("us")),
        }
    )
    stats = json.loads(file_stats(table))
    assert stats["numRecords"] == 3
    assert stats["minValues"] == {"id": 1, "day": "2026-01-02"}
    assert stats["maxValues"] == {"id": 3, "day": "2026-01-02"}
    assert stats["nullCount"] == {"id": 1, "name": 0, "f": 0, "day": 0, "ts": 0}


def test_partitions_split_rows_and_leave_their_column_out_of_the_files() -> None:
    batch = pa.record_batch({"id": [1, 2, 3, 4], "v": ["a", None, "a", "b"]})
    pieces = {
        json.dumps(values): (piece.column("id").to_pylist(), positions.to_pylist())
        for values, piece, positions in split_by_partition(batch, ["v"])
    }
    assert pieces == {
        '{"v": "a"}': ([1, 3], [0, 2]),
        '{"v": null}': ([2], [1]),
        '{"v": "b"}': ([4], [3]),
    }
    with pytest.raises(PermanentSinkError, match="partitions by strings"):
        check_partition_types(pa.schema([("v", pa.float64())]), ["v"], "/t")


def test_conform_casts_by_name_fills_nullable_columns_and_refuses_others() -> None:
    target = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    out = conform(
        pa.record_batch({"id": pa.array([1], pa.int32())}), target, add_columns=False, table="/t"
    )
    assert out.schema == target and out.column("v").null_count == 1
    with pytest.raises(PermanentSinkError, match=r"no column 'id'.*/t requires"):
        conform(pa.record_batch({"v": ["x"]}), target, add_columns=False, table="/t")
    with pytest.raises(PermanentSinkError, match=r"'w' that Delta table /t does not have"):
        conform(pa.record_batch({"id": [1], "w": [2]}), target, add_columns=False, table="/t")
    wider = conform(pa.record_batch({"id": [1], "w": [2]}), target, add_columns=True, table="/t")
    assert wider.schema.names == ["id", "v", "w"]


def test_the_protocol_check_names_what_the_sink_cannot_write() -> None:
    plain = TableInfo(0, SCHEMA, ())
    assert unsupported_features(plain, upsert=True) == []
    odd = TableInfo(
        0,
        SCHEMA,
        (),
        {"delta.constraints.c": "id > 0", "delta.appendOnly": "true"},
        7,
        ("rowTracking", "appendOnly"),
    )
    reasons = unsupported_features(odd, upsert=True)
    assert reasons[0] == "writer feature(s) rowTracking"
    assert any("check constraints" in r for r in reasons)
    assert any("append-only" in r for r in reasons)
    assert not any("append-only" in r for r in unsupported_features(odd, upsert=False))


def test_layout_names_round_trip() -> None:
    attempt = AttemptId("q", 3, 1, 2**40)
    assert attempt_data_dir("", "s", attempt) == f"twopc-data/s/q/3/1-{2**40}"
    assert parse_record_name(f"1-{2**40}.json") == (1, 2**40, ".json")
    assert parse_record_name("rewrite-ab.started") is None
    assert relative_uri("twopc-data/my sink/x=1/part.parquet") == (
        "twopc-data/my%20sink/x=1/part.parquet"
    )


def test_the_payload_round_trips_through_json() -> None:
    written = WrittenFile("a/b.parquet", 10, 2, {"v": None}, '{"numRecords":2}', 5)
    payload = DeltaPayload("/t", (written,), SCHEMA, ("id",))
    assert DeltaPayload.from_json(json.loads(json.dumps(payload.to_json())), 1) == payload
    assert written.add_action().partition_values == {"v": None}
