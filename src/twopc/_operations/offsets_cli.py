"""``twopc offsets``: where a query whose checkpoint is gone starts again, as the
``startingOffsets`` JSON Spark's Kafka source takes, read from the sink's target."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from twopc._operations.cli import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    open_sink,
    pairs,
    secrets_in,
    sink_arguments,
    sink_options,
)
from twopc._operations.offsets import find_start
from twopc.errors import StartingOffsetsError
from twopc.secrets import redact
from twopc.storage import join

__all__ = ["add_offsets_command"]


def add_offsets_command(commands: Any) -> None:
    """Register ``offsets`` on the main parser's subcommands."""
    offsets = commands.add_parser(
        "offsets",
        help="the startingOffsets JSON for a new checkpoint: where the committed output ends",
    )
    sink_arguments(offsets)
    offsets.add_argument(
        "--topic",
        action="append",
        default=None,
        metavar="TOPIC",
        help="a topic the new query reads (repeatable); stored offsets for other topics are "
        "refused",
    )
    offsets.set_defaults(func=_offsets)


def _offsets(args: argparse.Namespace) -> int:
    secrets: list[str] = []
    try:
        options = sink_options(args)
        secrets = secrets_in(options)
        sink, sink_id = open_sink(args, options)
        storage = dict(pairs(args.storage_option, "--storage-option")) or None
    except UsageError as exc:
        print(f"twopc offsets: {redact(str(exc), secrets)}", file=sys.stderr)
        return EXIT_USAGE
    commit_log = args.commit_log or (
        join(args.checkpoint, "twopc", sink_id) if args.checkpoint else None
    )
    try:
        point = find_start(
            sink, sink_id, topics=args.topic, commit_log=commit_log, storage_options=storage
        )
    except StartingOffsetsError as exc:
        print(f"twopc offsets: {redact(str(exc), secrets)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # the target or the log could not be read
        reason = str(exc) or "no answer in time (is the target stalled or unreachable?)"
        print(f"twopc offsets: {type(exc).__name__}: {redact(reason, secrets)}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(
            json.dumps(
                {
                    "sink_id": point.sink_id,
                    "query_id": point.query_id,
                    "batch_id": point.batch_id,
                    "from": point.where,
                    "starting_offsets": json.loads(point.spark_json()),
                },
                indent=2,
            )
        )
    else:
        print(point.spark_json())
        print(
            f"after batch {point.batch_id} of query {point.query_id} ({point.where})",
            file=sys.stderr,
        )
    return EXIT_OK
