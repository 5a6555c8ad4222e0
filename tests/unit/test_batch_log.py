"""The files sink's ``_spark_metadata`` log, in the layout of Spark's own file sink: ids from
0 without gaps, every tenth batch a ``.compact`` file with every entry so far, appends
idempotent. Spark reading it is tested in tests/e2e/test_batch_log_spark.py."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

import twopc
from twopc_files import FilesSink
from twopc_files._batch_log import LoggedFile, SparkBatchLog, file_uri

pytestmark = pytest.mark.unit


def _log(tmp_path: Path) -> SparkBatchLog:
    return SparkBatchLog(fsspec.filesystem("file"), str(tmp_path))


def _files(batch: int) -> list[LoggedFile]:
    return [LoggedFile(f"file:///out/part-b{batch}-{i}.parquet", 100 + i) for i in range(2)]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_batches_are_numbered_from_zero_and_every_tenth_is_compact(tmp_path: Path) -> None:
    log = _log(tmp_path)
    assert log.latest() is None
    for batch in range(12):
        assert log.append(_files(batch)) == batch
    names = sorted(p.name for p in (tmp_path / "_spark_metadata").iterdir())
    assert names == sorted([*map(str, range(9)), "9.compact", "10", "11"])
    first = _lines(tmp_path / "_spark_metadata" / "0")
    assert first[0] == "v1"
    entry = json.loads(first[1])
    assert entry["path"] == "file:///out/part-b0-0.parquet" and entry["size"] == 100
    assert (entry["action"], entry["isDir"]) == ("add", False)
    compact = _lines(tmp_path / "_spark_metadata" / "9.compact")
    assert compact[0] == "v1"
    assert [json.loads(line)["path"] for line in compact[1:]] == [
        f.uri for batch in range(10) for f in _files(batch)
    ]
    assert log.latest() == 11


def test_appending_the_same_files_again_writes_nothing(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_files(0))
    assert log.append(_files(0)) == 0  # a commit finished again after a crash
    assert log.append(list(reversed(_files(0)))) == 0
    assert log.append([]) is None  # a batch without files adds no log batch
    assert log.latest() == 0
    for batch in range(1, 10):
        log.append(_files(batch))
    assert log.append(_files(9)) == 9  # also when the newest batch is a compact one


def test_file_uris_are_what_spark_resolves(tmp_path: Path) -> None:
    local = fsspec.filesystem("file")
    assert file_uri(local, "/data/out/a.parquet") == "file:///data/out/a.parquet"
    memory = fsspec.filesystem("memory")
    assert file_uri(memory, "bucket/a.parquet") == "memory://bucket/a.parquet"


class _S3Like:
    """Just what ``file_uri`` reads of an s3fs filesystem: its protocols."""

    protocol = ("s3", "s3a")


def test_s3_files_are_logged_as_s3a_unless_another_scheme_is_asked_for() -> None:
    # open-source Spark reads S3 through Hadoop's S3A (s3a://); EMR's s3:// is its own
    assert file_uri(_S3Like(), "bucket/out/a.parquet") == "s3a://bucket/out/a.parquet"
    assert file_uri(_S3Like(), "bucket/out/a.parquet", "s3") == "s3://bucket/out/a.parquet"
    with pytest.raises(twopc.ConfigurationError, match="not a URI scheme"):
        FilesSink("s3://bucket/out", batch_log=True, batch_log_scheme="s3:")


def test_a_compact_batch_deletes_the_batches_before_the_previous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from twopc_files import _batch_log

    log = _log(tmp_path)
    directory = tmp_path / "_spark_metadata"
    for batch in range(25):
        log.append(_files(batch))
    # files younger than Spark's cleanup delay (10 minutes) stay
    assert len(list(directory.iterdir())) == 25
    monkeypatch.setattr(_batch_log, "CLEANUP_DELAY_SECONDS", 0.0)
    for batch in range(25, 35):
        log.append(_files(batch))
    names = sorted((p.name for p in directory.iterdir()), key=lambda n: int(n.split(".")[0]))
    # 29.compact let 0-18 go: the previous compact batch and what follows it stay
    assert names == ["19.compact", *map(str, range(20, 29)), "29.compact", *map(str, range(30, 35))]
    assert log.latest() == 34
    # the newest compact batch still lists every file ever added, as Spark's readers need
    compact = _lines(directory / "29.compact")
    assert [json.loads(line)["path"] for line in compact[1:]] == [
        f.uri for batch in range(30) for f in _files(batch)
    ]
    for batch in range(35, 40):
        log.append(_files(batch))
    assert (directory / "39.compact").exists() and not (directory / "19.compact").exists()
    assert len(list(directory.iterdir())) == 11


def test_when_a_listed_file_was_written() -> None:
    from datetime import UTC, datetime

    from twopc_files._batch_log import _written_at

    assert _written_at({"mtime": 5.0}) == 5.0
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    assert _written_at({"LastModified": stamp}) == stamp.timestamp()
    assert _written_at({"updated": "2026-01-01T00:00:00Z"}) == stamp.timestamp()
    assert _written_at({"name": "x"}) is None
