"""A :class:`~twopc.SinkGroup` for a test query: plain data (JSON on a query's command line),
built the same way by the local query and the Spark query.

Each member is a :class:`SinkRecipe` whose ``sink_id`` is the member's own
(``<group>.<member>``, what the group writes it under), so that its target's read-back and
leftover checks look where the member wrote; ``columns`` is the member's projection (the
input columns it keeps, in both engines' ``select``)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Any

import twopc
from tests.harness.sink_recipe import SinkRecipe, build_sink


@dataclass(frozen=True)
class MemberRecipe:
    name: str
    sink: SinkRecipe
    columns: tuple[str, ...] = ()  # () keeps every column


@dataclass(frozen=True)
class GroupRecipe:
    sink_id: str
    members: tuple[MemberRecipe, ...]
    backend: str = "group"
    log_outside: bool = False  # keep the commit log next to, not inside, the checkpoint

    @classmethod
    def of(cls, sink_id: str, *members: tuple[str, SinkRecipe, tuple[str, ...]]) -> GroupRecipe:
        """A group whose members' recipes are renamed to the members' own sink ids."""
        return cls(
            sink_id,
            tuple(
                MemberRecipe(
                    name, replace(spec, sink_id=twopc.groups.member_sink_id(sink_id, name)), cols
                )
                for name, spec, cols in members
            ),
        )

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> GroupRecipe:
        data = json.loads(text)
        members = tuple(
            MemberRecipe(m["name"], SinkRecipe(**m["sink"]), tuple(m["columns"]))
            for m in data["members"]
        )
        return cls(data["sink_id"], members, log_outside=bool(data.get("log_outside")))

    def commit_log(self, checkpoint: str) -> str:
        """The group's decisions, inside the checkpoint or (``log_outside``) beside it."""
        return f"{checkpoint}-twopc-log" if self.log_outside else f"{checkpoint}/twopc-log"

    def renamed(self, *, kafka_mode: bool = False) -> GroupRecipe:
        """A group has no naming option to change (the chaos campaign's ``rename``)."""
        return self


def writes_kafka(recipe: SinkRecipe | GroupRecipe) -> bool:
    """Whether the query writes Kafka (its input then carries the record key)."""
    if isinstance(recipe, GroupRecipe):
        return any(m.sink.backend == "kafka" for m in recipe.members)
    return recipe.backend == "kafka"


def build_group(recipe: GroupRecipe) -> twopc.SinkGroup:
    return twopc.SinkGroup(
        {
            m.name: twopc.Member(build_sink(m.sink), project=_selector(m.columns))
            for m in recipe.members
        }
    )


def _selector(columns: tuple[str, ...]) -> Any:
    """A projection both engines run: ``select`` of a Spark DataFrame or an Arrow table."""
    if not columns:
        return None
    keep = list(columns)
    return lambda data: data.select(keep)


def recipe_of(text: str) -> SinkRecipe | GroupRecipe:
    """A query's recipe from its JSON: a group's has members."""
    return GroupRecipe.loads(text) if '"members"' in text else SinkRecipe.loads(text)


def build(recipe: SinkRecipe | GroupRecipe) -> twopc.Sink[Any]:
    return build_group(recipe) if isinstance(recipe, GroupRecipe) else build_sink(recipe)
