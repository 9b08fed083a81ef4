"""Byte for byte like Apache 4.9.8: recorded requests replayed, answers compared whole.

The recorded request frames of ``vectors/apache-broker`` are sent unchanged (same opaque)
to the embedded cluster, prepared with the same topics and messages; the answer frame
must equal the recorded one byte for byte, header and body, once the recorded broker
address (127.0.0.1:10911) is replaced by ours. Exchanges whose answers depend on the
recording's commit-log offsets, clocks or client ports are tested elsewhere.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Iterator

import pytest

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.remoting.command import decode
from tests.embedded.wire import Wire, send_msg
from tests.vectors import apache_vectors

V = apache_vectors()
MAIN = "rec_090824r0_main"
RECORDED_ADDR = "127.0.0.1:10911"


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "connection closed"
            out += chunk
        return out

    head = exactly(4)
    return head + exactly(struct.unpack(">i", head)[0])


def replay(addr: str, name: str) -> bytes:
    """Send the recorded request; return our answer frame (skipping pushed requests)."""
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(bytes.fromhex(V[name]["request"]["frame_hex"]))
        while True:
            frame = read_frame(s)
            if decode(frame)[0].is_response:
                return frame


def expected(name: str, broker_addr: str) -> bytes:
    """The recorded answer with our broker address in place of the recorded one."""
    frame = bytes.fromhex(V[name]["response"]["frame_hex"])
    cmd, _ = decode(frame)
    body = cmd.body.replace(RECORDED_ADDR.encode(), broker_addr.encode())
    header = frame[8:8 + (struct.unpack(">I", frame[4:8])[0] & 0xFFFFFF)]
    return struct.pack(">iI", 4 + len(header) + len(body), struct.unpack(">I", frame[4:8])[0]) + header + body


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    """The state the recordings were made in: the main topic with six messages in queue 0
    (TagA, TagB, TagC, ...), an auto-created topic, nothing else."""
    with EmbeddedCluster(tmp_path_factory.mktemp("golden")) as c:
        with Wire(c.broker_addrs["broker-a"]) as w:
            assert replay(c.broker_addrs["broker-a"], "create_topic") == expected("create_topic", "")
            for i in range(6):
                assert send_msg(w, MAIN, f"m{i}".encode(), tags=("TagA", "TagB", "TagC")[i % 3]).code == 0
            assert send_msg(w, "rec_090824r0_auto", b"a", queue_id=0).code == 0
        yield c


BROKER_EXCHANGES = [
    "pull_no_new_msg", "pull_offset_overflow_one", "pull_offset_overflow_badly", "pull_tag_filtered_none_match",
    "pull_empty_queue_offset_0", "pull_empty_queue_offset_5", "pull_unknown_topic", "pull_without_subscription_flag",
    "missing_required_field_send_v2", "send_bad_topic_name", "send_back_bad_offset", "unknown_request_code",
    "max_offset_unknown_topic", "query_consumer_offset_new_group_unknown_topic", "query_consumer_offset_new_group",
    "topic_stats_unknown_topic", "consumer_connection_list_offline", "get_consume_stats_unknown_group",
    "consumer_list_after_unregister_all", "unregister_client", "update_dlq_topic_perm",
]


@pytest.mark.parametrize("name", BROKER_EXCHANGES)
def test_broker_answers_match_the_recording(recorded: EmbeddedCluster, name: str) -> None:
    addr = recorded.broker_addrs["broker-a"]
    assert replay(addr, name) == expected(name, addr)


def test_stateful_sequences_match_the_recording(recorded: EmbeddedCluster) -> None:
    addr = recorded.broker_addrs["broker-a"]
    for name in ("update_consumer_offset", "query_consumer_offset_after_update", "update_consumer_offset_beyond_max",
                 "lock_batch_first", "lock_batch_held_by_other", "lock_batch_renew", "unlock_batch",
                 "unlock_batch_not_owner", "lock_batch_unknown_group"):
        assert replay(addr, name) == expected(name, addr), name
    # 4.9.8 lists the granted queues of a set in hash order: compare this one as a set.
    ours, _ = decode(replay(addr, "lock_batch_after_unlock"))
    theirs, _ = decode(expected("lock_batch_after_unlock", addr))
    key = lambda body: sorted(json.dumps(m, sort_keys=True) for m in json.loads(body)["lockOKMQSet"])  # noqa: E731
    assert key(ours.body) == key(theirs.body) and ours.ext_fields is None and theirs.ext_fields is None


def test_queue_metadata_after_the_seventh_message(recorded: EmbeddedCluster) -> None:
    addr = recorded.broker_addrs["broker-a"]
    with Wire(addr) as w:
        send_msg(w, MAIN, b"m6", tags="TagA")
        for name in ("max_offset", "max_offset_version_0", "numeric_ext_field_value", "min_offset",
                     "rocketmq_serialization"):
            assert replay(addr, name) == expected(name, addr), name


@pytest.mark.parametrize("name", ["route_unknown", "route_existing", "route_existing_version_0_accept_standard_json",
                                  "route_default_topic_tbw102", "route_after_auto_create_later", "cluster_info",
                                  "rocketmq_serialization_namesrv"])
def test_namesrv_answers_match_the_recording(recorded: EmbeddedCluster, name: str) -> None:
    assert replay(recorded.namesrv_addr, name) == expected(name, recorded.broker_addrs["broker-a"])
