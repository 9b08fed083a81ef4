"""Every recorded Apache 4.9.8 exchange, replayed against a fresh embedded cluster; and
every answer a later release (5.5.0) gave to the same requests, replayed the same way.

The main run, the ACL run (``replay``) and the transaction run (``txn_replay``, a broker
with the recorded transaction settings) are replayed once each (module fixtures), in
recorded order, and the 5.5.0 main run (``LaterReplay``) and transaction run once more; then every
recording's answer is compared with ours (``compare``):
code, header keys, extFields presence/keys/types/values, body structure and values,
the requests pushed on the connection (check-backs with their bodies), and the timing
of the long-poll exchanges, with the recording's ``varies`` paths masked and
names/addresses normalised. A difference
must be listed in docs/compatibility.md (file, path, kind and detail, see ``listed``; a
5.5.0 recording's rows name their release) with the reason it is harmless; a listed difference that no longer occurs fails too, so
the list stays honest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.embedded.clock import FakeClock
from tests.differential.compare import Difference, answer_tree, diff, normalise, push_diff, pushed_trees
from tests.differential.listed import BASE, listed_differences
from tests.differential.replay import (ACL_RUN, ACL_SECRET, MAIN_RUN, SEGMENT_SIZE, LaterReplay, Outcome, Replay,
                                       acl_scenario, main_scenario, new_run_id, plain_acl_yml)
from tests.differential.txn_replay import txn_run
from tests.txn_recording import RECORDED_RUN as TXN_RUN
from tests.vectors import apache55_vectors, apache_vectors, txn55_vectors, txn_vectors

LATER = "5.5.0"
BY_RELEASE = {BASE: {**apache_vectors(), **txn_vectors()}, LATER: {**apache55_vectors(), **txn55_vectors()}}
assert len(BY_RELEASE[BASE]) == len(apache_vectors()) + len(txn_vectors()), "recording names must not repeat"
assert len(BY_RELEASE[LATER]) == len(apache55_vectors()) + len(txn55_vectors()), "recording names must not repeat"
VECTORS = BY_RELEASE[BASE]
(LATER_RUN,) = {v["run_id"] for v in apache55_vectors().values()}
(LATER_TXN_RUN,) = {v["run_id"] for v in txn55_vectors().values()}
# a recording's id: its file name, with the release for a later one ("5.5.0/pull_found.json")
RECORDINGS = {(f"{n}.json" if release == BASE else f"{release}/{n}.json"): (release, n)
              for release, vectors in BY_RELEASE.items() for n in vectors}
LISTED = listed_differences()
START_MS = 1795424900000  # a little before the recordings' first store time


def _start_ms(vectors: dict[str, dict]) -> int:
    """A minute before the first message the recording shows stored."""
    return min(m["storeTimestamp"] for v in vectors.values()
               for m in (v.get("response") or {}).get("messages") or []) - 60_000


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
def later_main_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replay]:
    """The 5.5.0 main run: the same scenario, its own recorded frames and timeline."""
    vectors = BY_RELEASE[LATER]
    clock = FakeClock(_start_ms(vectors))
    with EmbeddedCluster(tmp_path_factory.mktemp("later"), clock=clock, segment_size=SEGMENT_SIZE) as cluster:
        replay = LaterReplay(cluster, clock, vectors, LATER_RUN, new_run_id())
        try:
            main_scenario(replay)
            yield replay
        finally:
            replay.close()


@pytest.fixture(scope="module")
def later_transaction_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replay]:
    """The 5.5.0 transaction run: the same session on its own recorded timeline and check rounds."""
    with txn_run(tmp_path_factory.mktemp("later-txn"), txn55_vectors()) as replay:
        yield replay


@pytest.fixture(scope="module")
def runs(main_run: Replay, acl_run: Replay, transaction_run: Replay, later_main_run: Replay,
         later_transaction_run: Replay) -> dict[tuple[str, str], Replay]:
    return {(BASE, MAIN_RUN): main_run, (BASE, ACL_RUN): acl_run, (BASE, TXN_RUN): transaction_run,
            (LATER, LATER_RUN): later_main_run, (LATER, LATER_TXN_RUN): later_transaction_run}


def _masks(vec: dict, release: str = BASE) -> set[str]:
    """The recording's ``varies`` paths plus the values listed as measured on the machine."""
    file = f"{vec['name']}.json"
    return {v.replace(vec["run_id"], "<RUN>") for v in vec.get("varies", [])} | \
        {row.path for row in LISTED if row.measured and row.applies(file, release)}


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


def differences(name: str, replay: Replay, release: str = BASE) -> list[Difference]:
    vec = BY_RELEASE[release][name]
    ours = replay.outcomes[name]
    code = vec["request"]["code"]
    resp = vec["response"]
    theirs_tree = answer_tree(bytes.fromhex(resp["frame_hex"]), code) if resp else None
    theirs_tree = normalise(theirs_tree, replay.replacements(ours=False))
    ours_tree = normalise(answer_tree(ours.frame, code), replay.replacements(ours=True))
    found = diff(theirs_tree, ours_tree, _masks(vec, release))
    found += push_diff(normalise(replay.recorded_pushes(vec), replay.replacements(ours=False)),
                       normalise(pushed_trees(ours.pushed), replay.replacements(ours=True)))
    return sorted(set(found + _timing(vec, ours)))


@pytest.fixture(scope="module")
def all_differences(runs: dict[tuple[str, str], Replay]) -> dict[str, list[Difference]]:
    return {key: differences(name, runs[release, BY_RELEASE[release][name]["run_id"]], release)
            for key, (release, name) in RECORDINGS.items()}


def test_every_recording_is_replayed_in_recorded_order(runs: dict[tuple[str, str], Replay]) -> None:
    for (release, run), replay in runs.items():
        vectors = BY_RELEASE[release]
        recorded = sorted((n for n, v in vectors.items() if v["run_id"] == run),
                          key=lambda n: vectors[n]["request"]["header"]["opaque"])
        assert list(replay.outcomes) == recorded, f"{release} run {run} replayed out of order or incompletely"
    assert sum(len(r.outcomes) for r in runs.values()) == len(RECORDINGS)


@pytest.mark.parametrize("recording", sorted(RECORDINGS))
def test_answer_matches_the_recording_or_the_difference_is_listed(
        recording: str, all_differences: dict[str, list[Difference]]) -> None:
    release, name = RECORDINGS[recording]
    file = f"{name}.json"
    found = all_differences[recording]
    unlisted = [d for d in found if not any(row.covers(file, d, release) for row in LISTED)]
    stale = [row.id for row in LISTED if row.file == file and row.release == release and not row.measured
             and not any(row.covers(file, d, release) for d in found)]
    report: list[str] = []
    if unlisted:
        report += [f"{recording}: differences from Apache not listed in docs/compatibility.md:"]
        report += [f"  {d}" for d in unlisted]
    if stale:
        report += [f"{recording}: listed in docs/compatibility.md but no longer found:"]
        report += [f"  {r}" for r in stale]
    assert not report, "\n".join(report)


def test_rows_for_every_recording_are_still_needed(all_differences: dict[str, list[Difference]]) -> None:
    stale = [row.id for row in LISTED if row.file == "*" and not row.measured
             and not any(row.covers(f"{RECORDINGS[key][1]}.json", d, RECORDINGS[key][0])
                         for key, found in all_differences.items() for d in found)]
    assert not stale, f"listed in docs/compatibility.md but no longer found anywhere: {stale}"


def test_listed_rows_name_recordings() -> None:
    unknown = [row.id for row in LISTED if row.file != "*" and Path(row.file).stem not in BY_RELEASE[row.release]]
    assert not unknown, f"docs/compatibility.md names recordings that do not exist: {unknown}"


def test_measured_rows_name_recorded_values() -> None:
    """A measured row masks a value the recording has (not a path that does not exist)."""
    for row in (r for r in LISTED if r.measured):
        vec = BY_RELEASE[row.release][Path(row.file).stem]
        tree = answer_tree(bytes.fromhex(vec["response"]["frame_hex"]), vec["request"]["code"])
        node: object = tree
        for part in row.path.split("."):
            assert isinstance(node, dict) and part in node, f"{row.id}: the recording has no {row.path}"
            node = node[part]
        assert not isinstance(node, (dict, list)), f"{row.id}: measured rows mask single values"


def test_rows_need_reasons() -> None:
    assert all(len(row.reason.split()) >= 4 for row in LISTED), \
        [row.id for row in LISTED if len(row.reason.split()) < 4]
