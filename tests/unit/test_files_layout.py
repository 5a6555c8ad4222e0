"""Layout of the files sink: hidden names, deterministic final names, Hive directories."""

from __future__ import annotations

import datetime
from urllib.parse import unquote

import pyarrow as pa
import pytest

from twopc_files._layout import (
    COMMITTABLE_FILE,
    HIVE_NULL,
    LOG_DIR,
    STAGING_DIR,
    attempt_dir,
    final_name,
    hive_directory,
    name_token,
    split_by_partition,
)

pytestmark = pytest.mark.unit


def test_bookkeeping_names_are_hidden_from_readers() -> None:
    for name in (LOG_DIR, STAGING_DIR, COMMITTABLE_FILE):
        assert name.startswith(("_", "."))


def test_attempt_directory_names_every_part_of_the_attempt() -> None:
    path = attempt_dir("orders", "q-1", 12, 3, 2)
    assert path == f"{STAGING_DIR}/orders/q-1/{12:020d}/00003-2"
    assert attempt_dir("orders", "q-1", 12, 3, 1) != path
    assert attempt_dir("orders", "q-2", 12, 3, 2) != path


def test_batch_directories_sort_numerically() -> None:
    batches = [2, 10, 1, 100, 9]
    paths = [attempt_dir("s", "q", b, 0, 0) for b in batches]
    assert sorted(paths) == [attempt_dir("s", "q", b, 0, 0) for b in sorted(batches)]


def test_name_token_is_stable_and_separates_sinks_and_queries() -> None:
    token = name_token("orders", "q-1")
    assert token == name_token("orders", "q-1")
    assert len(token) == 12
    assert int(token, 16) >= 0  # hex
    others = {
        name_token("orders", "q-2"),
        name_token("orders2", "q-1"),
        name_token("o", "rdersq-1"),
    }
    assert token not in others
    # the separator keeps ("ab", "c") and ("a", "bc") apart
    assert name_token("ab", "c") != name_token("a", "bc")


def test_final_name_format() -> None:
    name = final_name("abcdef012345", 7, 3, 12, "parquet")
    assert name == "part-abcdef012345-b00000007-p00003-0012.parquet"
    assert not name.startswith(("_", "."))
    assert final_name("abcdef012345", 7, 3, 13, "parquet") != name


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", "plain"),
        ("a/b", "a%2Fb"),
        ("k=v", "k%3Dv"),
        ("50%", "50%25"),
        (None, HIVE_NULL),
        ("", HIVE_NULL),
        (42, "42"),
        (datetime.date(2024, 2, 29), "2024-02-29"),
    ],
)
def test_hive_directory_escapes_values(value: object, expected: str) -> None:
    assert hive_directory(["col"], [value]) == f"col={expected}"


@pytest.mark.parametrize("value", ["a/b", "k=v", "x/=y", "50%", "sp ace+plus", "é:ü", "#?&"])
def test_hive_values_decode_back_and_stay_one_path_segment(value: str) -> None:
    segment = hive_directory(["c"], [value])
    assert "/" not in segment
    _key, _, encoded = segment.partition("=")
    assert "=" not in encoded
    assert unquote(encoded) == value


def test_hive_directory_with_two_columns() -> None:
    assert hive_directory(["a", "b"], ["x/y", None]) == f"a=x%2Fy/b={HIVE_NULL}"
    with pytest.raises(ValueError, match=r"shorter|longer"):
        hive_directory(["a", "b"], ["x"])


def test_split_without_columns_yields_the_batch_unchanged() -> None:
    batch = pa.record_batch({"id": [1, 2, 3]})
    assert list(split_by_partition(batch, [])) == [("", batch)]


def test_split_by_partition_groups_rows_and_drops_the_columns() -> None:
    batch = pa.record_batch(
        {
            "id": list(range(8)),
            "k": ["a", "b", None, "a", "a/b", None, "b", "a"],
            "n": [1, 1, 1, 2, 1, 1, 1, 1],
        }
    )
    pieces = list(split_by_partition(batch, ["k", "n"]))

    found = {}
    for directory, piece in pieces:
        assert piece.schema.names == ["id"]
        found.setdefault(directory, []).extend(piece.column("id").to_pylist())
    assert found == {
        "k=a/n=1": [0, 7],
        "k=a/n=2": [3],
        "k=b/n=1": [1, 6],
        f"k={HIVE_NULL}/n=1": [2, 5],
        "k=a%2Fb/n=1": [4],
    }


def test_split_by_partition_keeps_every_row_once() -> None:
    ids = list(range(1000))
    batch = pa.record_batch(
        {"id": ids, "k": [None if i % 11 == 0 else i % 13 for i in ids], "v": [str(i) for i in ids]}
    )
    seen: list[int] = []
    for _, piece in split_by_partition(batch, ["k"]):
        seen.extend(piece.column("id").to_pylist())
        assert piece.schema.names == ["id", "v"]
    assert sorted(seen) == ids
