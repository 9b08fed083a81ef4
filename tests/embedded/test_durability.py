"""kill -9 in the middle of sends: every answered send, offset commit and topic survives.

The broker runs as a real subprocess (``python -m rocketmq_spark.cli broker``); a thread
sends messages and commits offsets as fast as the broker answers; the test SIGKILLs the
broker while the thread is still sending, restarts it on the same directory and checks
the data byte for byte.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.message import BatchItem, encode_batch
from rocketmq_spark.remoting.route import decode_route
from tests.embedded.wire import Wire, messages, pull, req, send_msg

ROOT = Path(__file__).resolve().parents[2]
QUEUES = 4


def start_broker(data_dir: Path, log: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocketmq_spark.cli", "broker", "--namesrv-port", "0", "--data-dir", str(data_dir),
         *extra], stdout=subprocess.PIPE, stderr=open(log, "ab"), cwd=ROOT, text=True)
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout=30):
        proc.kill()
        raise AssertionError(f"broker printed nothing; log: {log.read_text()}")
    line = proc.stdout.readline()
    match = re.search(r"nameServer=(\S+)", line)
    assert match, f"no nameServer= in {line!r}; log: {log.read_text()}"
    return proc, match.group(1)


def broker_addr(namesrv: str, topic: str) -> str:
    with Wire(namesrv) as ns:
        ans = ns.request(req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    assert ans.code == 0, ans.remark
    addr = decode_route(ans.body).master_addr("broker-a")
    assert addr
    return addr


@dataclass
class Acked:
    queue_id: int
    queue_offset: int
    body: bytes
    uniq: str


def test_kill_9_loses_nothing_that_was_answered(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "broker.log"
    proc, ns = start_broker(data, log, "--topic", f"dur:{QUEUES}", "--topic", "dur_batch:1")
    addr = broker_addr(ns, "dur")
    acked: list[Acked] = []
    acked_auto: list[bytes] = []
    commits: dict[int, int] = {}   # queue -> last answered commit
    sent_commits: dict[int, int] = {}
    enough = threading.Event()

    def produce() -> None:
        try:
            with Wire(addr, timeout=10) as w:
                for i in range(100_000):
                    qid = i % QUEUES
                    body = f"msg-{i}-".encode() + os.urandom(16) + bytes(range(i % 200))
                    uniq = f"{i:032X}"
                    ans = send_msg(w, "dur", body, queue_id=qid, props={"UNIQ_KEY": uniq}, uniq=False)
                    if ans.code != 0:
                        return
                    acked.append(Acked(qid, int(ans.ext["queueOffset"]), body, uniq))
                    if i % 10 == 0:
                        if send_msg(w, "dur_auto", body).code == 0:
                            acked_auto.append(body)
                        sent_commits[qid] = i
                        ans = w.request(req(RequestCode.UPDATE_CONSUMER_OFFSET, {
                            "consumerGroup": "dg", "topic": "dur", "queueId": qid, "commitOffset": i}))
                        if ans.code == 0:
                            commits[qid] = i
                    if len(acked) >= 200:
                        enough.set()
        except (OSError, TimeoutError):
            pass  # the broker died under us: expected
        finally:
            enough.set()

    batches: list[tuple[int, list[bytes]]] = []  # (first queue offset, bodies) of answered batches

    def produce_batches() -> None:
        try:
            with Wire(addr, timeout=10) as w:
                for i in range(100_000):
                    bodies = [f"batch-{i}-{j}".encode() + os.urandom(8) for j in range(3)]
                    items = [BatchItem(b, {"UNIQ_KEY": f"B{i:015d}{j:016d}"}) for j, b in enumerate(bodies)]
                    ans = send_msg(w, "dur_batch", encode_batch(items), code=RequestCode.SEND_BATCH_MESSAGE,
                                   extra={"batch": "true"})
                    if ans.code != 0:
                        return
                    batches.append((int(ans.ext["queueOffset"]), bodies))
        except (OSError, TimeoutError):
            pass

    senders = [threading.Thread(target=produce, daemon=True), threading.Thread(target=produce_batches, daemon=True)]
    for t in senders:
        t.start()
    assert enough.wait(60)
    proc.send_signal(signal.SIGKILL)  # mid-send: both threads are still sending
    proc.wait(10)
    for t in senders:
        t.join(30)
    assert len(acked) >= 200 and commits and batches

    proc, ns = start_broker(data, log)
    try:
        addr = broker_addr(ns, "dur")
        with Wire(addr) as w:
            stored: dict[tuple[int, int], tuple[bytes, str]] = {}
            for qid in range(QUEUES):
                offset = 0
                while True:
                    got = messages(pull(w, "check", "dur", qid, offset))
                    if not got:
                        break
                    for m in got:
                        assert m.queue_offset == offset
                        stored[(qid, offset)] = (m.body, m.properties["UNIQ_KEY"])
                        offset += 1
            for a in acked:
                assert stored.get((a.queue_id, a.queue_offset)) == (a.body, a.uniq), a
            auto = messages(pull(w, "check", "dur_auto", 0, 0, max_nums=32))
            auto_bodies = [m.body for m in auto]
            for q in range(1, 4):
                auto_bodies += [m.body for m in messages(pull(w, "check", "dur_auto", q, 0, max_nums=32))]
            assert set(acked_auto) <= set(auto_bodies)
            in_batch_topic: list[bytes] = []
            while got := messages(pull(w, "check", "dur_batch", 0, len(in_batch_topic))):
                in_batch_topic += [m.body for m in got]
            for first, bodies in batches:
                assert in_batch_topic[first:first + 3] == bodies
            for qid, value in commits.items():
                got = w.request(req(RequestCode.QUERY_CONSUMER_OFFSET,
                                    {"consumerGroup": "dg", "topic": "dur", "queueId": qid}))
                assert value <= int(got.ext["offset"]) <= sent_commits[qid]
            # The store goes on where it stopped.
            ans = send_msg(w, "dur", b"after", queue_id=0)
            assert int(ans.ext["queueOffset"]) == max(o for q, o in stored if q == 0) + 1
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_sigterm_and_sigint_stop_cleanly(tmp_path: Path) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc, ns = start_broker(tmp_path / "data", tmp_path / "broker.log", "--topic", "x:2")
        try:
            assert broker_addr(ns, "x")
        finally:
            start = time.monotonic()
            proc.send_signal(sig)
            assert proc.wait(20) == 0 and time.monotonic() - start < 10
