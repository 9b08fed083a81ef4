"""NameServer calls with failover, and the topic route cache.

``NameServers.call`` tries the configured NameServers in turn, starting with the last one
that answered; only I/O failures move on to the next (an answer such as TOPIC_NOT_EXIST
is authoritative). ``RouteCache`` keeps each topic's route for ``ttl`` seconds (the
clock is injectable); when every NameServer is unreachable it keeps serving the last
route it had, as the Java client does. Routes come through ``decode_route``, which also
reads the legacy form with unquoted integer keys.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from rocketmq_spark.client.calls import check, request
from rocketmq_spark.errors import BrokerError, TransportError
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import GetRouteInfoRequestHeader
from rocketmq_spark.remoting.route import TopicRouteData, decode_route

log = logging.getLogger(__name__)

Invoke = Callable[[str, RemotingCommand, float], RemotingCommand]


class NameServers:
    def __init__(self, addresses: Sequence[str], invoke: Invoke, timeout: float) -> None:
        if not addresses:
            raise ValueError("no NameServer address configured")
        self.addresses = tuple(addresses)
        self._invoke = invoke
        self._timeout = timeout
        self._current = 0
        self._lock = threading.Lock()

    def call(self, cmd: RemotingCommand, timeout: float | None = None) -> tuple[RemotingCommand, str]:
        """The answer of the first NameServer that gives one, and its address."""
        with self._lock:
            start = self._current
        errors: list[str] = []
        n = len(self.addresses)
        for i in range(n):
            index = (start + i) % n
            address = self.addresses[index]
            try:
                response = self._invoke(address, cmd, timeout or self._timeout)
            except TransportError as exc:
                errors.append(str(exc))
                log.info("NameServer %s failed (%s); trying the next one", address, exc)
                continue
            with self._lock:
                self._current = index
            return response, address
        raise TransportError("no NameServer answered: " + "; ".join(errors))

    def checked(self, cmd: RemotingCommand) -> tuple[RemotingCommand, str]:
        response, address = self.call(cmd)
        return check(response, cmd.code, address), address


@dataclass(frozen=True)
class _Entry:
    route: TopicRouteData
    fetched_at: float


class RouteCache:
    def __init__(self, name_servers: NameServers, *, ttl: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ns = name_servers
        self._ttl = ttl
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def get(self, topic: str, *, refresh: bool = False) -> TopicRouteData:
        if not topic:
            raise ValueError("topic is empty")
        with self._lock:
            entry = self._entries.get(topic)
        if entry is not None and not refresh and self._clock() - entry.fetched_at < self._ttl:
            return entry.route
        try:
            route = self.fetch(topic)
        except TransportError:
            if entry is None:
                raise
            log.warning("NameServers unreachable; using the route of %r fetched %.0f s ago",
                        topic, self._clock() - entry.fetched_at)
            return entry.route
        except BrokerError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                self.invalidate(topic)
            raise
        with self._lock:
            self._entries[topic] = _Entry(route, self._clock())
        return route

    def fetch(self, topic: str) -> TopicRouteData:
        """Ask the NameServers (no cache). An empty route body counts as no route."""
        cmd = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic))
        response, address = self._ns.checked(cmd)
        if not response.body:
            raise BrokerError(ResponseCode.TOPIC_NOT_EXIST, f"empty route for topic {topic}",
                              request_code=cmd.code, address=address)
        return decode_route(response.body)

    def expire(self, topic: str) -> None:
        """The next ``get`` asks the NameServers; the route stays as the fallback when none answers."""
        with self._lock:
            entry = self._entries.get(topic)
            if entry is not None:
                self._entries[topic] = _Entry(entry.route, float("-inf"))

    def invalidate(self, topic: str) -> None:
        with self._lock:
            self._entries.pop(topic, None)

    def masters(self) -> Mapping[str, str]:
        """Broker name -> master address over every cached route."""
        with self._lock:
            routes = [e.route for e in self._entries.values()]
        out: dict[str, str] = {}
        for route in routes:
            for bd in route.broker_datas:
                if bd.master_addr:
                    out[bd.broker_name] = bd.master_addr
        return out

    def broker_addrs(self, broker_name: str) -> Mapping[int, str]:
        """Broker id -> address of ``broker_name`` as the cached routes know it."""
        with self._lock:
            routes = [e.route for e in self._entries.values()]
        for route in routes:
            for bd in route.broker_datas:
                if bd.broker_name == broker_name:
                    return bd.broker_addrs
        return {}
