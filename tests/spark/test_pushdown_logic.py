"""Spark's filters -> what a batch read reads (spark/pushdown.py), table by table, with
pyspark's own Filter classes."""

from __future__ import annotations

import datetime as dt

import pytest

from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar.model import Indexed
from rocketmq_spark.spark import batch_reader, features, link
from rocketmq_spark.spark.planner import QueueRange
from rocketmq_spark.spark.pushdown import NOTHING, Lookup, Pushed, push

if not features.FILTER_PUSHDOWN:
    pytest.skip("pyspark before 4.1 has no Filter classes: Spark keeps every filter",
                allow_module_level=True)

from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, In,  # noqa: E402
                                    IsNotNull, LessThan, LessThanOrEqual, Not, StringStartsWith)

UTC = dt.timezone.utc


def at(ms: int, us: int = 0) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=UTC) + dt.timedelta(microseconds=us)


CASES = [
    # id, filters, pushed, indexes of the filters Spark keeps
    ("queue id", [EqualTo(("queue_id",), 3)], Pushed(queue_ids=frozenset({3})), []),
    ("queue ids in", [In(("queue_id",), (1, 2, None))], Pushed(queue_ids=frozenset({1, 2})), []),
    ("two equalities meet", [EqualTo(("queue_id",), 1), In(("queue_id",), (1, 2))],
     Pushed(queue_ids=frozenset({1})), []),
    ("disjoint equalities", [EqualTo(("queue_id",), 1), EqualTo(("queue_id",), 2)],
     Pushed(queue_ids=frozenset()), []),
    ("topic and broker", [EqualTo(("topic",), "t"), In(("broker",), ("b1", "b2"))],
     Pushed(topics=frozenset({"t"}), brokers=frozenset({"b1", "b2"})), []),
    ("tags", [In(("tags",), ("A", "B"))], Pushed(tags=frozenset({"A", "B"})), []),
    ("a tag a subscription cannot name", [EqualTo(("tags",), "A || B")], NOTHING, [0]),
    ("a tag with spaces around", [EqualTo(("tags",), " A")], NOTHING, [0]),
    ("star is not a tag", [EqualTo(("tags",), "*")], NOTHING, [0]),
    ("queue id given as a string", [EqualTo(("queue_id",), "1")], NOTHING, [0]),
    ("null equality", [EqualTo(("queue_id",), None)], NOTHING, [0]),
    ("in only nulls", [In(("tags",), (None,))], NOTHING, [0]),
    ("keys equality: looked up, checked by Spark too", [EqualTo(("keys",), "k a")],
     Pushed(lookup=Lookup("keys", "k a")), [0]),
    ("msg_id equality: looked up", [EqualTo(("msg_id",), "7F00000100002A9F0000000000000000")],
     Pushed(lookup=Lookup("msg_id", "7F00000100002A9F0000000000000000")), [0]),
    ("one lookup a read", [EqualTo(("keys",), "a"), EqualTo(("msg_id",), "b")],
     Pushed(lookup=Lookup("keys", "a")), [0, 1]),
    ("keys with no key in them", [EqualTo(("keys",), " "), EqualTo(("msg_id",), ""), EqualTo(("keys",), 3)],
     NOTHING, [0, 1, 2]),
    ("other columns and kinds", [In(("keys",), ("k",)), IsNotNull(("tags",)),
                                 Not(EqualTo(("queue_id",), 1)), StringStartsWith(("topic",), "t"),
                                 GreaterThan(("queue_offset",), 5)], NOTHING, [0, 1, 2, 3, 4]),
    ("store time >= whole ms", [GreaterThanOrEqual(("store_timestamp",), at(1000))],
     Pushed(since_ms=1000), [0]),
    ("store time >= mid ms", [GreaterThanOrEqual(("store_timestamp",), at(1000, 1))],
     Pushed(since_ms=1001), [0]),
    ("store time > whole ms", [GreaterThan(("store_timestamp",), at(1000))], Pushed(since_ms=1001), [0]),
    ("store time > mid ms", [GreaterThan(("store_timestamp",), at(1000, 999))], Pushed(since_ms=1001), [0]),
    ("store time < whole ms", [LessThan(("store_timestamp",), at(2000))], Pushed(until_ms=2000), [0]),
    ("store time < mid ms", [LessThan(("store_timestamp",), at(2000, 1))], Pushed(until_ms=2001), [0]),
    ("store time <= whole ms", [LessThanOrEqual(("store_timestamp",), at(2000))], Pushed(until_ms=2001), [0]),
    ("store time <= mid ms", [LessThanOrEqual(("store_timestamp",), at(2000, 500))],
     Pushed(until_ms=2001), [0]),
    ("tightest bounds win", [GreaterThan(("store_timestamp",), at(10)), GreaterThan(("store_timestamp",), at(20)),
                             LessThan(("store_timestamp",), at(90)), LessThan(("store_timestamp",), at(80))],
     Pushed(since_ms=21, until_ms=80), [0, 1, 2, 3]),
    ("naive datetime", [GreaterThan(("store_timestamp",), dt.datetime(2026, 1, 1))], NOTHING, [0]),
    ("born time is not pushed", [GreaterThan(("born_timestamp",), at(10))], NOTHING, [0]),
]


@pytest.mark.parametrize("filters,pushed,kept", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_push(filters, pushed, kept):
    got, rest = push(filters)
    assert got == pushed
    assert [id(f) for f in rest] == [id(filters[i]) for i in kept]


def test_a_read_of_the_retry_topic_returns_every_filter():
    filters = [EqualTo(("queue_id",), 1), In(("tags",), ("A",)), GreaterThan(("store_timestamp",), at(5))]
    got, rest = push(filters, exact=False)
    assert got == Pushed(queue_ids=frozenset({1}), tags=frozenset({"A"}), since_ms=6)
    assert [id(f) for f in rest] == [id(f) for f in filters]


def test_what_a_pushed_set_reads():
    p = Pushed(topics=frozenset({"t"}), queue_ids=frozenset({0, 2}))
    assert [q.queue_id for q in (MessageQueue("t", "b", i) for i in range(4)) if p.keeps(q)] == [0, 2]
    assert not p.keeps(MessageQueue("u", "b", 0))
    assert Pushed(since_ms=5, until_ms=5).empty and not Pushed(since_ms=5, until_ms=6).empty
    assert Pushed(tags=frozenset()).empty
    tags = Pushed(tags=frozenset({"B", "A"}))
    assert tags.sub_expression("*") == "A || B"
    assert tags.sub_expression("B || C") == "B"
    assert tags.sub_expression("C") == ""
    assert NOTHING.sub_expression("C || D") == "C || D"


def test_the_key_a_lookup_asks_for():
    assert (Lookup("keys", "order-1").key, Lookup("keys", " a  order-10 b ").key) == ("order-1", "order-10")
    assert (Lookup("msg_id", " x").key, Lookup("msg_id", "x").max_num, Lookup("keys", "x").max_num) == (" x", 32, 64)


class _Sidecar:
    """What QueryMessages answers, by broker (a fake for the lookup's pure rules)."""

    def __init__(self, answers):
        self.answers = answers

    def query_messages(self, cluster, topic, key, *, unique, max_num, brokers):
        return {b: found for b, found in self.answers.items() if b in brokers}


def _lookup_ranges(monkeypatch, answers, todo, lookup):
    fake = _Sidecar({b: [Indexed(MessageQueue("t", b, q), o, k, None, f"{b}{o}") for q, o, k in found]
                     for b, found in answers.items()})
    monkeypatch.setattr(link, "call", lambda sidecar, fn: fn(fake))
    monkeypatch.setattr(link, "cluster_of", lambda opts: "ns")
    reader = batch_reader.RocketMQPushdownBatchReader.__new__(batch_reader.RocketMQPushdownBatchReader)
    reader.opts = type("O", (), {"sidecar": "s"})()
    reader.pushed = Pushed(lookup=lookup)
    return reader._looked_up([QueueRange(MessageQueue("t", b, q), s, e) for b, q, s, e in todo])


def test_a_lookup_keeps_whole_keys_in_range_and_scans_when_unsure(monkeypatch):
    todo = [("a", 0, 0, 10), ("b", 0, 5, 10)]
    got = _lookup_ranges(monkeypatch, {"a": [(0, 3, "k"), (0, 4, "k x"), (0, 12, "k")], "b": [(0, 2, "k"), (0, 6, "k")]},
                         todo, Lookup("keys", "k"))
    assert got == [QueueRange(MessageQueue("t", "a", 0), 3, 4), QueueRange(MessageQueue("t", "b", 0), 6, 7)]
    # broker b has no master: it did not answer, so the read scans
    assert _lookup_ranges(monkeypatch, {"a": [(0, 3, "k")]}, todo, Lookup("keys", "k")) is None
    # a full answer may have been cut
    full = {"a": [(0, i % 10, "k") for i in range(64)], "b": []}
    assert _lookup_ranges(monkeypatch, full, todo, Lookup("keys", "k")) is None


@pytest.mark.parametrize("expression_type, expression, pushed_tags, after", [
    ("TAG", "*", frozenset({"A"}), "A"),
    ("SQL92", "n > 1", None, "n > 1"),     # a SQL92 selector is not narrowed by tags
])
def test_tags_narrow_a_tag_subscription_only(expression_type, expression, pushed_tags, after):
    from rocketmq_spark.spark.options import parse

    opts = parse({"nameServer": "127.0.0.1:9876", "topic": "t", "subExpressionType": expression_type,
                  "subExpression": expression}, "batch")
    reader = batch_reader.RocketMQPushdownBatchReader(opts)
    tag, queue = EqualTo(("tags",), "A"), EqualTo(("queue_id",), 1)
    rest = list(reader.pushFilters([tag, queue]))
    assert reader.pushed.tags == pushed_tags
    assert reader.opts.sub_expression == after
    assert any(f is tag for f in rest) == (pushed_tags is None)
    assert reader.pushed.queue_ids == frozenset({1}) and not any(f is queue for f in rest)
