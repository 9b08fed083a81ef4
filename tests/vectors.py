"""Access to the recorded wire traffic in ``tests/data/vectors`` (see its README)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

DATA = Path(__file__).resolve().parent / "data" / "vectors"
CPP_DIR = DATA / "cpp-client"
APACHE_DIR = DATA / "apache-broker"
APACHE5_DIR = DATA / "apache-broker-5"
APACHE55_DIR = DATA / "apache-broker-5.5"
SQL92_DIR = DATA / "apache-broker-sql92"
QUERY_DIR = DATA / "apache-broker-query"
TXN_DIR = DATA / "apache-broker-txn"
TXN55_DIR = DATA / "apache-broker-txn-5.5"
README = DATA / "README.md"


def _load(directory: Path) -> dict[str, dict]:
    files = sorted(directory.glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no recorded vectors in {directory}")
    return {p.stem: json.loads(p.read_text()) for p in files}


def cpp_vectors() -> dict[str, dict]:
    return _load(CPP_DIR)


def apache_vectors() -> dict[str, dict]:
    return _load(APACHE_DIR)


def apache5_vectors() -> dict[str, dict]:
    return _load(APACHE5_DIR)


def apache55_vectors() -> dict[str, dict]:
    return _load(APACHE55_DIR)


def sql92_vectors() -> dict[str, dict]:
    return _load(SQL92_DIR)


def query_vectors() -> dict[str, dict]:
    """QUERY_MESSAGE exchanges, ``<release>/<name>`` -> the recording (record_query.py)."""
    return {f"{d.name}/{k}": v for d in sorted(QUERY_DIR.iterdir()) if d.is_dir()
            for k, v in _load(d).items()}


def txn_vectors() -> dict[str, dict]:
    return _load(TXN_DIR)


def txn55_vectors() -> dict[str, dict]:
    """The transaction run's requests answered by Apache 5.5.0 (same names as ``txn_vectors``)."""
    return _load(TXN55_DIR)


def txn_broker_vectors() -> dict[str, dict[str, dict]]:
    """The transaction recordings by release: what a client must read whichever a cluster runs."""
    return {"4.9.8": txn_vectors(), "5.5.0": txn55_vectors()}


def broker_vectors() -> dict[str, dict]:
    """The 4.9.8, 5.1.3 and 5.5.0 recordings, keyed ``<release>/<name>``: what a client must
    read whichever of them a cluster runs."""
    return {**{f"4.9.8/{k}": v for k, v in apache_vectors().items()},
            **{f"5.1.3/{k}": v for k, v in apache5_vectors().items()},
            **{f"5.5.0/{k}": v for k, v in apache55_vectors().items()}}


def map_commit_log_offset(known: Mapping[int, int], recorded: int) -> int:
    """Our commit-log offset for one a recording names: the recorded message's (``known``:
    recorded -> ours, paired from answers), or else as far past the nearest paired offset
    below it as in the recording: inside a message, a record written in between that no
    answer showed (a check-back's copy of a half message), or past the end. Where our
    records in between are not the size of Apache's, the offset lands elsewhere, and the
    comparison of what it names shows it."""
    if recorded in known:
        return known[recorded]
    below = [k for k in known if k < recorded]
    if not below:
        raise KeyError(f"no commit-log offset of ours is known at or below the recorded {recorded}")
    return known[max(below)] + recorded - max(below)
