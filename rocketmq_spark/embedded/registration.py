"""A broker of its own process registering with a running NameServer, as Apache's brokers do.

How this works. ``BrokerRegistrar`` sends REGISTER_BROKER to every NameServer: extFields
brokerName, brokerAddr, brokerId, clusterName, haServerAddr, compressed=false, and the body
RegisterBrokerBody as uncompressed JSON (the topic table with its dataVersion). It does so
at start, every ``interval`` seconds (Apache's registerNameServerPeriod, 30 s) and on every
change of the topic table, on the changing thread before the change is answered (as
Apache's registerIncrementBrokerData), so a route never lags a created topic; the
connection stays open, so a NameServer
sees the broker go the moment its process dies. The answer names the broker name's master
(``masterAddr``), which a slave started without an explicit master copies from. ``stop``
sends UNREGISTER_BROKER.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Sequence

from rocketmq_spark.client.calls import request
from rocketmq_spark.errors import RocketMQError
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.command import RemotingCommand

if TYPE_CHECKING:
    from rocketmq_spark.client.transport import Transport
    from rocketmq_spark.embedded.broker import Broker

log = logging.getLogger(__name__)

REGISTER_INTERVAL = 30.0      # Apache's registerNameServerPeriod
CHECK_SECONDS = 0.5           # how often a broker not registered yet tries again
REQUEST_TIMEOUT = 6.0         # Apache's registerBrokerTimeoutMills


class BrokerRegistrar:
    def __init__(self, broker: "Broker", namesrvs: Sequence[str], transport: "Transport", *,
                 interval: float = REGISTER_INTERVAL) -> None:
        if not namesrvs:
            raise ValueError("a broker joins at least one NameServer")
        self.broker = broker
        self.namesrvs = list(namesrvs)
        self.transport = transport
        self.interval = interval
        self.registered = threading.Event()     # set once every NameServer took a registration
        self.master_addr: str | None = None     # as the last answer named it ("" answers None)
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._send_lock = threading.Lock()     # one registration on the wire at a time

    def start(self) -> None:
        self.broker.topics.listeners.append(self._on_topics_changed)
        self._thread = threading.Thread(target=self._run, name=f"{self.broker.name}-register", daemon=True)
        self._thread.start()

    def _on_topics_changed(self) -> None:
        if not self._stop.is_set() and self.registered.is_set():
            self.register_once()

    def stop(self) -> None:
        self._stop.set()
        if self._on_topics_changed in self.broker.topics.listeners:
            self.broker.topics.listeners.remove(self._on_topics_changed)
        if self._thread is not None:
            self._thread.join(REQUEST_TIMEOUT * 2)
            self._thread = None
        self._each(self._unregister_request())

    def _run(self) -> None:
        sent_at = 0.0
        while not self._stop.is_set():
            if time.monotonic() - sent_at >= self.interval or not self.registered.is_set():
                if self.register_once():
                    sent_at = time.monotonic()
            self._stop.wait(CHECK_SECONDS)

    def register_once(self) -> bool:
        cmd = self._register_request()          # the topic table read before the send lock is taken
        with self._send_lock:
            answers = self._each(cmd)
        ok = [a for a in answers if a is not None and a.code == ResponseCode.SUCCESS]
        if ok:
            self.master_addr = (ok[-1].ext or {}).get("masterAddr") or None
        if len(ok) == len(self.namesrvs):
            self.registered.set()
            return True
        return False

    def _each(self, cmd: RemotingCommand) -> list[RemotingCommand | None]:
        answers: list[RemotingCommand | None] = []
        for ns in self.namesrvs:
            try:
                answer = self.transport.invoke(ns, cmd, REQUEST_TIMEOUT)
            except RocketMQError as exc:
                self.last_error = f"{ns}: {exc}"
                log.warning("%s: cannot register with the NameServer %s: %s", self.broker.name, ns, exc)
                answers.append(None)
                continue
            if answer.code != ResponseCode.SUCCESS:
                self.last_error = f"{ns} answered code {answer.code}: {answer.remark}"
                log.warning("%s: NameServer %s refused the registration (code %d): %s", self.broker.name, ns,
                            answer.code, answer.remark)
            answers.append(answer)
        return answers

    def _ext(self) -> dict[str, object]:
        b = self.broker
        return {"brokerName": b.name, "brokerAddr": b.addr, "brokerId": b.broker_id, "clusterName": b.cluster}

    def _register_request(self) -> RemotingCommand:
        body = {"topicConfigSerializeWrapper": self.broker.topics.snapshot_json(), "filterServerList": []}
        return request(RequestCode.REGISTER_BROKER, {**self._ext(), "haServerAddr": self.broker.addr,
                                                     "compressed": "false",
                                                     "enableActingMaster": str(self.broker.acting_master).lower()},
                       json.dumps(body, separators=(",", ":")).encode())

    def _unregister_request(self) -> RemotingCommand:
        return request(RequestCode.UNREGISTER_BROKER, self._ext())
