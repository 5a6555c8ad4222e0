"""``twopc status`` and ``twopc recover``: find a sink from its options, show or resolve
what crashed runs left.

Sink options often hold secrets (passwords in DSNs, SASL passwords), so they can come from
the environment (``--option-env``) or a file (``--options-json``) as well as the command
line, and nothing here ever prints them: output shows :meth:`twopc.Sink.describe` only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twopc._coordination.commit_log import CommitLog
from twopc._coordination.liveness import DEFAULT_STALE_AFTER
from twopc._coordination.steps import steps_on
from twopc._engines.writer import resolve_commit_log, validate_sink_id
from twopc._operations.group_options import (
    GROUP_BACKEND,
    group_from_options,
    sink_from_options,
)
from twopc._operations.recover import recover_sink
from twopc._operations.render import render_recovery, render_status
from twopc._operations.status import (
    ProgressResolver,
    sink_status,
)
from twopc.errors import TwoPCError
from twopc.plugins import registry
from twopc.progress import ProgressReporter
from twopc.protocol import Sink
from twopc.secrets import redact

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "UsageError",
    "add_ops_commands",
    "open_sink",
    "pairs",
    "secrets_in",
    "sink_arguments",
    "sink_options",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad arguments: exit status 2."""


def add_ops_commands(commands: Any) -> None:
    """Register ``status`` and ``recover`` on the main parser's subcommands."""
    status = commands.add_parser(
        "status", help="what crashed runs of a sink left, and what recovery would do"
    )
    sink_arguments(status)
    status.add_argument(
        "--group-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a client setting of the progress reporter, e.g. TLS or SASL settings of a "
        "Kafka consumer group's cluster (librdkafka names; repeatable)",
    )
    status.add_argument(
        "--group-option-env",
        action="append",
        default=[],
        metavar="KEY=VARIABLE",
        help="a client setting of the progress reporter read from the environment "
        "(secrets; repeatable)",
    )
    status.add_argument(
        "--no-group",
        action="store_true",
        help="show the recorded source offsets without asking the progress group for its lag",
    )
    status.set_defaults(func=_status)

    recover = commands.add_parser(
        "recover", help="commit what was decided, abort what was not, sweep leftovers"
    )
    sink_arguments(recover)
    recover.add_argument(
        "--dry-run", action="store_true", help="print the plan (what status shows); change nothing"
    )
    recover.add_argument(
        "--force",
        action="store_true",
        help="act even though a liveness record says a writer runs, or the commit log cannot "
        "prove the prepared work undecided (it does not exist, or has no record of the "
        "batch): such work is aborted, and lost if it was decided",
    )
    recover.set_defaults(func=_recover)


def sink_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "backend",
        help="backend name, as in `twopc plugins`; `group` for a SinkGroup (its members in "
        "--options-json, see docs/groups.md)",
    )
    parser.add_argument("--sink-id", required=True, help="the sink id the query uses")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a sink option as a string (repeatable)",
    )
    parser.add_argument(
        "--option-json",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="a sink option given as JSON: numbers, booleans, lists (repeatable)",
    )
    parser.add_argument(
        "--option-env",
        action="append",
        default=[],
        metavar="KEY=VARIABLE",
        help="a sink option read from an environment variable, for secrets (repeatable)",
    )
    parser.add_argument(
        "--options-json",
        metavar="FILE",
        help="a JSON object of sink options ('-' reads stdin); the flags above override it",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--commit-log", metavar="URL", help="the commit log, if not the default")
    where.add_argument(
        "--checkpoint",
        metavar="URL",
        help="the query's checkpoint: the commit log is then <checkpoint>/twopc/<sink id>",
    )
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an fsspec option for the commit log's filesystem (repeatable)",
    )
    parser.add_argument(
        "--stale-after",
        type=_positive_seconds,
        default=DEFAULT_STALE_AFTER,
        metavar="SECONDS",
        help="a liveness record from another host older than this counts as stopped "
        f"(default {DEFAULT_STALE_AFTER:.0f})",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _positive_seconds(text: str) -> float:
    """A number of seconds above zero (argparse reports the error as a usage error)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def pairs(values: list[str], flag: str) -> list[tuple[str, str]]:
    pairs = []
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} expects KEY=VALUE, got {key or value!r}")
        pairs.append((key, rest))
    return pairs


def sink_options(args: argparse.Namespace) -> dict[str, Any]:
    """The sink's options from the file, then the flags (later ones win)."""
    options: dict[str, Any] = {}
    if args.options_json:
        try:
            raw = (
                sys.stdin.read()
                if args.options_json == "-"
                else Path(args.options_json).read_text()
            )
            loaded = json.loads(raw)
        except (OSError, ValueError) as exc:
            # the file may hold secrets: name it, never quote it
            raise UsageError(
                f"cannot read --options-json {args.options_json}: {type(exc).__name__}"
            ) from None
        if not isinstance(loaded, dict):
            raise UsageError("--options-json must hold a JSON object")
        options.update(loaded)
    for key, value in pairs(args.option, "--option"):
        options[key] = value
    for key, text in pairs(args.option_json, "--option-json"):
        try:
            options[key] = json.loads(text)
        except ValueError:
            raise UsageError(f"--option-json {key}: not valid JSON") from None
    for key, variable in pairs(args.option_env, "--option-env"):
        if variable not in os.environ:
            raise UsageError(f"--option-env {key}: environment variable {variable} is not set")
        options[key] = os.environ[variable]
    return options


def _open(args: argparse.Namespace, options: dict[str, Any]) -> tuple[Sink[Any], str, CommitLog]:
    sink, sink_id = open_sink(args, options)
    storage = dict(pairs(args.storage_option, "--storage-option")) or None
    try:
        url, storage_options = resolve_commit_log(
            sink, sink_id, args.commit_log, storage, args.checkpoint
        )
    except TwoPCError:
        raise UsageError(
            f"the {args.backend} sink keeps no commit log of its own: give --commit-log URL "
            "(what the query passed as commit_log=) or --checkpoint URL (its checkpoint "
            "location, when it passed no commit_log)"
        ) from None
    return sink, sink_id, CommitLog(url, storage_options)


def open_sink(args: argparse.Namespace, options: dict[str, Any]) -> tuple[Sink[Any], str]:
    """The sink the options describe, and the checked sink id."""
    try:
        sink_id = validate_sink_id(args.sink_id)
    except TwoPCError as exc:
        raise UsageError(str(exc)) from None
    try:
        # --option and --option-env give strings: typed as format("twopc") types them
        if args.backend == GROUP_BACKEND:
            sink: Sink[Any] = group_from_options(options)
        else:
            sink = sink_from_options(args.backend, options)
    except TypeError as exc:
        raise UsageError(
            f"the {args.backend} backend does not accept these options: {exc}"
        ) from None
    except TwoPCError as exc:
        raise UsageError(str(exc)) from None
    return sink, sink_id


_SECRET_NAME = re.compile(
    r"pass(word|wd)?|secret|token|credential|api[_.-]?key|access[_.-]?key|private[_.-]?key",
    re.IGNORECASE,
)


def secrets_in(options: Mapping[str, Any]) -> list[str]:
    """The values of options (and of nested option mappings: ``connect_options``,
    ``producer_config``, ``storage_options``) whose names say they are secrets."""
    found: list[str] = []
    for key, value in options.items():
        if isinstance(value, Mapping):
            found += secrets_in(value)
        elif isinstance(value, str) and _SECRET_NAME.search(str(key)):
            found.append(value)
    return found


def _run(args: argparse.Namespace, action: Any) -> int:
    # whatever is printed is masked with the secrets the options hold, and the URLs'
    # passwords: the last guard before a message leaves (the backends mask their own)
    secrets: list[str] = []
    try:
        options = sink_options(args)  # once: --options-json - reads stdin
        secrets = secrets_in(options)
        sink, sink_id, log = _open(args, options)
    except UsageError as exc:
        print(f"twopc {args.command}: {redact(str(exc), secrets)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return int(action(sink, sink_id, log))
    except Exception as exc:  # the target or the log could not be read
        # a client's bare timeout (concurrent.futures.TimeoutError) carries no message
        reason = str(exc) or "no answer in time (is the target stalled or unreachable?)"
        print(
            f"twopc {args.command}: {type(exc).__name__}: {redact(reason, secrets)}",
            file=sys.stderr,
        )
        return EXIT_FAILED


def _group_resolver(args: argparse.Namespace) -> ProgressResolver | None:
    """How ``twopc status`` reaches the progress reporter a decision names (e.g. a Kafka
    consumer group): through the plugin that provides its kind, with the client settings
    given on the command line."""
    if args.no_group:
        return None
    config: dict[str, Any] = dict(pairs(args.group_option, "--group-option"))
    for key, variable in pairs(args.group_option_env, "--group-option-env"):
        if variable not in os.environ:
            raise UsageError(
                f"--group-option-env {key}: environment variable {variable} is not set"
            )
        config[key] = os.environ[variable]

    def resolve(described: Mapping[str, Any]) -> ProgressReporter:
        return registry().create_progress_reporter(described, config)

    return resolve


def _status(args: argparse.Namespace) -> int:
    try:
        resolver = _group_resolver(args)
    except UsageError as exc:
        print(f"twopc {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE

    def show(sink: Sink[Any], sink_id: str, log: CommitLog) -> int:
        with steps_on(sys.stderr, json=args.json) as steps:
            status = sink_status(
                sink,
                sink_id,
                log,
                stale_after=args.stale_after,
                progress=resolver,
                steps=steps,
            )
        if args.json:
            print(json.dumps(status.to_dict(), indent=2))
        else:
            print(render_status(status))
        return EXIT_OK

    return _run(args, show)


def _recover(args: argparse.Namespace) -> int:
    def act(sink: Sink[Any], sink_id: str, log: CommitLog) -> int:
        with steps_on(sys.stderr, json=args.json) as steps:
            report = recover_sink(
                sink,
                sink_id,
                log,
                dry_run=args.dry_run,
                force=args.force,
                stale_after=args.stale_after,
                steps=steps,
            )
        if args.json:
            print(json.dumps({"dry_run": args.dry_run, **report.to_dict()}, indent=2))
        else:
            print(render_recovery(report, args.dry_run))
        if report.refused:
            return EXIT_USAGE
        if report.error or (report.performed and not report.ok):
            return EXIT_FAILED
        return EXIT_OK

    return _run(args, act)
