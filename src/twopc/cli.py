"""The ``twopc`` command line: ``plugins``, ``status``, ``recover``, ``demo``, ``version``."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict

from twopc._operations.cli import add_ops_commands
from twopc._operations.offsets_cli import add_offsets_command
from twopc._version import __version__
from twopc.errors import ConfigurationError
from twopc.plugins import PluginRegistry

__all__ = ["main"]


def _pyspark() -> dict[str, object]:
    """Whether PySpark is installed (the Spark entry points need it), without importing it."""
    if importlib.util.find_spec("pyspark") is None:
        return {"installed": False, "version": None}
    try:
        version = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {"installed": True, "version": version}


def _progress_rows(registry: PluginRegistry) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for kind in registry.progress_kinds():
        spec = registry.progress_spec(kind)
        missing = [m for m in spec.requires if importlib.util.find_spec(m) is None]
        rows.append(
            {
                "kind": kind,
                "usable": not missing,
                "reason": ""
                if not missing
                else f"needs {', '.join(missing)}"
                + (f": {spec.install_hint}" if spec.install_hint else ""),
                "description": spec.description,
            }
        )
    return rows


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    """Columns padded to their widest cell; the last column is left as it is."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "  " + row[-1]
        for row in rows
    ]


def _plugins(args: argparse.Namespace) -> int:
    registry = PluginRegistry()
    backends = registry.backends()
    failures = registry.failures()
    progress = _progress_rows(registry)
    pyspark = _pyspark()
    if args.json:
        print(
            json.dumps(
                {
                    "backends": [asdict(b) for b in backends],
                    "progress_reporters": progress,
                    "pyspark": pyspark,
                    "failures": [asdict(f) for f in failures],
                },
                indent=2,
            )
        )
        return 0
    rows: list[tuple[str, ...]] = [("BACKEND", "PLUGIN", "VERSION", "USABLE", "DETAIL")]
    for backend in backends:
        rows.append(
            (
                backend.name,
                f"{backend.plugin} ({backend.distribution})",
                backend.version,
                "yes" if backend.usable else "no",
                backend.description if backend.usable else backend.reason,
            )
        )
    print("\n".join(_table(rows)))
    if not backends:
        print("no backends found: is twopc installed (pip install twopc)?")
    if progress:
        print()
        reporters: list[tuple[str, ...]] = [("PROGRESS REPORTER", "USABLE", "DETAIL")]
        reporters.extend(
            (
                str(row["kind"]),
                "yes" if row["usable"] else "no",
                str(row["description"] if row["usable"] else row["reason"]),
            )
            for row in progress
        )
        print("\n".join(_table(reporters)))
    print()
    if pyspark["installed"]:
        print(f"pyspark: {pyspark['version']} (the Spark entry points can be used)")
    else:
        print(
            'pyspark: not installed; the Spark entry points need it: pip install "twopc[spark]" '
            "(the local engine, twopc.local, works without it)"
        )
    for failure in failures:
        print(
            f"plugin {failure.plugin} ({failure.distribution} {failure.version}) failed to "
            f"load: {failure.error}",
            file=sys.stderr,
        )
    return 0


def _demo(args: argparse.Namespace) -> int:
    from twopc._operations.demo import run_demo

    try:
        result = run_demo(
            workdir=args.dir,
            rows=args.rows,
            batches=args.batches,
            crash_batch=args.crash_batch,
            keep=args.keep,
        )
    except (RuntimeError, ConfigurationError) as exc:
        print(f"twopc demo: {exc}", file=sys.stderr)
        print("exactly-once: FAILED (the demo could not run)")
        return 2
    return 0 if result.ok else 1


def _version(_: argparse.Namespace) -> int:
    print(f"twopc {__version__}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="twopc", description="Exactly-once two-phase-commit sinks for PySpark."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument(
        "-V",
        "--version",
        action="version",
        version=f"twopc {__version__}",
        help="print the version",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    plugins = commands.add_parser(
        "plugins", help="list every backend found and whether it is usable"
    )
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.set_defaults(func=_plugins)

    add_ops_commands(commands)
    add_offsets_command(commands)

    demo = commands.add_parser(
        "demo", help="exactly-once through a SIGKILL of the driver, on local Parquet files"
    )
    demo.add_argument("--dir", help="work directory (default: a new temporary directory)")
    demo.add_argument("--rows", type=int, default=6000, help="orders to write (default 6000)")
    demo.add_argument("--batches", type=int, default=6, help="micro-batches (default 6)")
    demo.add_argument(
        "--crash-batch", type=int, default=3, help="batch whose commit is killed (default 3)"
    )
    demo.add_argument("--keep", action="store_true", help="keep the work directory")
    demo.set_defaults(func=_demo)

    version = commands.add_parser("version", help="print the version")
    version.set_defaults(func=_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
