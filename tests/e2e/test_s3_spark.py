"""The files backend on the S3 API through real Spark, committing by completing multipart
uploads: the driver SIGKILLed between the decision and the commit, and the S3 server
SIGKILLed there too, each followed by a restart. Checked on the store: every row once, no
staged object and no open upload left, read back with pyarrow's S3 filesystem."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import s3fs

from tests.chaos.sinks import SinkSpec
from tests.chaos.targets import S3FilesTarget, make_target
from tests.e2e.backend_cases import add_input
from tests.e2e.entry_runs import command, kill_when, run
from tests.integration.conftest import S3Store
from tests.integration.services import ServiceControl

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def target(s3_store: S3Store, tmp_path: Path) -> Iterator[tuple[S3FilesTarget, SinkSpec]]:
    env = {
        "S3_ENDPOINT_URL": s3_store.endpoint_url,
        "S3_BUCKET": s3_store.bucket,
        "S3_ACCESS_KEY_ID": s3_store.access_key_id,
        "S3_SECRET_ACCESS_KEY": s3_store.secret_access_key,
    }
    target = make_target("s3", env)
    assert isinstance(target, S3FilesTarget)
    spec = target.prepare(f"s3-{tmp_path.name[-12:]}", "parquet", tmp_path, 1)
    yield target, spec
    target.cleanup(spec)


def _decided(target: S3FilesTarget, spec: SinkSpec, batch_id: int) -> bool:
    """Whether the commit log, next to the data on the store, holds the batch's decision."""
    s3 = s3fs.S3FileSystem(**target.storage_options())
    prefix = spec.address.removeprefix("s3://")
    pattern = f"{prefix}/_twopc/{spec.sink_id}/*/{batch_id:020d}.decision.json"
    s3.invalidate_cache()
    return bool(s3.glob(pattern))


def _assert_exactly_once(target: S3FilesTarget, spec: SinkSpec, expected: set[int]) -> None:
    seen = target.committed(spec)
    assert sorted(i for i, n in seen.items() if n > 1) == []
    assert set(seen) == expected
    assert target.leftovers(spec) == []


@pytest.mark.parametrize("entry", ["foreach", pytest.param("format", marks=pytest.mark.extended)])
def test_the_driver_sigkilled_between_decision_and_commit(
    target: Any, tmp_path: Path, entry: str
) -> None:
    s3_target, spec = target
    source, checkpoint = tmp_path / "in", tmp_path / "chk"
    expected = set().union(*(add_input(source, i) for i in range(3)))
    stalled = command(entry, spec, source, checkpoint, faults="after_decision:sleep=300@batch=1")
    kill_when(stalled, tmp_path, lambda: _decided(s3_target, spec, 1), "batch 1 was decided")
    # decided, not completed: the batch's files are open uploads, invisible
    assert set(s3_target.committed(spec)) < expected
    assert any("open upload" in item for item in s3_target.leftovers(spec))
    rerun = run(command(entry, spec, source, checkpoint))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    _assert_exactly_once(s3_target, spec, expected)


def test_the_s3_server_sigkilled_between_decision_and_commit(
    target: Any, tmp_path: Path, services: ServiceControl
) -> None:
    """The store dies while a decided batch waits for its commit, and the driver with it;
    the store comes back with its open uploads (S3Proxy keeps them on disk) and the
    restart completes them."""
    s3_target, spec = target
    source, checkpoint = tmp_path / "in", tmp_path / "chk"
    expected = set().union(*(add_input(source, i) for i in range(3)))
    stalled = command(
        "foreach", spec, source, checkpoint, faults="after_decision:sleep=300@batch=1"
    )
    kill_when(stalled, tmp_path, lambda: _decided(s3_target, spec, 1), "batch 1 was decided")
    services.kill("s3")
    services.start("s3")
    rerun = run(command("foreach", spec, source, checkpoint))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    _assert_exactly_once(s3_target, spec, expected)
