"""Small durable files: JSON written atomically (temp file, fsync, rename, fsync dir)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data``: readers see the old or the new file, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def write_json(path: Path, obj: Any, *, durable: bool = True) -> None:
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=True).encode("utf-8"), durable=durable)


def read_json(path: Path, default: Any = None) -> Any:
    """The file's JSON, or ``default`` when it does not exist. A leftover ``.tmp`` from a
    crash during ``write_atomic`` is ignored: the rename never happened."""
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return default
