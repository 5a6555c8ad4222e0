"""Reading a Spark write job's output (:mod:`twopc.spark_output`) and describing its files
for a Delta commit (:func:`twopc_delta._datafiles.footer_stats`), on files made here."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.local import LocalFileSystem

from twopc import SinkError
from twopc.spark_output import job_files, unescape_path_name


def test_escaped_directory_names_come_back_as_spark_had_them() -> None:
    assert unescape_path_name("a%2Fb%3Dc%25d é") == "a/b=c%d é"
    assert unescape_path_name("plain") == "plain"


def test_part_files_with_their_split_and_partition_values(tmp_path: Path) -> None:
    job = tmp_path / "job"
    files = {
        "region=eu/day=2026-11-01/part-00000-x.c000.snappy.parquet": "",
        "region=a%2Fb/day=__HIVE_DEFAULT_PARTITION__/part-00002-x.c000.snappy.parquet": "",
        "_SUCCESS": "",
        "region=eu/day=2026-11-01/.part-00000-x.c000.snappy.parquet.crc": "",
        "_temporary/0/task/part-00001-x.parquet": "",
    }
    for name in files:
        (job / name).parent.mkdir(parents=True, exist_ok=True)
        (job / name).write_text("")
    found = list(job_files(LocalFileSystem(), str(job)))
    assert [(f.split, dict(f.directories)) for f in found] == [
        (2, {"region": "a/b", "day": None}),
        (0, {"region": "eu", "day": "2026-11-01"}),
    ]
    (job / "stray.txt").write_text("")
    with pytest.raises(SinkError, match=r"stray\.txt"):
        list(job_files(LocalFileSystem(), str(job)))


def test_footer_statistics_agree_with_the_python_path_s(tmp_path: Path) -> None:
    """Row and null counts and the bounds of integers, strings and dates match what the
    Python path computes from the rows; floats get null counts without bounds."""
    pytest.importorskip("deltalake")
    from twopc_delta._datafiles import file_stats, footer_stats

    rows = pa.table(
        {
            "id": pa.array([3, 1, None, 7], pa.int64()),
            "name": ["b", None, "a", "c"],
            "day": pa.array([datetime.date(2026, 11, d) for d in (2, 1, 3, 1)], pa.date32()),
            "ratio": [0.5, None, 1.5, 2.0],
            "none": pa.nulls(4, pa.string()),
        }
    )
    path = tmp_path / "f.parquet"
    pq.write_table(rows, path, row_group_size=2)
    from_footer = json.loads(footer_stats(pq.read_metadata(path)))
    from_rows = json.loads(file_stats(rows))
    assert from_footer["numRecords"] == from_rows["numRecords"] == 4
    assert from_footer["nullCount"] == from_rows["nullCount"]
    assert from_footer["minValues"] == {"id": 1, "name": "a", "day": "2026-11-01"}
    assert from_footer["maxValues"] == {"id": 7, "name": "c", "day": "2026-11-03"}
    for bound in ("minValues", "maxValues"):
        without_floats = {k: v for k, v in from_rows[bound].items() if k != "ratio"}
        assert from_footer[bound] == without_floats
