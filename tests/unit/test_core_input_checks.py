"""Issue 28's core cases: options refused by name when the sink is created, a damaged commit
log named by file and batch, and what a new user meets first on the command line
(``--version``, ``plugins``, ``demo`` without PySpark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
from twopc import CommitLog, ConfigurationError, UnsupportedFormatError
from twopc._coordination.records import BatchRun, Decision
from twopc.cli import main
from twopc.protocol import Footprint
from twopc.testing import MemoryDriverSink

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


# -- options, checked against the backend factory's signature ---------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"path": "/tmp/out", "fromat": "csv"},
            "the files backend has no option 'fromat' (did you mean 'format'?); its options are: ",
        ),
        (
            {"path": "/tmp/out", "target_file_size": "big"},
            "the files backend's option 'target_file_size' takes a whole number, not str 'big'",
        ),
        (
            {"path": "/tmp/out", "partition_by": 5},
            "the files backend's option 'partition_by' takes a list of strings, not int 5",
        ),
        (
            {"path": "/tmp/out", "storage_options": "anon=true"},
            "the files backend's option 'storage_options' takes a mapping (dict)",
        ),
        (
            {"path": 7},
            "the files backend's option 'path' takes a string, not int 7",
        ),
    ],
)
def test_create_sink_names_the_option_it_refuses(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        twopc.create_sink("files", **options)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tabel": "t"}, "the postgres backend has no option 'tabel' (did you mean 'table'?)"),
        (
            {"table": "t", "key_columns": 5},
            "the postgres backend's option 'key_columns' takes a list of strings, not int 5",
        ),
        (
            {"table": "t", "lock_timeout_seconds": "abc"},
            "the postgres backend's option 'lock_timeout_seconds' takes a number, not str 'abc'",
        ),
        (
            {"table": "t", "create_table": "yes"},
            "the postgres backend's option 'create_table' takes true or false, not str 'yes'",
        ),
    ],
)
def test_sql_options_are_refused_before_any_connection(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        twopc.create_sink("postgres", dsn="postgresql://u@127.0.0.1:1/db", **options)
    assert message in str(refused.value)


def test_values_of_the_right_type_pass(tmp_path: Path) -> None:
    sink = twopc.create_sink(
        "files",
        path=str(tmp_path / "out"),
        partition_by=("day",),
        target_file_size=1024,
        storage_options={"auto_mkdir": True},
    )
    assert isinstance(sink, twopc.Sink)


# -- a damaged commit log ----------------------------------------------------------------------


def test_a_truncated_decision_names_its_file_and_batch(tmp_path: Path, store_name: str) -> None:
    log = CommitLog(str(tmp_path / "log"))
    sink = MemoryDriverSink(store_name)
    txn = sink.begin_transaction(twopc.TaskContext("orders", "q-1", 4, 0))
    sink.invoke(txn, pa.record_batch({"id": pa.array([1], pa.int64())}))
    log.record_run("q-1", 4, BatchRun(Footprint(sink.naming(), 1)))
    log.record_decision(Decision("orders", "q-1", 4, (sink.pre_commit(txn),)))
    path = tmp_path / "log" / "q-1" / f"{4:020d}.decision.json"
    path.write_bytes(path.read_bytes()[:25])  # a torn write
    with pytest.raises(UnsupportedFormatError) as refused:
        twopc.sink_status(sink, "orders", log)
    message = str(refused.value)
    assert f"file {path}" in message
    assert "batch 4 of query q-1" in message
    assert "A damaged commit log" in message


# -- the command line a new user meets first -----------------------------------------------------


@pytest.mark.parametrize("flag", ["--version", "-V", "version"])
def test_version_as_flag_and_command(flag: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "twopc.cli", flag], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"twopc {twopc.__version__}"


def test_plugins_says_whether_pyspark_is_there_and_lists_progress_reporters(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "PROGRESS REPORTER" in out and "kafka-consumer-group" in out
    assert "pyspark: 4." in out
    assert main(["plugins", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["pyspark"]["installed"] is True
    assert [r["kind"] for r in body["progress_reporters"]] == ["kafka-consumer-group"]


def _without_pyspark(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python cannot import pyspark: a ``sitecustomize`` that hides it
    (as if it were not installed)."""
    site = tmp_path / "site"
    site.mkdir()
    # a None entry in sys.modules is how Python spells "cannot be imported"
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['pyspark'] = None\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO / "src")])}


def test_demo_without_pyspark_says_how_to_install_it(tmp_path: Path) -> None:
    env = _without_pyspark(tmp_path)
    work = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "twopc.cli", "demo", "--dir", str(work)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "PySpark is not installed" in done.stderr
    assert 'pip install "twopc[files,spark]"' in done.stderr
    assert "Traceback" not in done.stderr
    assert "missing=" not in done.stdout
    assert not work.exists()  # nothing made, nothing left behind

    plugins = subprocess.run(
        [sys.executable, "-m", "twopc.cli", "plugins"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert plugins.returncode == 0, plugins.stderr
    assert 'pyspark: not installed; the Spark entry points need it: pip install "twopc[spark]"' in (
        plugins.stdout
    )


# -- the command line masks secrets in whatever it prints ----------------------------------------


@pytest.mark.parametrize("password", ["hunter2#x", "s3cr/t?pw", "p@ss:w%rd", "tok#en/42?"])
def test_the_command_line_masks_option_secrets_and_url_passwords(
    password: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from twopc._operations.cli import secrets_in, sink_options
    from twopc.cli import build_parser
    from twopc.secrets import redact

    monkeypatch.setenv("TWOPC_TEST_SECRET", password)
    args = build_parser().parse_args(
        [
            "status",
            "kafka",
            "--sink-id",
            "s",
            "--option-env",
            "producer_config.sasl.password=TWOPC_TEST_SECRET",
            "--option-json",
            f"connect_options={json.dumps({'password': password})}",
        ]
    )
    text = (
        f"driver said: password={password} for postgresql://etl:{password}@db:5432/shop; "
        f"sasl {password}"
    )
    masked = redact(text, secrets_in(sink_options(args)))
    assert password not in masked
    assert "postgresql://etl:***@db:5432/shop" in masked
