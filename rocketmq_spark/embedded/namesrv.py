"""The NameServer of the embedded cluster: routes read straight from the brokers' tables.

In one process no REGISTER_BROKER is needed (section 3.2): GET_ROUTEINFO_BY_TOPIC builds
the TopicRouteData from the topic tables of the brokers hosting the topic (standard JSON,
quoted broker ids), TOPIC_NOT_EXIST with Apache's remark otherwise. A route lookup of an
unknown ``%RETRY%<group>`` creates it on every broker (1 queue, perm 6), so clients that
look up their retry route before their first heartbeat see it at once.
GET_BROKER_CLUSTER_INFO is written as 4.9.8 writes it (bare ``0`` broker-id keys).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Callable, Sequence

from rocketmq_spark.embedded.processors import answer_request
from rocketmq_spark.embedded.processors.base import FAQ, Call, Refuse
from rocketmq_spark.embedded.server import Connection, RemotingServer, advertised_ip
from rocketmq_spark.remoting.codes import RETRY_PREFIX, RequestCode, ResponseCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import GetRouteInfoRequestHeader
from rocketmq_spark.remoting.route import BrokerData, QueueData, TopicRouteData, encode_route
from rocketmq_spark.tls import ServerTls

if TYPE_CHECKING:
    from rocketmq_spark.embedded.broker import Broker

log = logging.getLogger(__name__)


class NameServer:
    def __init__(self, brokers: Callable[[], Sequence["Broker"]], *, host: str = "127.0.0.1",
                 port: int = 0, cluster: str = "DefaultCluster", advertised_host: str | None = None,
                 tls: ServerTls | None = None) -> None:
        self.name = "namesrv"
        self.cluster = cluster
        self.acl = None  # the NameServer does no ACL check (section 1.10)
        self._brokers = brokers
        self.requested_port = port
        self.advertised_host = advertised_ip(host, advertised_host)
        self.host = host
        self.tls = tls
        self.server = RemotingServer("namesrv", host, self._on_request, tls=tls)
        self._last_port: int | None = None
        self.handlers: dict[int, Callable[[NameServer, Call], RemotingCommand | None]] = {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: NameServer.handle_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: NameServer.handle_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: NameServer.handle_topic_list,
        }

    @property
    def addr(self) -> str:
        return f"{self.advertised_host}:{self.server.port}"

    def start(self) -> "NameServer":
        """Listen; after a stop, on the same port again when it is free (clients keep
        their address)."""
        if self.server.used:
            self.server = RemotingServer("namesrv", self.host, self._on_request, tls=self.tls)
        self._last_port = self.server.bind(self.requested_port,
                                           preferred=None if self.requested_port else self._last_port)
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def _on_request(self, conn: Connection, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            return
        call = Call(cmd, conn)
        call.send(answer_request(self, call, self.handlers))

    # ------------------------------------------------------------ routes

    def route(self, topic: str) -> TopicRouteData | None:
        brokers = [b for b in self._brokers() if b.started]
        hosting = [(b, b.topics.get(topic)) for b in brokers]
        hosting = [(b, t) for b, t in hosting if t is not None]
        if not hosting and topic.startswith(RETRY_PREFIX) and len(topic) > len(RETRY_PREFIX):
            group = topic[len(RETRY_PREFIX):]
            for b in brokers:
                b.topics.ensure(topic, b.groups.find_or_create(group).retry_queue_nums)
            hosting = [(b, b.topics.get(topic)) for b in brokers]
        if not hosting:
            return None
        hosting.sort(key=lambda bt: bt[0].name)
        return TopicRouteData(
            tuple(QueueData(b.name, t.read_queue_nums, t.write_queue_nums, t.perm, t.topic_sys_flag)
                  for b, t in hosting if t is not None),
            tuple(BrokerData(b.cluster, b.name, {0: b.addr}) for b, _ in hosting))

    def handle_route(self, call: Call) -> RemotingCommand:
        h = GetRouteInfoRequestHeader.from_ext(call.ext)
        route = self.route(h.topic)
        if route is None:
            raise Refuse(ResponseCode.TOPIC_NOT_EXIST,
                         f"No topic route info in name server for the topic: {h.topic}{FAQ}")
        return call.answer(ResponseCode.SUCCESS, body=encode_route(route))

    def handle_cluster_info(self, call: Call) -> RemotingCommand:
        brokers = sorted((b for b in self._brokers() if b.started), key=lambda b: b.name)
        table = ",".join(
            f'{json.dumps(b.name)}:{{"brokerAddrs":{{0:{json.dumps(b.addr)}}},'
            f'"brokerName":{json.dumps(b.name)},"cluster":{json.dumps(b.cluster)}}}' for b in brokers)
        clusters: dict[str, list[str]] = {}
        for b in brokers:
            clusters.setdefault(b.cluster, []).append(b.name)
        body = '{"brokerAddrTable":{%s},"clusterAddrTable":%s}' % (table, json.dumps(clusters, separators=(",", ":")))
        return call.answer(ResponseCode.SUCCESS, body=body.encode())

    def handle_topic_list(self, call: Call) -> RemotingCommand:
        topics: dict[str, Any] = {}
        for b in self._brokers():
            if b.started:
                topics.update(dict.fromkeys(b.topics.names()))
        return call.answer(ResponseCode.SUCCESS,
                           body=json.dumps({"topicList": list(topics)}, separators=(",", ":")).encode())
