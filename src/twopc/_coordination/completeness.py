"""Whether phase 1's reports make a whole batch: one report per partition the engine ran,
none rejected, each holding a committable of this batch. The one place a batch's
committables are taken from its reports."""

from __future__ import annotations

from collections.abc import Sequence

from twopc._contract.paths import CommitPath
from twopc._coordination.reports import TaskOutcome, TaskReport
from twopc.errors import BatchFailedError
from twopc.protocol import Committable

__all__ = ["WHAT_STAYS", "collect_committables", "ranges"]

WHAT_STAYS = {
    CommitPath.DRIVER: "nothing of the batch was committed",
    CommitPath.TASK: (
        "partitions that committed in their tasks stay committed and are skipped when the "
        "batch runs again"
    ),
}
"""What a failed batch leaves behind, by commit path: the end of every phase-1 error."""


def collect_committables(
    reports: Sequence[TaskReport],
    *,
    sink_id: str,
    query_id: str,
    batch_id: int,
    path: CommitPath,
    partitions_run: int | None,
) -> list[Committable]:
    """The batch's committables, one per partition, or :class:`BatchFailedError`: a
    partition that rejected its data, a report missing, a committable of another batch.
    ``partitions_run``: how many partitions the engine ran, as it knows apart from the
    reports, so that a lost *last* report is caught too; ``None`` where it cannot tell
    (the reports' partition numbers are then trusted to be ``0..n-1``)."""
    by_partition: dict[int, TaskReport] = {}
    for report in reports:
        by_partition.setdefault(report.partition, report)
    _refuse_rejected(by_partition, sink_id, batch_id, path)
    count = len(by_partition) if partitions_run is None else partitions_run
    expected = set(range(count))
    if set(by_partition) != expected:
        missing = sorted(expected - set(by_partition))
        raise BatchFailedError(
            f"phase 1 ran {count} partition(s) but reported partitions "
            f"{ranges(sorted(by_partition))}"
            + (f": no report of partition(s) {ranges(missing)}" if missing else "")
            + f" ({WHAT_STAYS[path]})",
            sink_id=sink_id,
            batch_id=batch_id,
            partition=missing[0] if missing else None,
        )
    committables: list[Committable] = []
    for partition in sorted(by_partition):
        committable = by_partition[partition].committable
        if committable is None or committable.batch_id != batch_id:
            why = "pre_commit returned no committable for this batch"
        elif committable.query_id != query_id or committable.sink_id != sink_id:
            why = "pre_commit returned a committable of another sink or query"
        else:
            committables.append(committable)
            continue
        raise BatchFailedError(why, sink_id=sink_id, batch_id=batch_id, partition=partition)
    return committables


def _refuse_rejected(
    by_partition: dict[int, TaskReport], sink_id: str, batch_id: int, path: CommitPath
) -> None:
    rejected = [r for r in by_partition.values() if r.outcome is TaskOutcome.REJECTED]
    if not rejected:
        return
    first = min(rejected, key=lambda r: r.partition)
    cause = first.rejection().at(sink_id=sink_id, batch_id=batch_id)
    raise BatchFailedError(
        f"{cause.cause_message} ({len(rejected)} of {len(by_partition)} partition(s) "
        f"rejected their data; {WHAT_STAYS[path]})",
        sink_id=sink_id,
        batch_id=batch_id,
        partition=first.partition,
    ) from cause


def ranges(numbers: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0..2, 5`` (a batch may have thousands of partitions)."""
    if not numbers:
        return "none"
    parts: list[str] = []
    start = previous = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        parts.append(str(start) if start == previous else f"{start}..{previous}")
        if number is not None:
            start = previous = number
    return ", ".join(parts)
