"""Every recorded Apache 4.9.8 exchange, replayed against a fresh embedded cluster.

The main run, the ACL run (``replay``) and the transaction run (``txn_replay``, a broker
with the recorded transaction settings) are replayed once each (module fixtures), in
recorded order; then every recording's answer is compared with ours (``compare``):
code, header keys, extFields presence/keys/types/values, body structure and values,
the requests pushed on the connection (check-backs with their bodies), and the timing
of the long-poll exchanges, with the recording's ``varies`` paths masked and
names/addresses normalised. A difference
must be listed in docs/compatibility.md (file, path, kind and detail, see ``listed``)
with the reason it is harmless; a listed difference that no longer occurs fails too, so
the list stays honest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.embedded.clock import FakeClock
from tests.differential.compare import Difference, answer_tree, diff, normalise, push_diff, pushed_trees
from tests.differential.listed import listed_differences
from tests.differential.replay import (ACL_RUN, ACL_SECRET, MAIN_RUN, SEGMENT_SIZE, Outcome, Replay, acl_scenario,
                                       main_scenario, new_run_id, plain_acl_yml)
from tests.differential.txn_replay import txn_run
from tests.txn_recording import RECORDED_RUN as TXN_RUN
from tests.vectors import apache_vectors, txn_vectors

VECTORS = {**apache_vectors(), **txn_vectors()}
assert len(VECTORS) == len(apache_vectors()) + len(txn_vectors()), "recording names must not repeat"
LISTED = listed_differences()
START_MS = 1795424900000  # a little before the recordings' first store time


@pytest.fixture(scope="module")
def main_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replay]:
    clock = FakeClock(START_MS)
    with EmbeddedCluster(tmp_path_factory.mktemp("main"), clock=clock, segment_size=SEGMENT_SIZE) as cluster:
        replay = Replay(cluster, clock, VECTORS, MAIN_RUN, new_run_id())
        try:
            main_scenario(replay)
            yield replay
        finally:
            replay.close()


@pytest.fixture(scope="module")
def acl_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replay]:
    root = tmp_path_factory.mktemp("acl")
    acl_file = root / "plain_acl.yml"
    acl_file.write_text(plain_acl_yml())
    clock = FakeClock(START_MS)
    with EmbeddedCluster(root / "data", clock=clock, acl_file=str(acl_file)) as cluster:
        replay = Replay(cluster, clock, VECTORS, ACL_RUN, new_run_id(), secret=ACL_SECRET)
        try:
            acl_scenario(replay)
            yield replay
        finally:
            replay.close()


@pytest.fixture(scope="module")
def transaction_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replay]:
    with txn_run(tmp_path_factory.mktemp("txn")) as replay:
        yield replay


@pytest.fixture(scope="module")
def runs(main_run: Replay, acl_run: Replay, transaction_run: Replay) -> dict[str, Replay]:
    return {MAIN_RUN: main_run, ACL_RUN: acl_run, TXN_RUN: transaction_run}


def _masks(vec: dict) -> set[str]:
    """The recording's ``varies`` paths plus the values listed as measured on the machine."""
    file = f"{vec['name']}.json"
    return {v.replace(vec["run_id"], "<RUN>") for v in vec.get("varies", [])} | \
        {row.path for row in LISTED if row.measured and row.file in (file, "*")}


def _timing(vec: dict, ours: Outcome) -> list[Difference]:
    """Where the recording is about time: how long a held pull was held."""
    if vec["name"] == "pull_long_poll_timeout":
        samples = [vec["elapsed_ms"], *vec.get("more_samples_ms", [])]
        if not min(samples) <= ours.elapsed_ms <= max(samples):
            return [Difference("elapsed_ms", "timing", f"Apache held it {min(samples):.0f}..{max(samples):.0f} ms, "
                                                       f"we held it {ours.elapsed_ms:.0f} ms")]
    if vec["name"] == "pull_long_poll_woken":
        after = ours.extra.get("answered_after_wake_ms")
        if after is None or after > 1000:
            return [Difference("elapsed_ms", "timing", f"answered {after} ms after the waking send, not at once")]
    return []


def differences(name: str, replay: Replay) -> list[Difference]:
    vec = VECTORS[name]
    ours = replay.outcomes[name]
    code = vec["request"]["code"]
    resp = vec["response"]
    theirs_tree = answer_tree(bytes.fromhex(resp["frame_hex"]), code) if resp else None
    theirs_tree = normalise(theirs_tree, replay.replacements(ours=False))
    ours_tree = normalise(answer_tree(ours.frame, code), replay.replacements(ours=True))
    found = diff(theirs_tree, ours_tree, _masks(vec))
    found += push_diff(normalise(replay.recorded_pushes(vec), replay.replacements(ours=False)),
                       normalise(pushed_trees(ours.pushed), replay.replacements(ours=True)))
    return sorted(set(found + _timing(vec, ours)))


@pytest.fixture(scope="module")
def all_differences(runs: dict[str, Replay]) -> dict[str, list[Difference]]:
    return {f"{name}.json": differences(name, runs[vec["run_id"]]) for name, vec in VECTORS.items()}


def test_every_recording_is_replayed_in_recorded_order(runs: dict[str, Replay]) -> None:
    for run, replay in runs.items():
        recorded = sorted((n for n, v in VECTORS.items() if v["run_id"] == run),
                          key=lambda n: VECTORS[n]["request"]["header"]["opaque"])
        assert list(replay.outcomes) == recorded, f"run {run} replayed out of order or incompletely"
    assert sum(len(r.outcomes) for r in runs.values()) == len(VECTORS)


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_answer_matches_the_recording_or_the_difference_is_listed(
        name: str, all_differences: dict[str, list[Difference]]) -> None:
    file = f"{name}.json"
    found = all_differences[file]
    unlisted = [d for d in found if not any(row.covers(file, d) for row in LISTED)]
    stale = [row.id for row in LISTED if row.file == file and not row.measured
             and not any(row.covers(file, d) for d in found)]
    report: list[str] = []
    if unlisted:
        report += [f"{file}: differences from Apache not listed in docs/compatibility.md:"]
        report += [f"  {d}" for d in unlisted]
    if stale:
        report += [f"{file}: listed in docs/compatibility.md but no longer found:"]
        report += [f"  {r}" for r in stale]
    assert not report, "\n".join(report)


def test_rows_for_every_recording_are_still_needed(all_differences: dict[str, list[Difference]]) -> None:
    stale = [row.id for row in LISTED if row.file == "*" and not row.measured
             and not any(row.covers(f, d) for f, found in all_differences.items() for d in found)]
    assert not stale, f"listed in docs/compatibility.md but no longer found anywhere: {stale}"


def test_listed_rows_name_recordings() -> None:
    unknown = [row.id for row in LISTED if row.file != "*" and Path(row.file).stem not in VECTORS]
    assert not unknown, f"docs/compatibility.md names recordings that do not exist: {unknown}"


def test_measured_rows_name_recorded_values() -> None:
    """A measured row masks a value the recording has (not a path that does not exist)."""
    for row in (r for r in LISTED if r.measured):
        vec = VECTORS[Path(row.file).stem]
        tree = answer_tree(bytes.fromhex(vec["response"]["frame_hex"]), vec["request"]["code"])
        node: object = tree
        for part in row.path.split("."):
            assert isinstance(node, dict) and part in node, f"{row.id}: the recording has no {row.path}"
            node = node[part]
        assert not isinstance(node, (dict, list)), f"{row.id}: measured rows mask single values"


def test_rows_need_reasons() -> None:
    assert all(len(row.reason.split()) >= 4 for row in LISTED), \
        [row.id for row in LISTED if len(row.reason.split()) < 4]
