"""The coordinator's decision log (twopc.CommitLog) on the local and in-memory filesystems."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import fsspec
import pytest

import twopc
from tests.harness.decisions import committable, decision
from twopc import CommitLog
from twopc._coordination.commit_log import Decision

pytestmark = pytest.mark.unit


def _clear_memory_fs() -> None:
    memory = fsspec.filesystem("memory")
    memory.store.clear()
    memory.pseudo_dirs.clear()
    memory.pseudo_dirs.append("")


@pytest.fixture(params=["local", "memory"])
def log_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    if request.param == "local":
        yield str(tmp_path / "log")
        return
    _clear_memory_fs()
    yield "memory://twopc-unit/log"
    _clear_memory_fs()


def listing(url: str) -> list[str]:
    fs, root = fsspec.core.url_to_fs(url)
    if not fs.exists(root):
        return []
    prefix = root.rstrip("/") + "/"
    return sorted(p[len(prefix) :] for p in fs.find(root))


def test_decision_round_trip(log_url: str) -> None:
    log = CommitLog(log_url)
    written = decision("q-1", 5, partitions=3)
    log.record_decision(written)

    read = log.decision("q-1", 5)
    assert read is not None
    assert (read.sink_id, read.query_id, read.batch_id) == ("orders", "q-1", 5)
    assert read.committables == written.committables
    assert read.decided_at > 0  # stamped when recorded
    assert log.decision("q-1", 6) is None
    assert log.decision("q-other", 5) is None


def test_a_new_log_object_reads_what_another_wrote(log_url: str) -> None:
    CommitLog(log_url).record_decision(decision("q-1", 0))
    assert CommitLog(log_url).decided_batches("q-1") == [0]


def test_pending_lists_decisions_without_done_across_query_ids(log_url: str) -> None:
    log = CommitLog(log_url)
    assert log.pending() == []
    for query, batch in [("q-old", 9), ("q-old", 10), ("q-new", 0), ("q-new", 1)]:
        log.record_decision(decision(query, batch))
    log.mark_done("q-old", 9)
    log.mark_done("q-new", 1)

    pending = {(d.query_id, d.batch_id) for d in log.pending()}
    assert pending == {("q-old", 10), ("q-new", 0)}
    assert log.is_done("q-old", 9)
    assert not log.is_done("q-old", 10)

    log.mark_done("q-old", 10)
    log.mark_done("q-new", 0)
    assert log.pending() == []
    assert log.query_ids() == ["q-new", "q-old"]


def test_pending_decisions_keep_their_committables(log_url: str) -> None:
    log = CommitLog(log_url)
    written = decision("q-1", 3, partitions=4)
    log.record_decision(written)
    (pending,) = log.pending()
    assert pending.committables == written.committables
    assert all(pending.contains(c) for c in written.committables)
    assert not pending.contains(committable("q-1", 3, 0, attempt=1))
    assert not pending.contains(committable("q-1", 3, 4))


def test_decided_batches_are_in_numeric_order(log_url: str) -> None:
    log = CommitLog(log_url)
    for batch in [10, 2, 100, 0, 9]:
        log.record_decision(decision("q-1", batch, partitions=1))
    log.record_decision(decision("q-2", 7, partitions=1))

    assert log.decided_batches("q-1") == [0, 2, 9, 10, 100]
    assert log.decided_batches("q-2") == [7]
    assert log.decided_batches("q-missing") == []


def test_a_decided_batch_is_never_decided_again_differently(log_url: str) -> None:
    """Decisions are created exclusively: the same decision again is accepted (a write
    that reported a failure but landed), another one (a second writer) is refused and the
    first stays."""
    log = CommitLog(log_url)
    log.record_decision(decision("q-1", 1, partitions=1))
    log.record_decision(decision("q-1", 1, partitions=1))
    with pytest.raises(twopc.ConfigurationError, match="decided by another writer") as refused:
        log.record_decision(decision("q-1", 1, partitions=3))
    assert "batch 1" in str(refused.value)
    read = log.decision("q-1", 1)
    assert read is not None
    assert len(read.committables) == 1
    assert log.decided_batches("q-1") == [1]


def test_forget_removes_finished_entries(log_url: str) -> None:
    log = CommitLog(log_url)
    for batch in range(3):
        log.record_decision(decision("q-1", batch))
        log.mark_done("q-1", batch)
    log.forget("q-1", [0, 1, 7])
    assert log.decided_batches("q-1") == [2]
    assert not log.is_done("q-1", 0)
    assert log.is_done("q-1", 2)


def test_done_is_an_empty_marker_written_again_harmlessly(log_url: str) -> None:
    log = CommitLog(log_url)
    log.record_decision(decision("q-1", 3))
    log.mark_done("q-1", 3)
    log.mark_done("q-1", 3)  # a recovery finishing the batch again
    fs, root = fsspec.core.url_to_fs(log_url)
    assert fs.cat_file(f"{root}/q-1/{3:020d}.done") == b""
    assert sorted(listing(log_url)) == [f"q-1/{3:020d}.decision.json", f"q-1/{3:020d}.done"]
    state = log.batch_state("q-1", 3)
    assert state.done and state.finished == (3,) and state.decided == (3,)
    assert log.pending() == []


def test_decision_files_are_plain_json(log_url: str) -> None:
    log = CommitLog(log_url)
    log.record_decision(decision("q-1", 4))
    fs, root = fsspec.core.url_to_fs(log_url)
    (name,) = listing(log_url)
    assert name == f"q-1/{4:020d}.decision.json"
    body = json.loads(fs.cat_file(f"{root}/{name}"))
    assert body["batch_id"] == 4
    assert [c["partition"] for c in body["committables"]] == [0, 1]


def test_decisions_leave_no_temporary_files(log_url: str) -> None:
    log = CommitLog(log_url)
    for batch in range(5):
        log.record_decision(decision("q-1", batch))
        log.mark_done("q-1", batch)
    names = listing(log_url)
    assert len(names) == 10
    assert not [n for n in names if ".tmp-" in n or n.rsplit("/", 1)[-1].startswith(".")]


def test_a_failed_write_leaves_no_decision_and_the_others_intact(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = CommitLog(str(tmp_path / "log"))
    log.record_decision(decision("q-1", 0, partitions=1))

    def disk_full(*_: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "link", disk_full)
    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError, match="disk full"):
        log.record_decision(decision("q-1", 1, partitions=5))
    monkeypatch.undo()

    read = log.decision("q-1", 0)
    assert read is not None
    assert len(read.committables) == 1
    assert log.decision("q-1", 1) is None
    assert listing(str(tmp_path / "log")) == [f"q-1/{0:020d}.decision.json"]


def test_a_leftover_temporary_file_does_not_break_recovery(tmp_path: Any) -> None:
    log = CommitLog(str(tmp_path / "log"))
    log.record_decision(decision("q-1", 1))
    # what a SIGKILL between open() and os.replace() in atomic_write leaves behind
    leftover = tmp_path / "log" / "q-1" / f".tmp-0123abcd-{2:020d}.decision.json"
    leftover.write_bytes(b'{"format": 1, "sink_')

    assert log.decided_batches("q-1") == [1]
    assert [d.batch_id for d in log.pending()] == [1]
    # recovery removes it (found by the chaos campaign, seed 896), and nothing else
    assert log.remove_temporaries() == 1
    assert not leftover.exists()
    assert log.decided_batches("q-1") == [1]
    assert log.remove_temporaries() == 0


def test_unknown_log_format_is_rejected() -> None:
    raw = decision("q-1", 0).to_bytes()
    body = json.loads(raw)
    body["format"] = 99
    with pytest.raises(twopc.UnsupportedFormatError, match="format 99"):
        Decision.from_bytes(json.dumps(body).encode())
    assert Decision.from_bytes(raw) == decision("q-1", 0)


def test_log_on_a_missing_directory_is_empty(tmp_path: Any) -> None:
    log = CommitLog(str(tmp_path / "never-created"))
    assert log.query_ids() == []
    assert log.pending() == []
    assert not log.is_done("q", 0)
    assert not (tmp_path / "never-created").exists()


def test_repr_shows_the_url(tmp_path: Any) -> None:
    assert repr(CommitLog(str(tmp_path))) == f"CommitLog({str(tmp_path)!r})"
