"""The pure planner, table by table."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.spark.planner import QueueRange, plan_partitions, ranges, rate_limit


def q(i: int, topic: str = "t", broker: str = "b") -> MessageQueue:
    return MessageQueue(topic, broker, i)


RATE_CASES = [
    # id, start, latest, max_rows, expected end
    ("no limit reads all", {q(0): 0, q(1): 5}, {q(0): 10, q(1): 5}, None, {q(0): 10, q(1): 5}),
    ("limit above backlog reads all", {q(0): 0, q(1): 0}, {q(0): 3, q(1): 4}, 100, {q(0): 3, q(1): 4}),
    ("limit equal to backlog", {q(0): 0, q(1): 0}, {q(0): 3, q(1): 4}, 7, {q(0): 3, q(1): 4}),
    ("even split", {q(0): 0, q(1): 0}, {q(0): 100, q(1): 100}, 10, {q(0): 5, q(1): 5}),
    ("proportional 1:3", {q(0): 0, q(1): 0}, {q(0): 100, q(1): 300}, 40, {q(0): 10, q(1): 30}),
    ("proportional with offsets", {q(0): 50, q(1): 200}, {q(0): 150, q(1): 500}, 40,
     {q(0): 60, q(1): 230}),
    ("remainder to largest fraction", {q(0): 0, q(1): 0, q(2): 0}, {q(0): 10, q(1): 10, q(2): 10}, 10,
     {q(0): 4, q(1): 3, q(2): 3}),
    ("idle queue stays", {q(0): 7, q(1): 0}, {q(0): 7, q(1): 100}, 10, {q(0): 7, q(1): 10}),
    ("tiny backlog still gets its share", {q(0): 0, q(1): 0}, {q(0): 1, q(1): 1000}, 10,
     {q(0): 1, q(1): 9}),
    ("limit of one", {q(0): 0, q(1): 0}, {q(0): 5, q(1): 5}, 1, {q(0): 1, q(1): 0}),
    ("limit of zero reads nothing", {q(0): 0}, {q(0): 5}, 0, {q(0): 0}),
    ("never below start when the broker went back", {q(0): 50}, {q(0): 10}, None, {q(0): 50}),
    ("never below start with a limit", {q(0): 50, q(1): 0}, {q(0): 10, q(1): 100}, 5,
     {q(0): 50, q(1): 5}),
    ("queue missing from start reads nothing", {}, {q(0): 10}, 5, {q(0): 10}),
]


@pytest.mark.parametrize("start,latest,max_rows,expected",
                         [c[1:] for c in RATE_CASES], ids=[c[0] for c in RATE_CASES])
def test_rate_limit(start, latest, max_rows, expected):
    assert rate_limit(start, latest, max_rows) == expected


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=12),
       st.integers(0, 3000))
def test_rate_limit_reads_exactly_the_limit_within_each_backlog(pairs, limit):
    start = {q(i): s for i, (s, _) in enumerate(pairs)}
    latest = {q(i): s + n for i, (s, n) in enumerate(pairs)}
    end = rate_limit(start, latest, limit)
    total = sum(n for _, n in pairs)
    assert sum(end[k] - start[k] for k in start) == min(limit, total)
    for k in start:
        assert start[k] <= end[k] <= latest[k]
    busy = [k for k in start if latest[k] > start[k]]
    if limit >= len(busy):  # nobody starves
        assert all(end[k] > start[k] for k in busy)


def test_ranges_skips_empty_and_needs_every_start():
    assert ranges({q(0): 1, q(1): 4}, {q(0): 3, q(1): 4}) == [QueueRange(q(0), 1, 3)]
    with pytest.raises(KeyError):
        ranges({}, {q(0): 3})


PLAN_CASES = [
    # id, ranges (queue index, start, end), orderly, min_partitions, expected (queue, start, end)
    ("orderly one per queue", [(0, 0, 100), (1, 5, 6)], True, None, [(0, 0, 100), (1, 5, 6)]),
    ("orderly ignores minPartitions", [(0, 0, 100)], True, 8, [(0, 0, 100)]),
    ("orderly drops empty", [(0, 3, 3), (1, 0, 2)], True, None, [(1, 0, 2)]),
    ("concurrent without minPartitions", [(0, 0, 100), (1, 0, 10)], False, None, [(0, 0, 100), (1, 0, 10)]),
    ("concurrent already enough", [(0, 0, 10), (1, 0, 10)], False, 2, [(0, 0, 10), (1, 0, 10)]),
    ("concurrent split one queue", [(0, 0, 10)], False, 4, [(0, 0, 3), (0, 3, 6), (0, 6, 8), (0, 8, 10)]),
    ("concurrent split by size", [(0, 0, 30), (1, 0, 10)], False, 4,
     [(0, 0, 10), (0, 10, 20), (0, 20, 30), (1, 0, 10)]),
    ("concurrent fewer messages than partitions", [(0, 0, 2), (1, 7, 8)], False, 10,
     [(0, 0, 1), (0, 1, 2), (1, 7, 8)]),
    ("concurrent nothing to read", [(0, 4, 4)], False, 3, []),
]


@pytest.mark.parametrize("given_ranges,orderly,min_partitions,expected",
                         [c[1:] for c in PLAN_CASES], ids=[c[0] for c in PLAN_CASES])
def test_plan_partitions(given_ranges, orderly, min_partitions, expected):
    got = plan_partitions([QueueRange(q(i), s, e) for i, s, e in given_ranges],
                          orderly=orderly, min_partitions=min_partitions)
    assert got == [QueueRange(q(i), s, e) for i, s, e in expected]


@given(st.lists(st.integers(0, 500), min_size=1, max_size=8), st.integers(1, 64))
def test_concurrent_split_covers_every_offset_once(sizes, min_partitions):
    rs = [QueueRange(q(i), 10 * i, 10 * i + n) for i, n in enumerate(sizes)]
    parts = plan_partitions(rs, orderly=False, min_partitions=min_partitions)
    covered = sorted((p.queue, o) for p in parts for o in range(p.start, p.end))
    assert covered == sorted((r.queue, o) for r in rs for o in range(r.start, r.end))
    assert all(p.size > 0 for p in parts)
    total = sum(sizes)
    nonempty = sum(1 for n in sizes if n)
    assert len(parts) >= min(min_partitions, total) or len(parts) >= nonempty
    if nonempty < min_partitions <= total:
        assert len(parts) >= min_partitions - nonempty  # split happened
