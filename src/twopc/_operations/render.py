"""What ``twopc status`` and ``twopc recover`` print for a person: the plan as tables,
ages and short query ids, and the hint after a refused recovery."""

from __future__ import annotations

import datetime

from twopc._operations.recover import RecoveryReport
from twopc._operations.status import QueryStatus, SinkStatus, StatusItem

__all__ = ["render_recovery", "render_status"]


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _short(query_id: str | None) -> str:
    return "-" if query_id is None else query_id[:8]


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def render_status(status: SinkStatus) -> str:
    """The human-readable status: writers, last committed batches, items in doubt, notes."""
    lines = [
        f"sink {status.sink_id}: {status.sink}",
        f"commit log: {status.commit_log}",
    ]
    if not status.writers:
        lines.append("writers: no liveness record (no query running, or stopped cleanly)")
    for writer in status.writers:
        hb = writer.heartbeat
        when = datetime.datetime.fromtimestamp(hb.updated_at, datetime.UTC).isoformat(
            timespec="seconds"
        )
        state = "RUNNING" if writer.running else "not running"
        lines.append(
            f"writer of query {_short(hb.query_id)}: {state} ({writer.reason}); "
            f"last {hb.state} batch {hb.batch_id} at {when}"
        )
    for query in status.queries:
        text = f"query {query.query_id}: last committed batch {_cell(query.log_last_committed)}"
        text += " (commit log)"
        if query.target_partitions is not None:
            per = ", ".join(f"p{p}={b}" for p, b in sorted(query.target_partitions.items()))
            text += f", {_cell(query.target_last_committed)} (target markers: {per or 'none'})"
            if query.differs:
                text += " - the two differ"
        if query.pending_decisions:
            text += f"; decided, not finished: {list(query.pending_decisions)}"
        lines.append(text)
        lines.extend(_source_lines(query))
    items = status.items
    settled = not items and not status.warnings
    lines.append(f"in doubt: {len(items)}" + (" - nothing for recovery to do" if settled else ""))
    if items:
        lines.extend("  " + row for row in _table(items))
    lines.extend(f"WARNING: {warning}" for warning in status.warnings)
    if status.notes:
        lines.append("notes:")
        lines.extend(f"  - {note}" for note in status.notes)
    return "\n".join(lines)


def _source_lines(query: QueryStatus) -> list[str]:
    """The last committed batch's source offsets, and the progress group's lag."""
    if query.source is None:
        return []
    offsets = ", ".join(f"{t}[{p}]={o}" for t, p, o in query.source.positions())
    lines = [f"  source offsets of batch {query.source.batch_id}: {offsets}"]
    group = (query.progress_to or {}).get("group", "?")
    if query.group is not None:
        lag = _cell(query.group.lag)
        behind = [
            f"{t}[{p}] at {_cell(query.group.committed.get((t, p)))} of {end}"
            for (t, p), end in sorted(query.group.end.items())
        ]
        lines.append(f"  progress group {group}: lag {lag} ({', '.join(behind)})")
    elif query.group_error:
        lines.append(f"  progress group {group}: cannot read it ({query.group_error})")
    else:
        lines.append(f"  progress group {group}")
    return lines


def _table(items: tuple[StatusItem, ...]) -> list[str]:
    rows = [("ACTION", "KIND", "ID", "QUERY", "BATCH", "PART", "ATT", "AGE", "DETAIL")]
    for item in items:
        rows.append(
            (
                item.action,
                item.kind,
                item.ident,
                _short(item.query_id),
                _cell(item.batch_id),
                _cell(item.partition),
                _cell(item.attempt),
                _ago(item.age_seconds),
                item.detail,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(8)]
    return [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:8])) + "  " + row[8]
        for row in rows
    ]


def _refusal_hint(report: RecoveryReport) -> str:
    """What to do about a refusal: stop the writer, or point at the right commit log."""
    if report.plan.running:
        return "stop the query first, or use --force"
    unproven = report.plan.unproven
    cost = (
        f"; --force would abort {len(unproven)} prepared item(s) the log cannot vouch for "
        "(their batch's output is lost if it was decided)"
        if unproven
        else ""
    )
    return (
        "point recover at the commit log the query writes to: --checkpoint CHECKPOINT "
        "(its checkpointLocation, when it passed no commit_log=) or --commit-log URL (what "
        f"it passed as commit_log=); use --force only if that log is gone for good{cost}"
    )


def render_recovery(report: RecoveryReport, dry_run: bool) -> str:
    lines = [render_status(report.plan), ""]
    if report.refused:
        lines.append(f"refused: {report.refused}")
        lines.append(_refusal_hint(report))
        return "\n".join(lines)
    if dry_run:
        running = report.plan.running
        if running:
            lines.append("note: a writer is running; recover would refuse without --force")
        if report.plan.warnings:
            lines.append("note: recover would refuse without --force (see the warnings)")
        lines.append(f"dry run: {len(report.plan.items)} item(s) would be handled; nothing changed")
        return "\n".join(lines)
    lines.extend(f"forced: {line}" for line in report.forced)
    lines.append(
        f"recovered: {report.committed} committed, {report.aborted} aborted, {report.swept} swept"
    )
    if report.error:
        lines.append(f"recovery failed: {report.error}")
    if report.after is not None:
        left = report.after.items
        lines.append(
            "afterwards: nothing in doubt"
            if not left
            else f"afterwards: {len(left)} item(s) still in doubt:"
        )
        if left:
            lines.extend("  " + row for row in _table(left))
    return "\n".join(lines)
