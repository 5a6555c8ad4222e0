"""The multipart writer's bookkeeping without a store: how bytes become parts, and the
ETag S3 gives a completed upload (checked against what S3Proxy answered; the store itself
is exercised in tests/integration/test_s3_files.py)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from twopc_files._multipart import MultipartFile, Part, completed_etag

pytestmark = pytest.mark.unit


class PartsKept:
    """Keeps what the writer would upload, as a store would (its ETag: the MD5)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.aborted: list[str] = []

    def start(self, path: str) -> str:
        return "upload-1"

    def upload_part(self, path: str, upload_id: str, number: int, data: bytes) -> Part:
        assert number == len(self.parts) + 1
        self.parts.append(data)
        return Part(number, hashlib.md5(data, usedforsecurity=False).hexdigest())

    def abort(self, path: str, upload_id: str) -> None:
        self.aborted.append(upload_id)


def _writer(store: Any, part_size: int = 10) -> MultipartFile:
    return MultipartFile(store, "bucket/key", part_size=part_size)


def test_bytes_become_full_parts_and_a_shorter_last_one() -> None:
    store = PartsKept()
    handle = _writer(store)
    handle.write(b"a" * 7)
    handle.write(memoryview(b"b" * 18))
    assert handle.tell() == 25 and [len(p) for p in store.parts] == [10, 10]
    handle.close()
    assert b"".join(store.parts) == b"a" * 7 + b"b" * 18
    assert [p.number for p in handle.parts] == [1, 2, 3] and len(store.parts[-1]) == 5
    handle.close()  # closing twice uploads nothing more
    assert len(store.parts) == 3 and store.aborted == []


def test_an_empty_file_is_one_empty_part_and_a_discarded_one_is_aborted() -> None:
    store = PartsKept()
    empty = _writer(store)
    empty.close()
    assert store.parts == [b""]
    failed = _writer(PartsKept())
    failed.write(b"x" * 3)
    failed.discard()
    assert failed.closed and failed.store.aborted == ["upload-1"]  # type: ignore[attr-defined]


def test_the_completed_etag_is_the_md5_of_the_parts_md5s() -> None:
    # what S3Proxy answered for a 5 MiB part of "a" and a 10-byte part of "b"
    parts = [
        Part(1, "79b281060d337b9b2b84ccf390adcf74"),
        Part(2, '"82136b4240d6ce4ea7d03e51469a393b"'),
    ]
    assert completed_etag(parts) == "8b0be7847da5564ae08e97af63b60885-2"
