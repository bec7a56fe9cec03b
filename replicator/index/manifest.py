"""The index's manifest: which runs make it up, which data files its entries name, and the
table snapshot it answers for. One JSON file, replaced atomically (write ``MANIFEST.tmp``,
fsync, rename, fsync the directory) and checked by a digest of its body, so a crash leaves
the old manifest or the new one, and a torn or edited one is detected, never half-read."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from replicator.index.errors import IndexCorruptError

__all__ = ["FORMAT", "MANIFEST", "Manifest", "read_manifest", "write_manifest"]

FORMAT = 1
MANIFEST = "MANIFEST"


@dataclass(frozen=True)
class Manifest:
    """One durable state of the index (immutable: every change makes a new one)."""

    snapshot_id: int | None
    key_types: tuple[str, ...] | None
    runs: tuple[tuple[str, int], ...] = ()  # (run name, entries), oldest first
    files: tuple[tuple[int, str], ...] = ()  # file id -> path, live files only
    dead: tuple[int, ...] = ()  # ids of files removed, still named by some run's entries
    next_file_id: int = 0
    next_run: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def evolve(self, **changes: Any) -> Manifest:
        return replace(self, **changes)

    def body(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "snapshot_id": self.snapshot_id,
            "key_types": list(self.key_types) if self.key_types is not None else None,
            "runs": [list(r) for r in self.runs],
            "files": [list(f) for f in self.files],
            "dead": list(self.dead),
            "next_file_id": self.next_file_id,
            "next_run": self.next_run,
            "extra": self.extra,
        }


def _digest(body: dict[str, Any]) -> str:
    return hashlib.blake2b(json.dumps(body, sort_keys=True).encode(), digest_size=16).hexdigest()


def write_manifest(directory: Path, manifest: Manifest) -> None:
    body = manifest.body()
    tmp = directory / (MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"body": body, "digest": _digest(body)}, f)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(directory / MANIFEST)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(directory: Path) -> Manifest:
    """The manifest in ``directory``; IndexCorruptError if missing, torn or of another format."""
    path = directory / MANIFEST
    try:
        raw = json.loads(path.read_text())
        body = raw["body"]
        ok = raw["digest"] == _digest(body)
    except FileNotFoundError as exc:
        raise IndexCorruptError(f"no index manifest at {path}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise IndexCorruptError(f"index manifest {path} is unreadable: {exc}") from exc
    if not ok:
        raise IndexCorruptError(f"index manifest {path} fails its digest (torn or edited)")
    if body.get("format") != FORMAT:
        raise IndexCorruptError(f"index manifest {path} has format {body.get('format')}, expected {FORMAT}")
    try:
        return Manifest(
            snapshot_id=body["snapshot_id"],
            key_types=tuple(body["key_types"]) if body["key_types"] is not None else None,
            runs=tuple((str(n), int(c)) for n, c in body["runs"]),
            files=tuple((int(i), str(p)) for i, p in body["files"]),
            dead=tuple(int(i) for i in body["dead"]),
            next_file_id=int(body["next_file_id"]),
            next_run=int(body["next_run"]),
            extra=dict(body.get("extra") or {}),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise IndexCorruptError(f"index manifest {path} is malformed: {exc}") from exc
