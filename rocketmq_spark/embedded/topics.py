"""Topic configs of one broker: the system topics, auto-creation, names, persistence.

How this works. The table maps a topic name to its ``TopicConfig`` (queue counts, perm,
filter type) and is saved to ``config/topics.json`` (atomically) on every change, before
the change is used, so a topic that held a message is never forgotten. The broker starts
with the topics Apache 4.9.8 creates (``TBW102`` 8 queues perm 7, ``SCHEDULE_TOPIC_XXXX``
18 queues, the cluster and broker name topics, ...). A send to an unknown topic creates it
from its template (``createTopicInSendMessageMethod``); retry and dead-letter topics are
created with a fixed queue count (``createTopicInSendMessageBackMethod``).
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from rocketmq_spark.embedded.clock import Clock
from rocketmq_spark.embedded.persist import read_json, write_json
from rocketmq_spark.remoting.codes import DEFAULT_TOPIC, DLQ_PREFIX, RETRY_PREFIX, SCHEDULE_TOPIC, Perm

log = logging.getLogger(__name__)

TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH = 127
RETRY_TOPIC_MAX_LENGTH = 255
# Topics no producer may send to (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET).
NOT_ALLOWED_SEND = frozenset({SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                              "TRANS_CHECK_MAX_TIME_TOPIC"})
# TopicValidator.SYSTEM_TOPIC_SET (+ the "rmq_sys_" prefix): not for UPDATE_AND_CREATE_TOPIC.
SYSTEM_TOPICS = NOT_ALLOWED_SEND | {DEFAULT_TOPIC, "BenchmarkTest", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"}
MAX_QUEUE_NUMS = 16384


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_")


def validate_topic(topic: str | None) -> str | None:
    """None when ``topic`` is a legal name, else the 4.9.8 remark saying why not."""
    if topic is None or not topic.strip():
        return "The specified topic is blank."
    if not TOPIC_PATTERN.match(topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    limit = RETRY_TOPIC_MAX_LENGTH if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)) else TOPIC_MAX_LENGTH
    if len(topic) > limit:
        return "The specified topic is longer than topic max length."
    return None


def perm_string(perm: int) -> str:
    return ("R" if perm & Perm.READ else "-") + ("W" if perm & Perm.WRITE else "-") + \
        ("X" if perm & Perm.INHERIT else "-")


@dataclass(frozen=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = Perm.READ | Perm.WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    @property
    def readable(self) -> bool:
        return bool(self.perm & Perm.READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & Perm.WRITE)

    @property
    def queue_count(self) -> int:
        return max(self.read_queue_nums, self.write_queue_nums)

    def to_json(self) -> dict[str, Any]:
        """fastjson's form (alphabetical keys), as GET_ALL_TOPIC_CONFIG writes it."""
        return {"order": self.order, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicFilterType": self.topic_filter_type, "topicName": self.topic_name,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "TopicConfig":
        return cls(str(obj["topicName"]), int(obj.get("readQueueNums", 4)),
                   int(obj.get("writeQueueNums", 4)), int(obj.get("perm", 6)),
                   str(obj.get("topicFilterType", "SINGLE_TAG")), int(obj.get("topicSysFlag", 0)),
                   bool(obj.get("order", False)))

    def describe(self) -> str:
        """Java's TopicConfig.toString (it appears in error remarks)."""
        return (f"TopicConfig [topicName={self.topic_name}, readQueueNums={self.read_queue_nums}, "
                f"writeQueueNums={self.write_queue_nums}, perm={perm_string(self.perm)}, "
                f"topicFilterType={self.topic_filter_type}, topicSysFlag={self.topic_sys_flag}, "
                f"order={str(self.order).lower()}]")


def system_topics(cluster: str, broker: str) -> list[TopicConfig]:
    """What a 4.9.8 broker creates at start (TopicConfigManager) with default settings."""
    rw, rwx = Perm.READ | Perm.WRITE, Perm.READ | Perm.WRITE | Perm.INHERIT
    return [TopicConfig("SELF_TEST_TOPIC", 1, 1, rw), TopicConfig(DEFAULT_TOPIC, 8, 8, rwx),
            TopicConfig("BenchmarkTest", 1024, 1024, rw), TopicConfig(cluster, 16, 16, rwx),
            TopicConfig(broker, 1, 1, rwx), TopicConfig("OFFSET_MOVED_EVENT", 1, 1, rw),
            TopicConfig(SCHEDULE_TOPIC, 18, 18, rw), TopicConfig(f"{cluster}_REPLY_TOPIC", 1, 1, rw),
            TopicConfig("RMQ_SYS_TRANS_HALF_TOPIC", 1, 1, rw)]


class TopicManager:
    def __init__(self, path: Path, *, cluster: str, broker: str, clock: Clock) -> None:
        self.path = Path(path)
        self.clock = clock
        self._lock = threading.RLock()
        self._table: dict[str, TopicConfig] = {}
        self._counter = 0
        self._timestamp = clock.now_ms()
        self._system = {t.topic_name: t for t in system_topics(cluster, broker)}
        # Called after each change, on the changing thread (a joined broker registers with
        # its NameServers before it answers, as Apache's registerIncrementBrokerData).
        self.listeners: list[Callable[[], None]] = []

    def load(self) -> None:
        saved = read_json(self.path, {}) or {}
        with self._lock:
            self._table = dict(self._system)
            for name, obj in (saved.get("topicConfigTable") or {}).items():
                self._table[name] = TopicConfig.from_json(obj)
            version = saved.get("dataVersion") or {}
            self._counter = int(version.get("counter", 0))
            self._timestamp = int(version.get("timestamp", self.clock.now_ms()))
            self._save()

    def _changed(self) -> None:
        for listener in self.listeners:
            try:
                listener()
            except Exception:
                log.exception("topics: change listener failed")

    def _save(self) -> None:
        self._counter += 1
        self._timestamp = self.clock.now_ms()
        write_json(self.path, {"dataVersion": self.data_version(),
                               "topicConfigTable": {n: t.to_json() for n, t in self._table.items()}})

    def data_version(self) -> dict[str, int]:
        return {"counter": self._counter, "timestamp": self._timestamp}

    # ------------------------------------------------------------ queries

    def get(self, topic: str) -> TopicConfig | None:
        return self._table.get(topic)

    def names(self) -> list[str]:
        return list(self._table)

    def all(self) -> dict[str, TopicConfig]:
        return dict(self._table)

    # ------------------------------------------------------------ changes

    def put(self, config: TopicConfig) -> TopicConfig:
        """Create or replace a topic (UPDATE_AND_CREATE_TOPIC)."""
        with self._lock:
            changed = self._table.get(config.topic_name) != config
            if changed:
                self._table[config.topic_name] = config
                self._save()
        if changed:
            self._changed()
        return config

    def ensure(self, topic: str, queues: int, perm: int = Perm.READ | Perm.WRITE,
               sys_flag: int = 0) -> TopicConfig:
        """The topic, created with ``queues`` queues if it does not exist (retry, DLQ)."""
        with self._lock:
            existing = self._table.get(topic)
            if existing is not None:
                return existing
            return self.put(TopicConfig(topic, queues, queues, perm, topic_sys_flag=sys_flag))

    def create_from_template(self, topic: str, template: str, queue_nums: int,
                             sys_flag: int = 0) -> TopicConfig | None:
        """Auto-create ``topic`` from ``template`` (which must have the inherit bit):
        min(queue_nums, template write queues) queues, the template's perm less inherit."""
        with self._lock:
            existing = self._table.get(topic)
            if existing is not None:
                return existing
            base = self._table.get(template)
            if base is None or not base.perm & Perm.INHERIT:
                return None
            queues = min(queue_nums, base.write_queue_nums)
            if queues <= 0:
                return None
            return self.put(replace(base, topic_name=topic, read_queue_nums=queues,
                                    write_queue_nums=queues, perm=base.perm & ~Perm.INHERIT,
                                    topic_sys_flag=sys_flag, order=False))

    def replace_all(self, configs: list[TopicConfig], version: Mapping[str, Any] | None) -> bool:
        """A slave takes its master's table whole (its own system topics kept); True
        when something changed."""
        with self._lock:
            table = dict(self._system)
            table.update({c.topic_name: c for c in configs if c.topic_name not in self._system})
            if table == self._table:
                return False
            self._table = table
            self._save()
        self._changed()
        return True

    def snapshot_json(self) -> dict[str, Any]:
        with self._lock:
            return {"dataVersion": self.data_version(),
                    "topicConfigTable": {n: t.to_json() for n, t in self._table.items()}}
