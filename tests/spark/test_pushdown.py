"""Filter push-down of batch reads with a real Spark session and cluster: every pushed
filter gives exactly the rows Spark's own filter gives over the whole topic, and reads
less (the rows the scan hands Spark, from the executed plan's metrics)."""

from __future__ import annotations

import datetime as dt

import pytest

from rocketmq_spark.spark import features, pushdown_enabled, register
from rocketmq_spark.spark.source import PUSHDOWN_CONF

from rocketmq_spark.structs import Message

from tests.embedded.wire import Wire, send_msg

from .helpers import after_last_store, create_topic, produce, wait_until


def _read(spark, cluster, topic, **options):
    r = spark.read.format("rocketmq").option("nameServer", cluster.namesrv_addr).option("topic", topic)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def _scan_rows(df) -> tuple[list, int]:
    """``df``'s rows, and how many rows the source's scan produced for them."""
    rows = df.collect()
    plan = df._jdf.queryExecution().executedPlan()
    if plan.nodeName() == "AdaptiveSparkPlan":
        plan = plan.finalPhysicalPlan()
    leaves = plan.collectLeaves()
    scanned = 0
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        if "Scan" in leaf.nodeName():
            scanned += leaf.metrics().apply("numOutputRows").value()
    return rows, scanned


def _key(r) -> tuple:
    return (r.topic, r.broker, r.queue_id, r.queue_offset)


@pytest.fixture()
def pushing(spark):
    """The session with filter push-down on and ``rocketmq`` registered with it; put back
    (setting off, the class that pushes nothing) afterwards."""
    if not features.FILTER_PUSHDOWN:
        pytest.skip(f"pyspark {features.PYSPARK_VERSION} hands data sources no filters (4.1+ does)")
    spark.conf.set(PUSHDOWN_CONF, "true")
    register(spark)
    try:
        yield spark
    finally:
        spark.conf.set(PUSHDOWN_CONF, "false")
        register(spark)


TAGS = ("TagA", "TagB", "TagC", None)


@pytest.fixture()
def topic_in_time(cluster, mq, names):
    """A topic of 3 queues on every master, written in three spells: before t1, between t1
    and t2, after t2; tags TagA, TagB, TagC and none in turn."""
    topic = names("t")
    queues = create_topic(mq, topic, 3, every_master=True)
    produce(mq, queues, 30, salt="before", tags=lambda i: TAGS[i % 4])
    t1 = wait_until(lambda: after_last_store(mq, queues), 10, "the clock to pass the last store time")
    produce(mq, queues, 36, salt="inside", tags=lambda i: TAGS[i % 4])
    t2 = wait_until(lambda: after_last_store(mq, queues), 10, "the clock to pass the last store time")
    produce(mq, queues, 24, salt="after", tags=lambda i: TAGS[i % 4])
    return topic, queues, t1, t2


def _ts(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


def test_each_pushed_filter_gives_the_rows_of_sparks_own_filter(pushing, cluster, topic_in_time):
    spark = pushing
    topic, queues, t1, t2 = topic_in_time
    everything = _read(spark, cluster, topic).collect()
    assert len(everything) == 90
    # the same rows with nothing to push: Spark's own filter over the whole topic
    whole = spark.createDataFrame(everything, _read(spark, cluster, topic).schema)
    b0, b1 = sorted({q.broker_name for q in queues})
    # (filter, pushed): a pushed filter's scan hands Spark exactly its rows (a time window
    # too: the broker's store times do not go down in a queue); one not pushed, all 90
    cases = [
        ("queue_id = 1", True),
        ("queue_id IN (0, 2) AND broker = '%s'" % b1, True),
        ("broker = '%s'" % b0, True),
        (f"topic = '{topic}'", True),
        ("topic = 'no_such_topic'", True),
        ("tags = 'TagB'", True),
        ("tags IN ('TagA', 'TagC') AND queue_id = 0", True),
        (f"store_timestamp >= TIMESTAMP '{_ts(t1)}'", True),
        (f"store_timestamp >= TIMESTAMP '{_ts(t1)}' AND store_timestamp < TIMESTAMP '{_ts(t2)}'", True),
        (f"store_timestamp > TIMESTAMP '{_ts(t1 - 1)}' AND store_timestamp <= TIMESTAMP '{_ts(t2 - 1)}'", True),
        (f"store_timestamp < TIMESTAMP '{_ts(t1)}' AND tags = 'TagA'", True),
        ("queue_id = 1 AND queue_id = 2", True),
        ("queue_id = 1 OR tags = 'TagA'", False),            # an OR is Spark's
        ("keys = 'key-inside-3'", True),                     # looked up in the index
        ("keys = 'key-inside-3' OR queue_id = 0", False),    # an OR is Spark's
    ]
    seen = {}
    for where, pushed in cases:
        want = sorted(_key(r) for r in whole.where(where).collect())
        rows, scanned = _scan_rows(_read(spark, cluster, topic).where(where))
        assert sorted(_key(r) for r in rows) == want, where
        assert scanned == (len(want) if pushed else 90), (where, scanned)
        seen[where] = len(want)
    window = f"store_timestamp >= TIMESTAMP '{_ts(t1)}' AND store_timestamp < TIMESTAMP '{_ts(t2)}'"
    assert (seen["queue_id = 1"], seen[window], seen["queue_id = 1 AND queue_id = 2"]) == (30, 36, 0)
    assert seen["tags = 'TagB'"] == sum(r.tags == "TagB" for r in everything) > 0


def test_keys_equality_is_looked_up_in_the_brokers_indexes(pushing, cluster, mq, names):
    """``keys = 'v'`` reads only the offsets the message indexes of every broker give, and
    exactly the rows whose whole KEYS is v (a message with "v other" keys is filed under
    v too, and not one of them); past QUERY_MESSAGE's 64 records a broker's answer may be
    cut, so the read scans."""
    spark = pushing
    topic = names("t")
    queues = create_topic(mq, topic, 2, every_master=True)
    keys = ["order-1", "order-1 user-7", "user-7 order-1", "order-10", "order-1", " order-1 "]
    keys += ["hot"] * (70 * len({q.broker_name for q in queues})) + [f"k{i}" for i in range(12)]
    sent = [mq.send(Message(topic, f"m{i}".encode(), keys=k), queue=queues[i % len(queues)])
            for i, k in enumerate(keys)]
    # Apache indexes on its dispatch thread: wait until the last message is in the index
    wait_until(lambda: any(mq.query_message(topic, "k11").values()), 10, "the index to file k11")
    total = len(sent)
    df = _read(spark, cluster, topic)
    everything = df.collect()
    assert len(everything) == total
    whole = spark.createDataFrame(everything, df.schema)
    # Spark's own datetimes (session time zone), as a literal of that zone
    t_mid = sorted(r.store_timestamp for r in everything)[total // 2].strftime("%Y-%m-%d %H:%M:%S.%f")
    cases = [
        ("keys = 'order-1'", True),
        ("keys = 'order-1 user-7'", True),
        ("keys = ' order-1 '", True),
        ("keys = 'user-7'", True),                 # no message has exactly these keys
        ("keys = 'no-such-key'", True),
        ("keys = 'order-1' AND queue_id = 0", True),
        (f"keys = 'k3' AND store_timestamp >= TIMESTAMP '{t_mid}'", True),
        ("keys = 'hot'", False),                   # 70 a broker: the answer may be cut, scanned
        ("keys = ''", False),
        ("keys = 'order-1' OR keys = 'k1'", False),
    ]
    for where, pushed in cases:
        want = sorted(_key(r) for r in whole.where(where).collect())
        rows, scanned = _scan_rows(_read(spark, cluster, topic).where(where))
        assert sorted(_key(r) for r in rows) == want, where
        assert scanned == (len(want) if pushed else total), (where, scanned)
    assert len(whole.where("keys = 'order-1'").collect()) == 2
    # offsets the options leave out are not read, whatever the index says
    first = sent[0].queue
    start = '{"%s": {"%s": {"%d": 1}}}' % (topic, first.broker_name, first.queue_id)
    got = _read(spark, cluster, topic, startingOffsets=start).where("keys = 'order-1'").collect()
    assert sorted(r.body for r in got) == [b"m4"]


def test_msg_id_equality_is_looked_up_in_the_brokers_indexes(pushing, cluster, mq, names):
    """``msg_id = 'v'`` reads only what the indexes give (UNIQ_KEY) and, for a message
    stored without UNIQ_KEY (4.9.7 stores one sent without; the embedded broker adds one),
    whose msg_id is its offset message id, what VIEW_MESSAGE_BY_ID gives; an offset
    message id whose record has a UNIQ_KEY is no row's msg_id."""
    spark = pushing
    topic = names("t")
    queues = create_topic(mq, topic, 2, every_master=True)
    sent = [mq.send(Message(topic, f"m{i}".encode()), queue=queues[i % len(queues)]) for i in range(20)]
    masters = mq.cluster_brokers()
    for q in queues[:2]:             # sent without UNIQ_KEY
        with Wire(masters[q.broker_name]) as w:
            send_msg(w, topic, b"bare", queue_id=q.queue_id, uniq=False)
    wait_until(lambda: any(mq.query_message(topic, sent[-1].msg_id, unique=True).values()), 10,
               "the index to file the last UNIQ_KEY")
    df = _read(spark, cluster, topic)
    everything = df.collect()
    assert len(everything) == 22
    whole = spark.createDataFrame(everything, df.schema)
    bare = sorted(r.msg_id for r in everything if r.body == b"bare")
    assert len(bare) == 2
    other = next(q.queue_id for q in queues if q != sent[3].queue)
    cases = [
        f"msg_id = '{sent[3].msg_id}'",
        f"msg_id = '{bare[0]}'",
        f"msg_id = '{bare[1]}'",
        f"msg_id = '{sent[5].offset_msg_id}'",         # its msg_id is its UNIQ_KEY: no row
        "msg_id = 'no-such-id'",
        f"msg_id = '{sent[3].msg_id}' AND queue_id = {other}",
    ]
    for where in cases:
        want = sorted(_key(r) for r in whole.where(where).collect())
        rows, scanned = _scan_rows(_read(spark, cluster, topic).where(where))
        assert sorted(_key(r) for r in rows) == want, where
        assert scanned == len(want), (where, scanned)
    assert [len(whole.where(w).collect()) for w in cases] == [1, 1, 1, 0, 0, 0]
    q = sent[3].queue
    start = '{"%s": {"%s": {"%d": %d}}}' % (topic, q.broker_name, q.queue_id, sent[3].queue_offset + 1)
    assert _read(spark, cluster, topic, startingOffsets=start).where(cases[0]).collect() == []


def test_pushed_filters_meet_the_options(pushing, cluster, topic_in_time):
    spark = pushing
    topic, queues, t1, t2 = topic_in_time
    b0 = queues[0].broker_name
    start = '{"%s": {"%s": {"0": 4}}}' % (topic, b0)
    df = _read(spark, cluster, topic, startingOffsets=start, subExpression="TagA || TagB",
               endingTimestamp=t2)
    base = df.collect()
    whole = spark.createDataFrame(base, df.schema)
    for where in ("tags = 'TagB'", "tags = 'TagC'", f"broker = '{b0}' AND queue_id = 0",
                  f"store_timestamp >= TIMESTAMP '{_ts(t1)}'"):
        want = sorted(_key(r) for r in whole.where(where).collect())
        got = sorted(_key(r) for r in _read(spark, cluster, topic, startingOffsets=start,
                                            subExpression="TagA || TagB",
                                            endingTimestamp=t2).where(where).collect())
        assert got == want, where
    assert _scan_rows(df.where("tags = 'TagC'"))[1] == 0
    # the options are checked whatever the filters leave out
    with pytest.raises(Exception, match="subExpression"):
        _read(spark, cluster, topic, subExpression="TagA || *").where("queue_id = 1").collect()
    end = '{"%s": {"%s": {"0": 2}}}' % (topic, b0)
    with pytest.raises(Exception, match="endingOffsets.*ends at 2, before its starting offset 4"):
        _read(spark, cluster, topic, startingOffsets=start, endingOffsets=end).where("queue_id = 1").collect()


def test_concurrent_reads_keep_every_filter_with_spark(pushing, cluster, topic_in_time, names):
    spark = pushing
    topic, queues, t1, _ = topic_in_time
    df = _read(spark, cluster, topic, consumeMode="concurrent", consumerGroup=names("g"))
    whole = spark.createDataFrame(df.collect(), df.schema)
    for where in ("queue_id = 2", "tags = 'TagA'", f"store_timestamp < TIMESTAMP '{_ts(t1)}'"):
        want = sorted(_key(r) for r in whole.where(where).collect())
        assert sorted(_key(r) for r in df.where(where).collect()) == want, where
    assert _scan_rows(df.where("queue_id = 2"))[1] == 30


def test_without_the_setting_reads_push_nothing_and_work(spark, cluster, mq, names):
    spark.conf.set(PUSHDOWN_CONF, "false") if features.FILTER_PUSHDOWN else None
    register(spark)
    assert not pushdown_enabled(spark)
    topic = names("t")
    queues = create_topic(mq, topic, 2)
    produce(mq, queues, 10)
    rows, scanned = _scan_rows(_read(spark, cluster, topic).where("queue_id = 1"))
    assert {r.queue_id for r in rows} == {queues[1].queue_id} and len(rows) == 5
    assert scanned == 10          # Spark filtered what the whole topic gave
