"""Small helpers for durable, atomic writes on fsspec filesystems.

Public because backends (first- and third-party) need the same guarantees the commit log
relies on. What "atomic" means depends on the filesystem:

* local: the bytes go to a hidden temporary file in the same directory, are fsynced, and
  are renamed over the target (``os.replace`` is atomic on POSIX), then the directory is
  fsynced;
* object stores (s3, gcs, abfs) and the in-memory filesystem: a single PUT of the whole
  object, which readers see entirely or not at all.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

__all__ = [
    "atomic_write",
    "create_exclusive",
    "filesystem_for",
    "fsync_directory",
    "fsync_file",
    "fsync_files",
    "is_local",
    "join",
    "syncing_files",
]


def filesystem_for(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec filesystem and the protocol-free root path for ``url``."""
    fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    return fs, str(root).rstrip("/") or "/"


def is_local(fs: Any) -> bool:
    """Whether ``fs`` is the local disk, where durability takes an ``fsync``."""
    return isinstance(fs, LocalFileSystem)


def join(*parts: str) -> str:
    """Join path parts with ``/`` (fsspec paths are always ``/``-separated)."""
    head, *rest = parts
    out = head.rstrip("/")
    for part in rest:
        out = f"{out}/{part.strip('/')}"
    return out


TEMP_PREFIX = ".tmp-"
"""Names of :func:`atomic_write`'s temporary files; a crash mid-write can leave one."""


def atomic_write(fs: Any, path: str, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so that readers see all of it or nothing.

    ``durable=False`` skips the two fsyncs on a local disk: readers still see all or
    nothing, but a power loss may lose the write. For records that are only hints, such
    as a liveness record rewritten every batch."""
    if is_local(fs):
        _write_local(path, data, exclusive=False, durable=durable)
    else:
        fs.pipe_file(path, data)


def create_exclusive(fs: Any, path: str, data: bytes) -> bool:
    """Write ``data`` to ``path`` unless something is there already; ``False`` then. Two
    writers never overwrite each other on local disks (a hard link, which fails on an
    existing name) and on S3 (a conditional ``PUT`` with ``If-None-Match: *``, through
    s3fs). Elsewhere it checks first, which narrows the race without closing it."""
    if is_local(fs):
        return _write_local(path, data, exclusive=True)
    if type(fs).__module__.startswith("s3fs"):
        try:
            fs.pipe_file(path, data, mode="create")
        except OSError as exc:
            if _precondition_failed(exc):
                return False
            raise
        return True
    if fs.exists(path):
        return False
    fs.pipe_file(path, data)
    return True


_PRECONDITION_FAILED = ("PreconditionFailed", "412")


def _precondition_failed(exc: OSError) -> bool:
    """Whether s3fs's conditional ``PUT`` found the name taken. s3fs raises
    ``FileExistsError`` when the store names the failed condition; stores that do not
    (S3Proxy, some S3 look-alikes) give an ``OSError`` caused by botocore's ``ClientError``,
    whose response carries the error code ``PreconditionFailed`` (HTTP 412)."""
    if isinstance(exc, FileExistsError):
        return True
    response = getattr(exc.__cause__, "response", None)
    if not isinstance(response, dict):
        return False
    code = (response.get("Error") or {}).get("Code")
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return code in _PRECONDITION_FAILED or status == 412


def _write_local(path: str, data: bytes, *, exclusive: bool, durable: bool = True) -> bool:
    """Write a hidden temporary file next to ``path``, fsync it, then give it the name:
    by rename (replacing what is there), or, ``exclusive``, by a hard link, which fails on
    an existing name (``False`` then). ``durable=False``: no fsync, of the file or of the
    directory."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f"{TEMP_PREFIX}{uuid.uuid4().hex}-{os.path.basename(path)}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        if not exclusive:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            except OSError:  # no hard links here (some network and FUSE filesystems)
                if os.path.exists(path):
                    return False
                os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    if durable:
        fsync_directory(directory)
    return True


def fsync_directory(directory: str) -> None:
    """Persist a directory entry change (rename, create) on local filesystems."""
    _fsync(directory)


def fsync_file(path: str) -> None:
    """Persist a closed local file's contents (one written by another process, such as
    Spark's writer)."""
    _fsync(path)


def fsync_files(files: Iterable[str], directories: Iterable[str] = ()) -> None:
    """Persist closed local files, then the directories that name them: the files side
    by side (each ``fsync`` waits for its own writes to reach the disk, so several at once
    take about as long as the largest), each directory once, after its files."""
    paths = list(dict.fromkeys(files))
    if len(paths) > 1:
        with ThreadPoolExecutor(max_workers=min(len(paths), 8)) as pool:
            list(pool.map(_fsync, paths))  # list(): an error of any is raised here
    elif paths:
        _fsync(paths[0])
    for directory in dict.fromkeys(directories):
        _fsync(directory)


@contextlib.contextmanager
def syncing_files(files: Iterable[str]) -> Iterator[None]:
    """Persist closed local files while the block runs: each is opened on entry (so the
    block may rename or move it within its filesystem) and synced in a thread of its own;
    leaving the block waits for every sync and raises the first error. The directories
    that name the files are the caller's to sync afterwards (:func:`fsync_files`)."""
    descriptors: list[int] = []
    try:
        for path in dict.fromkeys(files):
            descriptors.append(os.open(path, os.O_RDONLY))
        if not descriptors:
            yield
            return
        with ThreadPoolExecutor(max_workers=min(len(descriptors), 8)) as pool:
            syncs = [pool.submit(os.fsync, fd) for fd in descriptors]
            yield
            for sync in syncs:
                sync.result()  # the first error of any is raised here
    finally:
        for fd in descriptors:
            os.close(fd)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
