"""``twopc status`` / ``twopc recover``: sink options from flags, environment and files,
secrets never printed, exit codes, and the refusal to act while a writer runs.

The command's own behaviour runs over the in-memory reference sink, registered as the
backend ``memory`` for the test (no services, no files); the secrets check uses the
postgres backend, whose options hold a password, and the end-to-end checks a real query of
the files backend in a process of its own."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
import twopc.plugins
import twopc.testing
from tests.harness.outputs import read_ids, staged_attempts
from tests.harness.processes import local_query, run_process
from twopc import CommitLog
from twopc._coordination.liveness import Heartbeat, HeartbeatState
from twopc._coordination.records import BatchRun, Decision
from twopc.cli import main
from twopc.protocol import Footprint

SINK_ID = "local-orders"  # fixed by tests/harness/local_query.py


def _files_args(out: Path, *extra: str) -> list[str]:
    return ["files", "--sink-id", SINK_ID, "--option", f"path={out}", *extra]


class _MemoryBackend:
    @twopc.hookimpl
    def twopc_sinks(self) -> list[twopc.SinkSpec]:
        return [twopc.SinkSpec("memory", "twopc.testing:MemoryDriverSink")]


@pytest.fixture
def memory_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process-wide registry, with only the in-memory sink, as ``memory``."""
    registry = twopc.PluginRegistry([_MemoryBackend()], entry_points=False)
    monkeypatch.setattr(twopc.plugins, "_default_registry", registry)


def _memory_args(log: Path, store: str, *extra: str) -> list[str]:
    args = ["memory", "--sink-id", "orders", "--option", f"store={store}"]
    return [*args, "--commit-log", str(log), *extra]


@pytest.mark.unit
@pytest.mark.usefixtures("memory_backend")
def test_status_of_a_sink_that_never_ran(
    tmp_path: Path, store_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", *_memory_args(tmp_path / "log", store_name), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["in_doubt"] == [] and body["queries"] == [] and body["writers"] == []
    assert (body["commit_log"], body["sink"]) == (
        str(tmp_path / "log"),
        f"memory store {store_name!r}",
    )


@pytest.mark.unit
@pytest.mark.usefixtures("memory_backend")
def test_options_from_a_file_and_the_environment(
    tmp_path: Path,
    store_name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    options = tmp_path / "sink.json"
    options.write_text(json.dumps({"store": "from-the-file"}))
    monkeypatch.setenv("STORE_NAME", store_name)
    args = ["status", "memory", "--sink-id", "orders", "--options-json", str(options)]
    args += ["--commit-log", str(tmp_path / "log")]
    assert main([*args, "--option-env", "store=STORE_NAME", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["sink"] == f"memory store {store_name!r}"  # the environment wins


@pytest.mark.unit
@pytest.mark.usefixtures("memory_backend")
@pytest.mark.parametrize("value", ["-5", "0", "nan", "soon"])
def test_stale_after_must_be_a_positive_number(
    tmp_path: Path, store_name: str, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    args = ["status", *_memory_args(tmp_path / "log", store_name), f"--stale-after={value}"]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert "argument --stale-after:" in capsys.readouterr().err


@pytest.mark.unit
@pytest.mark.usefixtures("memory_backend")
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--option-env", "store=TWOPC_NO_SUCH_VARIABLE"], "is not set"),
        (["--option", "novalue"], "expects KEY=VALUE"),
        (["--option-json", "store=12x"], "not valid JSON"),
        (["--option", "no_such_option=1"], "the memory backend has no option 'no_such_option'"),
        (["--option", "stor=x"], "has no option 'stor' (did you mean 'store'?)"),
    ],
)
def test_bad_options_exit_2(
    tmp_path: Path,
    store_name: str,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    assert main(["status", *_memory_args(tmp_path / "log", store_name), *extra]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.unit
@pytest.mark.usefixtures("memory_backend")
def test_a_sink_without_its_own_log_needs_commit_log_or_checkpoint(
    store_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["status", "memory", "--sink-id", "orders", "--option", f"store={store_name}"]
    assert main(args) == 2
    assert "--commit-log" in capsys.readouterr().err


@pytest.mark.unit
@pytest.mark.usefixtures("memory_backend")
def test_recover_commits_what_was_decided_and_aborts_the_rest(
    tmp_path: Path, store_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = twopc.testing.memory_store(store_name)
    sink = twopc.testing.MemoryDriverSink(store_name)
    log = CommitLog(str(tmp_path / "log"))
    prepared = []
    for batch in (0, 1):
        txn = sink.begin_transaction(twopc.TaskContext("orders", "q", batch, 0))
        sink.invoke(txn, _ids(batch))
        prepared.append(sink.pre_commit(txn))
    log.record_decision(Decision("orders", "q", 0, (prepared[0],)))
    log.record_run("q", 1, BatchRun(Footprint(sink.naming(), 1)))  # as before phase 1
    args = _memory_args(tmp_path / "log", store_name)
    assert main(["recover", *args, "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dry_run"] is True
    assert len(store.prepared) == 2  # a dry run changes nothing
    assert main(["recover", *args]) == 0
    assert "afterwards: nothing in doubt" in capsys.readouterr().out
    assert (store.visible, store.prepared) == ([0], {})


def _ids(batch: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array([batch], pa.int64())})


class Terminal:
    """A pseudo-terminal: ``stream`` writes to it, :meth:`seen` closes it and returns what
    reached it (read as it comes, so a full buffer never blocks the command)."""

    def __init__(self) -> None:
        self._master, slave = os.openpty()
        self.stream = os.fdopen(slave, "w", encoding="utf-8")
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self._master, 4096)
            except OSError:  # EIO: the terminal's other side is closed
                return
            if not data:
                return
            self._chunks.append(data)

    def seen(self) -> str:
        self.stream.close()
        self._reader.join(timeout=10)
        return b"".join(self._chunks).decode()

    def close(self) -> None:
        self.stream.close()
        os.close(self._master)


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    """A pseudo-terminal; a test puts it in place of ``sys.stderr`` itself (pytest's capture
    sets ``sys.stderr`` again when the test's call starts)."""
    tty = Terminal()
    yield tty
    tty.close()


def _lingering(store_name: str, log: CommitLog, prepared: int) -> None:
    """``prepared`` transactions of batch 1 that no decision names, and batch 0 decided
    but not committed."""
    sink = twopc.testing.MemoryDriverSink(store_name)
    for partition in range(prepared):
        txn = sink.begin_transaction(twopc.TaskContext("orders", "q", 1, partition))
        sink.invoke(txn, _ids(partition))
        sink.pre_commit(txn)
    txn = sink.begin_transaction(twopc.TaskContext("orders", "q", 0, 0))
    sink.invoke(txn, _ids(0))
    log.record_decision(Decision("orders", "q", 0, (sink.pre_commit(txn),)))
    log.record_run("q", 1, BatchRun(Footprint(sink.naming(), prepared)))  # as before phase 1


@pytest.mark.unit
@pytest.mark.usefixtures("memory_backend")
def test_status_and_recover_show_progress_on_a_terminal(
    tmp_path: Path,
    store_name: str,
    capsys: pytest.CaptureFixture[str],
    terminal: Terminal,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stderr", terminal.stream)
    _lingering(store_name, CommitLog(str(tmp_path / "log")), prepared=120)
    args = _memory_args(tmp_path / "log", store_name)
    assert main(["status", *args]) == 0
    assert "in doubt: 122" in capsys.readouterr().out
    assert main(["recover", *args]) == 0
    assert "afterwards: nothing in doubt" in capsys.readouterr().out
    shown = terminal.seen()
    assert "checked 121/121 prepared transactions" in shown  # status, and recover's plan
    assert "read 1/1 pending decisions" in shown
    assert "finished 1/1 decided batches" in shown
    assert "aborted 120/120 prepared transactions" in shown
    assert "inspecting the target ..." in shown
    assert shown.endswith("\r")  # each command erases its line before the report


@pytest.mark.unit
@pytest.mark.usefixtures("memory_backend")
def test_no_progress_in_json_mode_even_on_a_terminal(
    tmp_path: Path,
    store_name: str,
    capsys: pytest.CaptureFixture[str],
    terminal: Terminal,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stderr", terminal.stream)
    _lingering(store_name, CommitLog(str(tmp_path / "log")), prepared=120)
    args = _memory_args(tmp_path / "log", store_name)
    assert main(["status", *args, "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["in_doubt"]) == 122  # decision + work
    assert main(["recover", *args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["aborted"] == 120
    assert terminal.seen() == ""


@pytest.mark.unit
@pytest.mark.usefixtures("memory_backend")
def test_no_progress_when_stderr_is_not_a_terminal(
    tmp_path: Path, store_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _lingering(store_name, CommitLog(str(tmp_path / "log")), prepared=120)
    args = _memory_args(tmp_path / "log", store_name)
    assert main(["status", *args]) == 0  # stderr is pytest's capture: a pipe, in effect
    assert main(["recover", *args]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.unit
def test_secrets_in_options_are_never_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "S3cret-Pw-42"
    args = [
        "status",
        "postgres",
        "--sink-id",
        "orders",
        "--option",
        f"dsn=postgresql://user:{secret}@127.0.0.1:1/db",
        "--option",
        "table=t",
        "--option",
        "transaction_mode=two_phase",
        "--commit-log",
        str(tmp_path / "log"),
    ]
    assert main(args) == 1  # nothing listens on port 1: the target cannot be read
    out = capsys.readouterr()
    assert "cannot connect to user@127.0.0.1:1/db" in out.err
    assert secret not in out.out + out.err


def _crash_after_decision(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    result = run_process(
        local_query("local_query", checkpoint=tmp_path / "chk", output=out),
        faults="after_decision:kill@batch=1",
        timeout=120,
    )
    assert result.returncode != 0
    return out


def _pretend_running(out: Path, host: str, updated_ago: float) -> None:
    log = CommitLog(f"{out}/_twopc/{SINK_ID}")
    (crashed,) = log.heartbeats()
    now = time.time()
    log.write_heartbeat(
        Heartbeat(
            SINK_ID,
            crashed.query_id,
            host,
            os.getpid(),
            now,
            now - updated_ago,
            2,
            HeartbeatState.IDLE,
        )
    )


@pytest.mark.e2e
def test_recover_refuses_while_a_writer_runs_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _crash_after_decision(tmp_path)
    _pretend_running(out, socket.gethostname(), updated_ago=3600)  # this live process
    staged = staged_attempts(out)
    assert len(staged) == 2

    assert main(["status", *_files_args(out)]) == 0
    assert "RUNNING (process" in capsys.readouterr().out
    assert main(["recover", *_files_args(out)]) == 2
    assert "refused: a writer is running" in capsys.readouterr().out
    assert staged_attempts(out) == staged  # nothing touched
    assert main(["recover", *_files_args(out), "--dry-run"]) == 0
    assert "recover would refuse" in capsys.readouterr().out

    _pretend_running(out, "another-host", updated_ago=5)
    assert main(["recover", *_files_args(out), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["refused"].startswith("a writer is running")
    assert main(["recover", *_files_args(out), "--stale-after", "1"]) == 0  # 5 s is stale now
    assert staged_attempts(out) == []
    assert set(read_ids(out)) == {b * 1000 + i for b in range(2) for i in range(100)}


@pytest.mark.e2e
def test_force_recovers_despite_a_fresh_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _crash_after_decision(tmp_path)
    _pretend_running(out, "another-host", updated_ago=0)
    assert main(["recover", *_files_args(out), "--force"]) == 0
    assert "afterwards: nothing in doubt" in capsys.readouterr().out
    assert staged_attempts(out) == []
    assert len(read_ids(out)) == 200
