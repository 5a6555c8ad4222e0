"""twopc.storage: atomic writes and path helpers on the local and in-memory filesystems."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import fsspec
import pytest

from twopc.storage import (
    atomic_write,
    create_exclusive,
    filesystem_for,
    fsync_directory,
    fsync_files,
    is_local,
    join,
    syncing_files,
)

pytestmark = pytest.mark.unit


def _clear_memory_fs() -> None:
    memory = fsspec.filesystem("memory")
    memory.store.clear()
    memory.pseudo_dirs.clear()
    memory.pseudo_dirs.append("")


@pytest.fixture
def memory() -> Iterator[Any]:
    _clear_memory_fs()
    yield fsspec.filesystem("memory")
    _clear_memory_fs()


def test_atomic_write_local_creates_parents_and_leaves_no_temporary(tmp_path: Any) -> None:
    fs, _ = filesystem_for(str(tmp_path))
    target = tmp_path / "a" / "b" / "decision.json"

    atomic_write(fs, str(target), b"first")
    assert target.read_bytes() == b"first"
    atomic_write(fs, str(target), b"second, longer")
    assert target.read_bytes() == b"second, longer"
    assert os.listdir(target.parent) == ["decision.json"]


def test_atomic_write_local_failure_keeps_the_old_content(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs, _ = filesystem_for(str(tmp_path))
    target = tmp_path / "f.json"
    atomic_write(fs, str(target), b"old")

    def fail(src: str, dst: str) -> None:
        assert os.path.basename(src).startswith(".tmp-")  # hidden from readers
        assert os.path.dirname(src) == os.path.dirname(dst)  # same directory: rename is atomic
        raise OSError("no space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="no space"):
        atomic_write(fs, str(target), b"new")
    monkeypatch.undo()

    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f.json"]


def test_atomic_write_local_never_shows_a_partial_file(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the bytes are written, the target holds the old content in full."""
    fs, _ = filesystem_for(str(tmp_path))
    target = tmp_path / "f.json"
    atomic_write(fs, str(target), b"old")
    seen: list[bytes] = []
    real_fsync = os.fsync

    def watching_fsync(fd: int) -> None:
        seen.append(target.read_bytes())
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", watching_fsync)
    atomic_write(fs, str(target), b"new" * 1000)
    monkeypatch.undo()

    assert seen
    assert seen[0] == b"old"
    assert target.read_bytes() == b"new" * 1000


def test_atomic_write_memory(memory: Any) -> None:
    fs, root = filesystem_for("memory://bucket/log")
    assert root == "/bucket/log"
    assert not is_local(fs)
    path = join(root, "q", "00001.decision.json")

    atomic_write(fs, path, b"one")
    assert memory.cat_file(path) == b"one"
    atomic_write(fs, path, b"two")
    assert memory.cat_file(path) == b"two"
    assert memory.find(root) == [path]


def test_filesystem_for_local(tmp_path: Any) -> None:
    fs, root = filesystem_for(str(tmp_path) + "/")
    assert is_local(fs)
    assert root == str(tmp_path)
    fs2, root2 = filesystem_for(f"file://{tmp_path}")
    assert is_local(fs2)
    assert root2 == str(tmp_path)


def test_join() -> None:
    assert join("/root/", "a", "/b/", "c.json") == "/root/a/b/c.json"
    assert join("memory://x", "_twopc", "s") == "memory://x/_twopc/s"
    assert join("/") == ""
    assert join("/", "a") == "/a"


def test_fsync_directory(tmp_path: Any) -> None:
    fsync_directory(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        fsync_directory(str(tmp_path / "missing"))


def test_fsync_files_syncs_every_file_then_its_directories(tmp_path: Any) -> None:
    paths = []
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "part.parquet").write_bytes(b"x" * 100)
        paths.append(str(tmp_path / name / "part.parquet"))
    fsync_files(paths, [str(tmp_path / name) for name in ("a", "b", "c")])
    fsync_files(paths[:1])
    fsync_files([])
    with pytest.raises(FileNotFoundError):
        fsync_files([*paths, str(tmp_path / "missing.parquet")])
    with pytest.raises(FileNotFoundError):
        fsync_files(paths, [str(tmp_path / "gone")])


def test_syncing_files_lets_the_block_move_them_and_closes_what_it_opened(
    tmp_path: Any,
) -> None:

    paths = []
    for name in ("a", "b"):
        (tmp_path / f"{name}.parquet").write_bytes(b"x" * 100)
        paths.append(str(tmp_path / f"{name}.parquet"))
    open_before = len(os.listdir("/proc/self/fd"))
    (tmp_path / "moved").mkdir()
    with syncing_files(paths):
        for path in paths:
            os.replace(path, str(tmp_path / "moved" / os.path.basename(path)))
    assert sorted(os.listdir(tmp_path / "moved")) == ["a.parquet", "b.parquet"]
    assert len(os.listdir("/proc/self/fd")) == open_before
    with syncing_files([]):
        pass
    ran = []
    with pytest.raises(FileNotFoundError), syncing_files([str(tmp_path / "missing")]):
        ran.append(True)
    assert not ran  # a file that cannot be opened fails before the block


def test_syncing_files_raises_a_failed_sync_when_the_block_ends(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:

    (tmp_path / "a.parquet").write_bytes(b"x")

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with (
        pytest.raises(OSError, match="Input/output error"),
        syncing_files([str(tmp_path / "a.parquet")]),
    ):
        pass


class _ConditionalPutStore:
    """Stands in for s3fs (decided by the class's module): ``pipe_file(mode="create")``
    raises what s3fs raises for a given answer of the store."""

    __module__ = "s3fs.stand_in"

    def __init__(self, error: OSError | None) -> None:
        self.error = error
        self.written: list[str] = []

    def pipe_file(self, path: str, data: bytes, mode: str = "overwrite") -> None:
        assert mode == "create"
        if self.error is not None:
            raise self.error
        self.written.append(path)


class _StoreError(OSError):
    """An OSError as s3fs raises them, of a class of its own for ``pytest.raises``."""


def _translated(code: str, status: int, message: str = "") -> OSError:
    """What s3fs makes of a failed request: an OSError caused by botocore's ClientError."""
    from botocore.exceptions import ClientError

    cause = ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "PutObject",
    )
    error = _StoreError(22, message or code)
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    "error",
    [
        FileExistsError("At least one of the pre-conditions you specified did not hold"),
        _translated("PreconditionFailed", 412),
        _translated("412", 412),
    ],
    ids=["file-exists", "code", "status-code"],
)
def test_create_exclusive_on_s3_reports_a_taken_name(error: OSError) -> None:
    assert create_exclusive(_ConditionalPutStore(error), "bucket/log/x", b"x") is False


@pytest.mark.parametrize(
    "error",
    [
        _translated("AccessDenied", 403, "precondition: access denied"),
        _StoreError(22, "PreconditionFailed, said only in the text"),
    ],
    ids=["other-code", "text-only"],
)
def test_create_exclusive_on_s3_raises_other_errors_whatever_their_text(error: OSError) -> None:
    with pytest.raises(_StoreError) as raised:
        create_exclusive(_ConditionalPutStore(error), "bucket/log/x", b"x")
    assert raised.value is error


def test_create_exclusive_on_s3_writes_a_free_name() -> None:
    store = _ConditionalPutStore(None)
    assert create_exclusive(store, "bucket/log/x", b"x") is True
    assert store.written == ["bucket/log/x"]


def test_atomic_write_without_durability_skips_the_fsyncs(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs, root = filesystem_for(str(tmp_path))
    target = join(root, "hint.json")
    atomic_write(fs, target, b"old")

    def no_fsync(fd: int) -> None:
        raise AssertionError("fsync called")

    monkeypatch.setattr(os, "fsync", no_fsync)
    atomic_write(fs, target, b"new", durable=False)
    assert fs.cat_file(target) == b"new"
    assert sorted(os.listdir(tmp_path)) == ["hint.json"]  # no temporary file left
    with pytest.raises(AssertionError, match="fsync called"):
        atomic_write(fs, target, b"again")  # durable by default
