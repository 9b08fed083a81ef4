"""The sidecar's record of the reads it served (what the deployment tests read from its
log): one ``served pull`` line and a count per range read to its end, none for a range cut
short."""

from __future__ import annotations

import logging

import pytest

from rocketmq_spark.sidecar import Cluster
from rocketmq_spark.sidecar.model import PullSpec
from rocketmq_spark.sidecar.service import SidecarService
from rocketmq_spark.structs import Message
from tests.cluster import ClusterHandle
from tests.deploy import sidecars


def test_a_pull_read_to_its_end_is_counted_and_logged(rocketmq: ClusterHandle, caplog: pytest.LogCaptureFixture) -> None:
    topic = rocketmq.create_topic("served", queues=1)
    q = rocketmq.admin.publish_queues(topic)[0]
    rocketmq.admin.send_batch([Message(topic, b"m%d" % i) for i in range(10)], queue=q)
    service = SidecarService()
    try:
        cluster = Cluster(rocketmq.namesrv_addr)
        with caplog.at_level(logging.INFO, logger="rocketmq_spark.sidecar.service"):
            chunks = list(service.pull(cluster, PullSpec(q, 2, 9, group="g-served")))
            assert chunks
            cut = service.pull(cluster, PullSpec(q, 0, 10, group="g-served", max_rows_per_batch=1))
            next(iter(cut))         # the reader goes away after the first chunk
            cut.close()
        assert (service.pulls_served, service.rows_served) == (1, 7)
        lines = [r.getMessage() for r in caplog.records if "served pull" in r.getMessage()]
        assert lines == [f"served pull {topic}/{q.broker_name}/{q.queue_id} [2, 9) group g-served: 7 rows"]
    finally:
        service.close()


def test_log_parsing_finds_starts_and_served_ranges(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "sidecar.log").write_text(
        "2026-01-01 INFO rocketmq_spark.sidecar.server: sidecar listening on unix:/x/sidecar.sock (pid 11, idle timeout 300 s)\n"
        "2026-01-01 INFO rocketmq_spark.sidecar.service: served pull t/broker-a/3 [5, 9) group g: 4 rows\n"
        "2026-01-01 INFO rocketmq_spark.sidecar.server: sidecar listening on unix:/x/sidecar.sock (pid 12, idle timeout 300 s)\n"
        "2026-01-01 INFO rocketmq_spark.sidecar.service: served pull t/broker-b/0 [0, 2) group g: 2 rows\n")
    assert sidecars.started_pids(tmp_path) == [11, 12]
    assert [s.rows for s in sidecars.served(tmp_path)] == [4, 2]
    assert sidecars.served(tmp_path, latest_only=True) == [sidecars.Served("t", "broker-b", 0, 0, 2, "g", 2)]
