"""Fault-test gates (embedded/gates.py): a held request is handled once the gate opens, and
dropped when its client hung up meanwhile, even though the connection's reader, held with
it, never read the end of the stream."""

from __future__ import annotations

import threading

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.embedded.gates import Gate
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.command import RemotingCommand
from tests.embedded.wire import Wire, messages, pull, send_msg
from tests.waiting import wait_until


def _sends_of(body: bytes):
    def match(cmd: RemotingCommand) -> bool:
        return cmd.code == RequestCode.SEND_MESSAGE_V2 and cmd.body == body
    return match


def _bodies(wire: Wire) -> list[bytes]:
    return [m.body for m in messages(pull(wire, "g_gates", "T", 0, 0))]


def _held_send(cluster: EmbeddedCluster, wire: Wire, body: bytes) -> Gate:
    gate = Gate(_sends_of(body))
    cluster.brokers["broker-a"].gates.append(gate)
    threading.Thread(target=lambda: _quietly(lambda: send_msg(wire, "T", body)), daemon=True).start()
    assert gate.wait_held(10)
    return gate


def _quietly(call) -> None:
    try:
        call()
    except (OSError, TimeoutError):
        pass


def test_an_opened_gate_lets_the_held_request_through(cluster: EmbeddedCluster, broker_addr: str,
                                                      wire: Wire) -> None:
    with Wire(broker_addr) as sender:
        gate = _held_send(cluster, sender, b"held")
        assert _bodies(wire) == []                # held: not stored; other connections go on
        gate.open()
        wait_until(lambda: _bodies(wire) == [b"held"], 10, "the held message stored")


def test_a_held_request_of_a_client_that_hung_up_is_dropped(cluster: EmbeddedCluster, broker_addr: str,
                                                           wire: Wire) -> None:
    broker = cluster.brokers["broker-a"]
    gone = Wire(broker_addr)
    gate = _held_send(cluster, gone, b"dropped")
    before = len(broker.server.connections())     # the held connection among them
    gone.close()                                  # the client dies: its socket is closed
    gate.open()
    wait_until(lambda: len(broker.server.connections()) < before, 10, "the dead connection closed")
    assert send_msg(wire, "T", b"after").code == ResponseCode.SUCCESS
    assert _bodies(wire) == [b"after"]
