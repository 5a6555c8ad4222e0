"""``shuffle_by_key=False`` against the real PostgreSQL and MariaDB servers: what a batch
whose key is split over two partitions does (the promise the option asks for, broken).

In ``transaction`` mode each task commits on its own, so the later commit's row stays, once.
In ``two_phase`` mode the first task's prepared branch holds the key's lock until the
driver commits, which it does only after every task is prepared: the second task waits
until ``lock_timeout_seconds`` and fails with an error that says why; nothing of it stays.
"""

from __future__ import annotations

import pytest

import twopc
from tests.harness.sql_sink_cases import Db, Env, batch, commit, write, write_and_commit

pytestmark = pytest.mark.integration

KV = "id bigint PRIMARY KEY, v varchar(64), n bigint"


def test_split_key_in_transaction_mode_keeps_one_row(db: Db, env: Env) -> None:
    table = env.table()
    db.create(table, KV)
    sink = env.sink(table, mode="upsert", key_columns=["id"], shuffle_by_key=False)
    sid = env.sink_id()
    write_and_commit(sink, env.ctx(sid, partition=0), batch(id=[1, 2], v=["a", "b"], n=[1, 2]))
    write_and_commit(sink, env.ctx(sid, partition=1), batch(id=[2, 3], v=["B", "c"], n=[2, 3]))
    assert db.rows(table) == [(1, "a", 1), (2, "B", 2), (3, "c", 3)]


def test_split_key_in_two_phase_mode_fails_with_a_hint(db: Db, env: Env) -> None:
    table = env.table()
    db.create(table, KV)
    sink = env.sink(
        table,
        mode="upsert",
        key_columns=["id"],
        transaction_mode="two_phase",
        shuffle_by_key=False,
        lock_timeout_seconds=1,
    )
    sid = env.sink_id()
    first, prepared = write(
        sink, env.ctx(sid, partition=0), batch(id=[1, 2], v=["a", "b"], n=[1, 2])
    )
    with pytest.raises(twopc.SinkError) as caught:
        write(sink, env.ctx(sid, partition=1), batch(id=[2, 3], v=["B", "c"], n=[2, 3]))
    text = str(caught.value)
    assert f"sink {sid!r}, batch 0, partition 1" in text, text
    assert "pre-commit failed" in text and "shuffle_by_key=False" in text, text
    assert "lock_timeout_seconds" in text, text
    assert isinstance(caught.value, twopc.TransientSinkError), type(caught.value)
    # the first partition's prepared branch is untouched; the second left nothing
    assert env.prepared(sid) != []
    commit(sink, first, prepared)
    assert db.rows(table) == [(1, "a", 1), (2, "b", 2)]
    assert env.prepared(sid) == []
