"""Access to the shared wire vectors (../shared/vectors relative to the repository)."""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("ROCKETMQ_SPARK_SHARED", ROOT.parent / "shared"))
CPP_DIR = SHARED / "vectors" / "cpp-client"
APACHE_DIR = SHARED / "vectors" / "apache-broker"


def _load(directory: Path) -> dict[str, dict]:
    if not directory.is_dir():
        raise FileNotFoundError(f"wire vectors not found at {directory}; set ROCKETMQ_SPARK_SHARED")
    return {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def cpp_vectors() -> dict[str, dict]:
    return _load(CPP_DIR)


def apache_vectors() -> dict[str, dict]:
    return _load(APACHE_DIR)
