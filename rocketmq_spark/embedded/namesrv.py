"""The NameServer of the embedded cluster: routes read straight from the brokers' tables.

In one process no REGISTER_BROKER is needed (section 3.2): GET_ROUTEINFO_BY_TOPIC builds
the TopicRouteData from the topic tables of the brokers hosting the topic (standard JSON,
quoted broker ids), TOPIC_NOT_EXIST with Apache's remark otherwise. Brokers of other
processes (``rocketmq-spark broker --join``) register as Apache's do: REGISTER_BROKER
with their topic table (uncompressed RegisterBrokerBody JSON), again every 30 s and on
every topic change; a registration is dropped when its connection closes (a broker killed
is out of the routes at once, as Apache's NameServer drops a broker whose channel closes),
on UNREGISTER_BROKER, or after 120 s without one. A broker name's master (brokerId 0)
and slaves (1..) share one BrokerData; its QueueData come from the master's topic table,
kept while the master is away as long as a slave of the name is live (Apache's NameServer
takes QueueData from master registrations only and drops them with the last broker of the
name), from a slave's own table when no master was ever seen. A route lookup of an
unknown ``%RETRY%<group>`` creates it on every broker (1 queue, perm 6), so clients that
look up their retry route before their first heartbeat see it at once.
GET_BROKER_CLUSTER_INFO is written as 4.9.8 writes it (bare ``0`` broker-id keys).

A broker name whose brokers register with ``enableActingMaster`` and that has no brokerId
0 live is routed as a 5.x NameServer routes it: its QueueData without PERM_WRITE
(producers pass the name over), ``"enableActingMaster":true`` in its BrokerData, and, with
``acting_master`` (5.x ``supportActingMaster``), its lowest live brokerId's address under
brokerId 0 (the acting master: consumers lock, pull and commit there). Cluster info lists the
brokers as they registered (the slave under its own id), as Apache's does.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from rocketmq_spark.embedded.processors import answer_request
from rocketmq_spark.embedded.processors.base import FAQ, Call, Refuse
from rocketmq_spark.embedded.server import Connection, RemotingServer, advertised_ip
from rocketmq_spark.remoting.codes import RETRY_PREFIX, Perm, RequestCode, ResponseCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import GetRouteInfoRequestHeader
from rocketmq_spark.remoting.route import MASTER_ID, BrokerData, QueueData, TopicRouteData, encode_route
from rocketmq_spark.embedded.topics import TopicConfig
from rocketmq_spark.remoting import fastjson
from rocketmq_spark.tls import ServerTls

if TYPE_CHECKING:
    from rocketmq_spark.embedded.broker import Broker

log = logging.getLogger(__name__)

BROKER_EXPIRY_MS = 120_000     # Apache's BROKER_CHANNEL_EXPIRED_TIME


@dataclass(frozen=True)
class Node:
    """One broker as routes see it: in this process, or registered by another."""

    cluster: str
    name: str
    broker_id: int
    addr: str
    topics: Mapping[str, TopicConfig]
    acting_master: bool = False      # registered with enableActingMaster


@dataclass(frozen=True)
class Registration:
    node: Node
    conn_id: int
    at: float                  # time.monotonic() of the last REGISTER_BROKER


class NameServer:
    def __init__(self, brokers: Callable[[], Sequence["Broker"]], *, host: str = "127.0.0.1",
                 port: int = 0, cluster: str = "DefaultCluster", advertised_host: str | None = None,
                 tls: ServerTls | None = None, acting_master: bool = False) -> None:
        self.name = "namesrv"
        self.acting_master = acting_master       # Apache's supportActingMaster
        self.cluster = cluster
        self.acl = None  # the NameServer does no ACL check (section 1.10)
        self._brokers = brokers
        self.requested_port = port
        self.advertised_host = advertised_ip(host, advertised_host)
        self.host = host
        self.tls = tls
        self.server = RemotingServer("namesrv", host, self._on_request, on_close=self._on_close, tls=tls)
        self._last_port: int | None = None
        self._registered: dict[str, Registration] = {}     # by broker address
        self._master_topics: dict[str, Mapping[str, TopicConfig]] = {}   # last master registration per name
        self._reg_lock = threading.Lock()
        self.handlers: dict[int, Callable[[NameServer, Call], RemotingCommand | None]] = {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: NameServer.handle_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: NameServer.handle_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: NameServer.handle_topic_list,
            RequestCode.REGISTER_BROKER: NameServer.handle_register,
            RequestCode.UNREGISTER_BROKER: NameServer.handle_unregister,
        }

    @property
    def addr(self) -> str:
        return f"{self.advertised_host}:{self.server.port}"

    def start(self) -> "NameServer":
        """Listen; after a stop, on the same port again when it is free (clients keep
        their address)."""
        if self.server.used:
            self.server = RemotingServer("namesrv", self.host, self._on_request, on_close=self._on_close,
                                         tls=self.tls)
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

    def _on_close(self, conn: Connection) -> None:
        with self._reg_lock:
            gone = [addr for addr, r in self._registered.items() if r.conn_id == conn.id]
            for addr in gone:
                del self._registered[addr]
        for addr in gone:
            log.info("namesrv: broker %s unregistered (its connection closed)", addr)

    # ------------------------------------------------------------ registration

    def handle_register(self, call: Call) -> RemotingCommand:
        ext = call.ext
        try:
            node_id = int(ext["brokerId"])
            name, addr, cluster = ext["brokerName"], ext["brokerAddr"], ext["clusterName"]
        except (KeyError, ValueError):
            raise Refuse(ResponseCode.SYSTEM_ERROR, "REGISTER_BROKER needs brokerName, brokerAddr, clusterName "
                                                    "and an integer brokerId") from None
        if ext.get("compressed") == "true":
            raise Refuse(ResponseCode.SYSTEM_ERROR, "compressed broker registrations are not supported; "
                                                    "set compressedRegister=false")
        try:
            body = fastjson.loads(call.cmd.body) if call.cmd.body else {}
            wrapper = body.get("topicConfigSerializeWrapper") or {}
            topics = {n: TopicConfig.from_json(t) for n, t in (wrapper.get("topicConfigTable") or {}).items()}
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise Refuse(ResponseCode.SYSTEM_ERROR, f"bad REGISTER_BROKER body: {exc}") from None
        node = Node(cluster, name, node_id, addr, topics, ext.get("enableActingMaster") == "true")
        with self._reg_lock:
            if node_id == 0:
                self._master_topics[name] = topics
            fresh = addr not in self._registered
            self._registered[addr] = Registration(node, call.conn.id, time.monotonic())
        if fresh:
            log.info("namesrv: broker %s (%s, brokerId %d) registered", addr, name, node_id)
        master = next((n.addr for n in self._nodes() if n.name == name and n.broker_id == 0), "")
        return call.answer(ResponseCode.SUCCESS, ext={"haServerAddr": master, "masterAddr": master})

    def handle_unregister(self, call: Call) -> RemotingCommand:
        with self._reg_lock:
            self._registered.pop(call.ext.get("brokerAddr", ""), None)
        return call.answer(ResponseCode.SUCCESS)

    def _nodes(self) -> list[Node]:
        """Every live broker: this process's started ones, then the registered ones."""
        nodes = [Node(b.cluster, b.name, b.broker_id, b.addr, b.topics.all(), b.acting_master)
                 for b in self._brokers() if b.started]
        limit = time.monotonic() - BROKER_EXPIRY_MS / 1000
        with self._reg_lock:
            nodes += [r.node for r in self._registered.values() if r.at >= limit]
        return nodes

    def _away_master_topics(self, name: str) -> Mapping[str, TopicConfig] | None:
        """The topic table of a master that is away, as it was last seen."""
        for b in self._brokers():
            if b.name == name and not b.is_slave:
                return b.topics.all()
        with self._reg_lock:
            return self._master_topics.get(name)

    # ------------------------------------------------------------ routes

    def route(self, topic: str) -> TopicRouteData | None:
        if topic.startswith(RETRY_PREFIX) and len(topic) > len(RETRY_PREFIX):
            masters = [b for b in self._brokers() if b.started and not b.is_slave]
            if not any(b.topics.get(topic) for b in masters):
                group = topic[len(RETRY_PREFIX):]
                for b in masters:
                    b.topics.ensure(topic, b.groups.find_or_create(group).retry_queue_nums)
        by_name: dict[str, list[Node]] = {}
        for n in self._nodes():
            by_name.setdefault(n.name, []).append(n)
        queues: list[QueueData] = []
        brokers: list[BrokerData] = []
        for name in sorted(by_name):
            nodes = sorted(by_name[name], key=lambda n: n.broker_id)
            master_topics = nodes[0].topics if nodes[0].broker_id == 0 else self._away_master_topics(name)
            t = next((ts[topic] for ts in [master_topics] + [n.topics for n in nodes] if ts and topic in ts), None)
            if t is None:
                continue
            enabled = any(n.acting_master for n in nodes)
            addrs = {n.broker_id: n.addr for n in nodes}
            perm = t.perm
            if enabled and MASTER_ID not in addrs:
                # no writes while the master is away (Apache wipes PERM_WRITE whatever the
                # NameServer's setting); with supportActingMaster the lowest brokerId serves as 0
                perm &= ~Perm.WRITE
                if self.acting_master:
                    addrs = {MASTER_ID: nodes[0].addr, **{i: a for i, a in addrs.items() if i != nodes[0].broker_id}}
            queues.append(QueueData(name, t.read_queue_nums, t.write_queue_nums, perm, t.topic_sys_flag))
            brokers.append(BrokerData(nodes[0].cluster, name, addrs, enabled))
        if not queues:
            return None
        return TopicRouteData(tuple(queues), tuple(brokers))

    def handle_route(self, call: Call) -> RemotingCommand:
        h = GetRouteInfoRequestHeader.from_ext(call.ext)
        route = self.route(h.topic)
        if route is None:
            raise Refuse(ResponseCode.TOPIC_NOT_EXIST,
                         f"No topic route info in name server for the topic: {h.topic}{FAQ}")
        return call.answer(ResponseCode.SUCCESS, body=encode_route(route))

    def handle_cluster_info(self, call: Call) -> RemotingCommand:
        by_name: dict[str, list[Node]] = {}
        for n in self._nodes():
            by_name.setdefault(n.name, []).append(n)
        entries = []
        clusters: dict[str, list[str]] = {}
        for name in sorted(by_name):
            nodes = sorted(by_name[name], key=lambda n: n.broker_id)
            addrs = ",".join(f"{n.broker_id}:{json.dumps(n.addr)}" for n in nodes)
            entries.append(f'{json.dumps(name)}:{{"brokerAddrs":{{{addrs}}},'
                           f'"brokerName":{json.dumps(name)},"cluster":{json.dumps(nodes[0].cluster)}}}')
            clusters.setdefault(nodes[0].cluster, []).append(name)
        body = '{"brokerAddrTable":{%s},"clusterAddrTable":%s}' % (",".join(entries),
                                                                   json.dumps(clusters, separators=(",", ":")))
        return call.answer(ResponseCode.SUCCESS, body=body.encode())

    def handle_topic_list(self, call: Call) -> RemotingCommand:
        topics: dict[str, Any] = {}
        for n in self._nodes():
            topics.update(dict.fromkeys(n.topics))
        return call.answer(ResponseCode.SUCCESS,
                           body=json.dumps({"topicList": list(topics)}, separators=(",", ":")).encode())
