"""Timer rows for real: a local Spark, the sidecar, and the embedded cluster (5.x timers on
by default) or $ROCKETMQ_NAMESRV. A 5.x broker (and the embedded one) holds the rows and
writes them to the topic at their time; a broker without a timer store (4.x, or the
embedded cluster with timers=False) makes the write fail naming its release before any
timer row is stored; exactly-once refuses the columns."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from rocketmq_spark.embedded import EmbeddedCluster
from tests.cluster import ClusterHandle
from tests.interop.helpers import wait_until

from .readback import count, ours_read, write

AT_MS, AFTER_MS = 20000, 7000


def _rows(spark, at_ms: int):  # type: ignore[no-untyped-def]
    """A plain row, one at ``at_ms``, one with a delay (counted from when the task converts it)."""
    at = datetime.fromtimestamp(at_ms / 1000, tz=timezone.utc)
    return spark.createDataFrame([("plain", None, None), ("at", at, None), ("after", None, AFTER_MS)],
                                 "body string, deliver_time timestamp, delay_ms int")


def test_timer_rows_arrive_at_their_time(spark, rocketmq):
    topic = rocketmq.create_topic("sink_timer", queues=2)
    sent = int(time.time() * 1000)
    df = _rows(spark, sent + AT_MS)
    if rocketmq.external and not rocketmq.is_5x:
        # a 4.x broker would store them at once: the write fails before any timer row is sent
        with pytest.raises(Exception, match=r"timer messages \(deliver_time / delay_ms, property "
                                            r"TIMER_DELIVER_MS\) need a broker with a timer store "
                                            r"\(RocketMQ 5.x\); the broker at \S+ is 4\.9\.\d+"):
            write(df, rocketmq, topic=topic)
        stored = [m for msgs in ours_read(rocketmq, topic).values() for m in msgs]
        # the plain row may be stored, and the 'at' row as a plain message when Spark ran the
        # task after its time; the delayed row never
        assert {m.payload() for m in stored} <= {b"plain", b"at"}
        assert not any("TIMER_DELIVER_MS" in m.properties for m in stored)
        return
    write(df, rocketmq, topic=topic)
    wait_until(lambda: count(rocketmq, topic) >= 1, 30, "the plain row")
    read_at = int(time.time() * 1000)
    got = {m.payload(): m for msgs in ours_read(rocketmq, topic).values() for m in msgs}
    if read_at < sent + AFTER_MS - 1000:             # the timer rows wait in rmq_sys_wheel_timer
        assert set(got) == {b"plain"}
    converted_by = got[b"plain"].store_timestamp     # the task converted every row before this
    timed = [(b"after", None)]
    if sent + AT_MS > converted_by:
        timed.append((b"at", sent + AT_MS))
    wait_until(lambda: count(rocketmq, topic) == 3, 60, "the timer rows in " + topic)
    got = {m.payload(): m for msgs in ours_read(rocketmq, topic).values() for m in msgs}
    for body, asked in timed:
        p = got[body].properties
        deliver = int(p["TIMER_DELIVER_MS"])
        if asked is not None:
            assert deliver == asked
        else:                                        # delay_ms from the task's clock, when it converted
            # the row: before the sidecar made the message (its born time); the plain row may
            # be stored before this one is converted
            assert sent + AFTER_MS <= deliver <= max(converted_by, got[body].born_timestamp) + AFTER_MS
        # held until its time: written to the topic no earlier than asked, within ~1 s after
        assert int(p["TIMER_OUT_MS"]) == (deliver // 1000 - (deliver % 1000 == 0)) * 1000
        assert got[body].store_timestamp >= deliver - 200    # (a real broker's clock: some slack)
        assert p["REAL_TOPIC"] == topic
    if len(timed) == 1:      # Spark ran the task after the row's time: sent (and stored) at once
        assert "TIMER_DELIVER_MS" not in got[b"at"].properties
    assert "TIMER_DELIVER_MS" not in got[b"plain"].properties


@pytest.mark.embedded_only("a second embedded cluster, whose brokers ignore timers as 4.x does")
def test_a_broker_without_timers_fails_the_write_before_storing_timer_rows(spark, rocketmq, tmp_path: Path):
    with EmbeddedCluster(tmp_path / "no-timers", namesrv_port=0, topics={"plain4x": 1}, timers=False) as c:
        handle = ClusterHandle(c.namesrv_addr, external=False, embedded=c)
        try:
            df = _rows(spark, int(time.time() * 1000) + 600_000).coalesce(1)
            with pytest.raises(Exception, match=r"need a broker with a timer store \(RocketMQ 5.x\); "
                                                r"the broker at \S+ is 4\.9\.8 and has none: it would "
                                                r"deliver them at once \(use delay_level instead\)"):
                write(df, handle, topic="plain4x")
            assert c.brokers["broker-a"].store.max_offset("plain4x", 0) <= 1     # the plain row at most
            write(spark.createDataFrame([("x", 0)], "body string, delay_ms int"), handle, topic="plain4x")  # no timer: fine
        finally:
            handle.close()


def test_exactly_once_refuses_timer_columns(spark, rocketmq):
    df = _rows(spark, int(time.time() * 1000) + 600_000)
    with pytest.raises(Exception, match="column 'deliver_time' cannot be written with "
                                        "deliveryGuarantee=exactly-once"):
        write(df, rocketmq, topic=rocketmq.unique("sink_timer_eo"), deliveryGuarantee="exactly-once")
