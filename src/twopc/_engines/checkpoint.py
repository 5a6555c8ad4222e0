"""What a streaming checkpoint says about one batch's input, as a fingerprint.

Spark writes ``<checkpoint>/offsets/N`` before batch N runs: a version line, a metadata line
(watermark, batch timestamp, session confs) and one line per source with the offsets the
batch ends at. File sources also log the files of each batch under
``<checkpoint>/sources/<i>/N`` (or inside a compacted ``N.compact``). A replay after a crash
reads the same files, so the fingerprint is stable; a checkpoint put back from an older copy
plans the batch anew, and the fingerprint then changes when the batch's input does. The
metadata line is left out: its batch timestamp changes on every planning.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from twopc.progress import SourceOffsets, kafka_offsets_in
from twopc.storage import filesystem_for, join

__all__ = [
    "PlannedInput",
    "input_fingerprint",
    "planned_batch",
    "planned_input",
    "query_id_of",
    "why_no_query_id",
]

_log = logging.getLogger("twopc")


@dataclass(frozen=True)
class PlannedInput:
    """What the checkpoint's offset log says about a batch: its input's fingerprint and,
    for a Kafka source, the offsets it ends at (each ``None`` when unknown)."""

    fingerprint: str | None = None
    offsets: SourceOffsets | None = None


def planned_input(
    checkpoint_root: str | None, batch_id: int, storage_options: dict[str, Any] | None = None
) -> PlannedInput:
    """The batch's :class:`PlannedInput`, from one read of ``<checkpoint>/offsets/<batch>``
    (and the file sources' logs); empty when there is no checkpoint or it cannot be read
    (another filesystem than fsspec knows, no offsets file yet)."""
    if not checkpoint_root:
        return PlannedInput()
    try:
        fs, root = filesystem_for(checkpoint_root, storage_options)
        offsets = fs.cat_file(join(root, "offsets", str(batch_id))).decode()
        digest = hashlib.sha256()
        for line in offsets.splitlines()[2:]:  # after the version and metadata lines
            digest.update(line.strip().encode() + b"\n")
        for entry in _file_source_entries(fs, root, batch_id):
            digest.update(entry.encode() + b"\n")
        return PlannedInput(digest.hexdigest(), kafka_offsets_in(offsets, batch_id))
    except Exception:
        _log.debug(
            "cannot read the input of batch %d from the checkpoint %s",
            batch_id,
            checkpoint_root,
            exc_info=True,
        )
        return PlannedInput()


def input_fingerprint(
    checkpoint_root: str, batch_id: int, storage_options: dict[str, Any] | None = None
) -> str | None:
    """A digest of batch ``batch_id``'s planned input, or ``None`` when the checkpoint
    cannot be read (another filesystem than fsspec knows, no offsets file yet)."""
    return planned_input(checkpoint_root, batch_id, storage_options).fingerprint


def planned_batch(
    checkpoint_root: str, storage_options: dict[str, Any] | None = None
) -> int | None:
    """The newest batch in the checkpoint's offset log (Spark writes ``offsets/N`` before
    it plans batch N), or ``None`` when there is none or it cannot be read."""
    try:
        fs, root = filesystem_for(checkpoint_root, storage_options)
        names = [
            n.rstrip("/").rsplit("/", 1)[-1] for n in fs.ls(join(root, "offsets"), detail=False)
        ]
    except Exception:
        _log.debug("cannot list %s/offsets", checkpoint_root, exc_info=True)
        return None
    batches = [int(n) for n in names if n.isdigit()]
    return max(batches) if batches else None


def query_id_of(checkpoint_root: str, storage_options: dict[str, Any] | None = None) -> str | None:
    """The query id Spark keeps in ``<checkpoint>/metadata`` (a JSON line ``{"id": ...}``,
    written when the query first starts and kept across restarts): the identity of a
    query where Spark does not tell it (Spark Connect, the data source writer). ``None``
    when the file is missing or unreadable (:func:`why_no_query_id` says which)."""
    try:
        return _read_query_id(checkpoint_root, storage_options)
    except Exception:
        _log.debug("no query id in %s/metadata", checkpoint_root, exc_info=True)
        return None


def why_no_query_id(checkpoint_root: str, storage_options: dict[str, Any] | None = None) -> str:
    """Why :func:`query_id_of` finds no query id in the checkpoint (the file is missing,
    cannot be read, or holds no id), for an error message; ``""`` when it finds one."""
    try:
        _read_query_id(checkpoint_root, storage_options)
    except FileNotFoundError:
        return f"{checkpoint_root}/metadata does not exist"
    except _NoId as exc:
        return str(exc)
    except Exception as exc:
        return f"{checkpoint_root}/metadata cannot be read: {type(exc).__name__}: {exc}"
    return ""


class _NoId(ValueError):
    """The metadata file was read and holds no query id."""


def _read_query_id(checkpoint_root: str, storage_options: dict[str, Any] | None) -> str:
    fs, root = filesystem_for(checkpoint_root, storage_options)
    text = fs.cat_file(join(root, "metadata")).decode()
    try:
        value = json.loads(text.strip().splitlines()[0]).get("id")
    except (ValueError, IndexError, AttributeError) as exc:
        raise _NoId(f"{checkpoint_root}/metadata is not Spark's metadata file ({exc})") from exc
    if not value:
        raise _NoId(f"{checkpoint_root}/metadata holds no query id")
    return str(value)


def _file_source_entries(fs: Any, root: str, batch_id: int) -> list[str]:
    """The file lists file sources logged for the batch, from every ``sources/<i>``."""
    sources = join(root, "sources")
    if not fs.exists(sources):
        return []
    entries: list[str] = []
    for source in sorted(fs.ls(sources, detail=False)):
        plain = join(source, str(batch_id))
        compact = f"{plain}.compact"
        if fs.exists(plain):
            lines = fs.cat_file(plain).decode().splitlines()[1:]
            entries.extend(line.strip() for line in lines if line.strip())
        elif fs.exists(compact):
            for line in fs.cat_file(compact).decode().splitlines()[1:]:
                if _batch_of(line) == batch_id:
                    entries.append(line.strip())
    return entries


def _batch_of(line: str) -> int | None:
    try:
        value = json.loads(line).get("batchId")
    except (ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) else None
