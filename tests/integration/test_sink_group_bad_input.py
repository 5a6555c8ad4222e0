"""Bad input in one member of a SinkGroup fails the whole batch, on the real services:
PostgreSQL + MariaDB (both ``two_phase``) and files + PostgreSQL. A row that one member's
target cannot store (a string longer than its column) fails the batch with that member's
sink id, the batch, the partition and the cause named; no target shows anything of the
batch, nothing is left prepared; the fixed batch then commits once everywhere. The
targets are read back with SQL and pyarrow."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
import twopc.local
from tests.harness.backend_cases import new_target
from tests.harness.group_recipe import GroupRecipe
from tests.harness.sink_recipe import build_sink
from tests.harness.targets import Target

pytestmark = pytest.mark.integration

QUERY, PARTITIONS, ROWS = "q-bad", 2, 10
GROUPS = {
    "postgres+mysql": [("orders", "postgres", "two_phase"), ("audit", "mysql", "two_phase")],
    "files+postgres": [("archive", "files", "parquet"), ("audit", "postgres", "two_phase")],
}

Group = tuple[GroupRecipe, list[Target]]


@pytest.fixture(params=list(GROUPS))
def group(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Group]:
    members, targets = [], []
    for name, backend, mode in GROUPS[request.param]:
        target, spec = new_target(request, backend, mode, tmp_path / name, prefix=f"b{name[0]}")
        members.append((name, spec, ()))
        targets.append(target)
    recipe = GroupRecipe.of(f"bad-{uuid.uuid4().hex[:8]}", *members)
    yield recipe, targets
    for target, member in zip(targets, recipe.members, strict=True):
        target.cleanup(member.sink)


def _batch(batch_id: int, long_payload_in: int | None = None) -> list[pa.Table]:
    """Two partitions; ``long_payload_in``: that partition carries one 100-character
    payload, longer than the SQL tables' VARCHAR(40)."""
    parts = []
    for p in range(PARTITIONS):
        ids = [batch_id * 1000 + p * ROWS + i for i in range(ROWS)]
        payloads = [f"b{batch_id}p{p}"] * ROWS
        if p == long_payload_in:
            payloads[3] = "x" * 100
        parts.append(pa.table({"id": pa.array(ids, pa.int64()), "payload": payloads}))
    return parts


def _writer(recipe: GroupRecipe, tmp_path: Path) -> twopc.local.LocalBatchWriter:
    """The last member gets the payload as it is (the bad row reaches it); the others get
    it cut to 40 characters, which they can store."""
    last = recipe.members[-1].name

    def shortened(table: Any) -> Any:
        cut = [None if v is None else v[:40] for v in table["payload"].to_pylist()]
        return table.set_column(1, "payload", pa.array(cut, pa.string()))

    group = twopc.SinkGroup(
        {
            m.name: twopc.Member(build_sink(m.sink), project=None if m.name == last else shortened)
            for m in recipe.members
        }
    )
    return twopc.local.foreach_batch(
        group, recipe.sink_id, commit_log=str(tmp_path / "log"), processes=False
    )


def _ids(group: Group) -> list[set[int]]:
    recipe, targets = group
    found = []
    for target, member in zip(targets, recipe.members, strict=True):
        seen = target.committed(member.sink)
        assert max(seen.values(), default=1) == 1, f"{member.name}: duplicates"
        found.append(set(seen))
    return found


def _leftovers(group: Group) -> list[str]:
    recipe, targets = group
    return [
        left
        for target, member in zip(targets, recipe.members, strict=True)
        for left in target.leftovers(member.sink)
    ]


def test_a_row_one_member_rejects_fails_the_batch_everywhere(group: Group, tmp_path: Path) -> None:
    recipe, _ = group
    writer = _writer(recipe, tmp_path)
    assert writer.write(QUERY, 0, _batch(0)).status == "committed"
    first = {i for t in _batch(0) for i in t["id"].to_pylist()}
    with pytest.raises(twopc.BatchFailedError) as failed:
        writer.write(QUERY, 1, _batch(1, long_payload_in=1))
    error = failed.value
    last = recipe.members[-1]
    assert (error.sink_id, error.batch_id, error.partition) == (last.sink.sink_id, 1, 1)
    assert "payload" in str(error), str(error)  # the cause names the column
    assert _ids(group) == [first] * len(recipe.members)  # nothing of batch 1 anywhere
    assert _leftovers(group) == []
    fixed = _writer(recipe, tmp_path)
    assert fixed.write(QUERY, 1, _batch(1)).status == "committed"
    second = {i for t in _batch(1) for i in t["id"].to_pylist()}
    assert _ids(group) == [first | second] * len(recipe.members)
    assert _leftovers(group) == []
