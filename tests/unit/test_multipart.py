"""The multipart writer's bookkeeping without a store: how bytes become parts, the ETag S3
gives a completed upload (checked against what S3Proxy answered), and how a completion
whose upload is gone is judged (AWS answers a repeated completion with ``NoSuchUpload``,
which S3Proxy never does, so a fake client plays AWS there; the store itself is exercised
in tests/integration/test_s3_files.py)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from twopc_files._multipart import MultipartFile, MultipartStore, Part, completed_etag

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


PARTS = (Part(1, "79b281060d337b9b2b84ccf390adcf74"), Part(2, "82136b4240d6ce4ea7d03e51469a393b"))


class GoneUploadClient:
    """Just the s3fs calls ``MultipartStore.complete`` makes, answering as AWS does once
    the upload is no longer open: ``NoSuchUpload`` (s3fs raises ``FileNotFoundError`` for
    it), and ``HEAD`` shows whatever object is at the key (``etag``; ``None``: nothing)."""

    def __init__(self, etag: str | None) -> None:
        self.etag = etag
        self.calls: list[str] = []

    def split_path(self, path: str) -> tuple[str, str, None]:
        bucket, key = path.split("/", 1)
        return bucket, key, None

    def call_s3(self, method: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(method)
        assert (kwargs["Bucket"], kwargs["Key"]) == ("bucket", "out/part-0.parquet")
        if method == "complete_multipart_upload":
            raise FileNotFoundError("NoSuchUpload: the specified upload does not exist")
        if method == "head_object" and self.etag is not None:
            return {"ETag": f'"{self.etag}"'}
        raise FileNotFoundError(kwargs["Key"])

    def invalidate_cache(self, path: str | None = None) -> None:
        self.calls.append("invalidate_cache")


def test_an_upload_gone_with_its_object_in_place_was_completed_before() -> None:
    client = GoneUploadClient(completed_etag(PARTS))
    completed = MultipartStore(client).complete("bucket/out/part-0.parquet", "u-1", PARTS)
    assert completed is False  # already visible: "already committed", nothing done
    assert client.calls == ["complete_multipart_upload", "head_object"]


@pytest.mark.parametrize(
    "etag",
    [
        pytest.param("0123456789abcdef0123456789abcdef-2", id="another object"),
        pytest.param("79b281060d337b9b2b84ccf390adcf74", id="a single-part PUT"),
        pytest.param(None, id="no object"),
    ],
)
def test_an_upload_gone_without_its_object_is_an_error(etag: str | None) -> None:
    """Aborted or expired (a lifecycle rule), or overwritten by another writer: the
    decided file can no longer appear, so the commit must not report success."""
    client = GoneUploadClient(etag)
    with pytest.raises(FileNotFoundError):
        MultipartStore(client).complete("bucket/out/part-0.parquet", "u-1", PARTS)
    assert client.calls == ["complete_multipart_upload", "head_object"]
