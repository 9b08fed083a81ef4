"""A scripted cluster for client tests: one fake NameServer and fake brokers, real sockets.

The NameServer routes every topic to every broker (``queues`` read/write queues, perm 6)
unless ``routes`` overrides a topic's route body or the topic is in ``unknown``. Brokers
answer through ``handlers`` (request code -> function(broker name, conn, request)
returning the answer, or None when the function answered itself or wants no answer);
codes without a handler get an empty SUCCESS, sends get a plausible send answer.
"""

from __future__ import annotations

import itertools
import threading
from typing import Callable

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import SendMessageRequestHeader
from rocketmq_spark.remoting.message import HostPort, offset_msg_id
from tests.client.fake_server import FakeConn, FakeServer, answer, cluster_info_for, route_for

BrokerHandler = Callable[[str, FakeConn, RemotingCommand], "RemotingCommand | None"]


class World:
    def __init__(self, brokers: tuple[str, ...] = ("broker-a",), queues: int = 4) -> None:
        self.queues = queues
        self.routes: dict[str, bytes] = {}
        self.unknown: set[str] = set()
        self.handlers: dict[int, BrokerHandler] = {}
        self._offsets = itertools.count()
        self._lock = threading.Lock()
        self.ns = FakeServer(self._namesrv)
        self.brokers = {name: FakeServer(self._make_broker(name)) for name in brokers}
        self._clients: list[MQClient] = []

    @property
    def addrs(self) -> dict[str, str]:
        return {name: s.address for name, s in self.brokers.items()}

    def client(self, **config: object) -> MQClient:
        kwargs = {k: v for k, v in config.items() if k in ("compression", "send_retries", "busy_timeout", "clock")}
        cfg = {k: v for k, v in config.items() if k not in kwargs}
        cfg.setdefault("request_timeout", 2.0)
        c = MQClient(ClientConfig((self.ns.address,), **cfg), **kwargs)  # type: ignore[arg-type]
        self._clients.append(c)
        return c

    def _namesrv(self, conn: FakeConn, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            topic = cmd.ext["topic"]
            if topic in self.unknown:
                conn.send(answer(cmd, 17, remark=f"No topic route info in name server for the topic: {topic}"))
            else:
                conn.send(answer(cmd, body=self.routes.get(topic) or route_for(topic, self.addrs, self.queues)))
        elif cmd.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            conn.send(answer(cmd, body=cluster_info_for(self.addrs)))
        else:
            conn.send(answer(cmd, 3, remark="not a NameServer request"))

    def _make_broker(self, name: str) -> Callable[[FakeConn, RemotingCommand], None]:
        def handle(conn: FakeConn, cmd: RemotingCommand) -> None:
            if cmd.is_response or cmd.is_oneway:
                return
            handler = self.handlers.get(cmd.code)
            if handler is not None:
                reply = handler(name, conn, cmd)
            elif cmd.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
                reply = self.send_ok(name, cmd)
            else:
                reply = answer(cmd)
            if reply is not None:
                conn.send(reply)
        return handle

    def send_ok(self, name: str, cmd: RemotingCommand, code: int = 0) -> RemotingCommand:
        h = SendMessageRequestHeader.from_v2(cmd.ext)
        with self._lock:
            off = next(self._offsets)
        store = HostPort.parse(self.brokers[name].address)
        return answer(cmd, code, ext={"msgId": offset_msg_id(store, 1000 + off), "queueId": str(h.queue_id),
                                      "queueOffset": str(off), "MSG_REGION": "DefaultRegion",
                                      "TRACE_ON": "true"})

    def close(self) -> None:
        for c in self._clients:
            c.close()
        self.ns.close()
        for s in self.brokers.values():
            s.close()

    def __enter__(self) -> "World":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
