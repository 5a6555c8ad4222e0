"""Object-store output without copies: each file is a multipart upload that phase 1 leaves
open and the commit completes (S3 and S3-compatible stores, through s3fs's client).

An open upload is invisible: no object exists under its key until
``CompleteMultipartUpload``, which makes the whole file appear at once. Completing is made
idempotent by the ETag S3 gives a completed upload (the MD5 of the parts' MD5s, then
``-<parts>``): an upload that is gone while an object with that ETag is at its key was
completed before. Aborting an upload that is gone does nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MultipartFile", "MultipartStore", "OpenUpload", "Part", "is_multipart_capable"]

_log = logging.getLogger("twopc.files")

PART_SIZE = 8 * 1024 * 1024
"""Bytes per uploaded part (S3's minimum is 5 MiB, except for the last part)."""


@dataclass(frozen=True)
class Part:
    number: int
    etag: str


@dataclass(frozen=True)
class OpenUpload:
    """A multipart upload the store lists as not completed or aborted."""

    path: str
    upload_id: str


def is_multipart_capable(fs: Any) -> bool:
    """Whether ``fs`` is an S3 filesystem whose client twopc can drive (s3fs)."""
    return type(fs).__module__.startswith("s3fs") and hasattr(fs, "call_s3")


def completed_etag(parts: Sequence[Part]) -> str:
    """The ETag S3 gives the object of a completed multipart upload."""
    digest = hashlib.md5(usedforsecurity=False)
    for part in parts:
        digest.update(bytes.fromhex(part.etag.strip('"')))
    return f"{digest.hexdigest()}-{len(parts)}"


class MultipartStore:
    """The multipart calls of one s3fs filesystem, by fsspec path (``bucket/key``)."""

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def _where(self, path: str) -> tuple[str, str]:
        bucket, key, _ = self.fs.split_path(path)
        return bucket, key

    def start(self, path: str) -> str:
        bucket, key = self._where(path)
        answer = self.fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key)
        return str(answer["UploadId"])

    def upload_part(self, path: str, upload_id: str, number: int, data: bytes) -> Part:
        bucket, key = self._where(path)
        answer = self.fs.call_s3(
            "upload_part",
            Bucket=bucket,
            Key=key,
            UploadId=upload_id,
            PartNumber=number,
            Body=data,
        )
        return Part(number, str(answer["ETag"]).strip('"'))

    def complete(self, path: str, upload_id: str, parts: Sequence[Part]) -> bool:
        """Make the file visible. ``False`` when it already was (completed before);
        raises ``FileNotFoundError`` when the upload is gone and the object is not the
        one it would have made (aborted, or expired by a lifecycle rule)."""
        bucket, key = self._where(path)
        listed = [{"ETag": f'"{p.etag}"', "PartNumber": p.number} for p in parts]
        try:
            self.fs.call_s3(
                "complete_multipart_upload",
                Bucket=bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": listed},
            )
        except FileNotFoundError:
            if self.etag_of(path) == completed_etag(parts):
                return False
            raise
        self.fs.invalidate_cache(path)
        return True

    def abort(self, path: str, upload_id: str) -> None:
        bucket, key = self._where(path)
        with contextlib.suppress(FileNotFoundError):  # completed, aborted or expired already
            self.fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id)

    def etag_of(self, path: str) -> str | None:
        bucket, key = self._where(path)
        try:
            answer = self.fs.call_s3("head_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return None
        return str(answer["ETag"]).strip('"')

    def open_uploads(self, prefix: str) -> list[OpenUpload]:
        """Uploads not yet completed or aborted whose keys start with ``prefix``."""
        bucket, key_prefix = self._where(prefix)
        found: list[OpenUpload] = []
        request: dict[str, Any] = {"Bucket": bucket, "Prefix": key_prefix}
        while True:
            answer = self.fs.call_s3("list_multipart_uploads", **request)
            for upload in answer.get("Uploads") or []:
                found.append(OpenUpload(f"{bucket}/{upload['Key']}", str(upload["UploadId"])))
            if not answer.get("IsTruncated"):
                return found
            request["KeyMarker"] = answer.get("NextKeyMarker")
            request["UploadIdMarker"] = answer.get("NextUploadIdMarker")


class MultipartFile(io.RawIOBase):
    """A write-only file that uploads itself as the parts of one multipart upload and
    leaves the upload open when closed: nothing is visible until :meth:`MultipartStore.
    complete`. ``upload_id`` and ``parts`` say what to complete."""

    def __init__(self, store: MultipartStore, path: str, part_size: int = PART_SIZE) -> None:
        super().__init__()
        self.store = store
        self.path = path
        self.part_size = part_size
        self.upload_id = store.start(path)
        self.parts: list[Part] = []
        self._buffer = bytearray()
        self._position = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._buffer += view
        self._position += len(view)
        while len(self._buffer) >= self.part_size:
            self._send(bytes(self._buffer[: self.part_size]))
            del self._buffer[: self.part_size]
        return len(view)

    def tell(self) -> int:
        return self._position

    def _send(self, data: bytes) -> None:
        number = len(self.parts) + 1
        self.parts.append(self.store.upload_part(self.path, self.upload_id, number, data))

    def close(self) -> None:
        if self.closed:
            return
        if self._buffer or not self.parts:  # an empty file is one empty part
            self._send(bytes(self._buffer))
            self._buffer.clear()
        super().close()

    def discard(self) -> None:
        """Abort the upload (the task failed): nothing of it stays in the store."""
        self._buffer.clear()
        if not self.closed:
            super().close()
        self.store.abort(self.path, self.upload_id)
