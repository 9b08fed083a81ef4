"""Subscription group configs (``SubscriptionGroupManager``): retry limits per group.

A group is created with Apache's defaults the first time it is used (heartbeat, pull,
send-back, a send to its retry topic) and saved to ``config/subscriptionGroup.json``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from rocketmq_spark.embedded.persist import read_json, write_json
from rocketmq_spark.remoting.codes import MAX_RECONSUME_TIMES


@dataclass(frozen=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = MAX_RECONSUME_TIMES
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def to_json(self) -> dict[str, Any]:
        return {_camel(f.name): getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "SubscriptionGroupConfig":
        return cls(**{f.name: obj[_camel(f.name)] for f in fields(cls) if _camel(f.name) in obj})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


class SubscriptionGroupManager:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._table: dict[str, SubscriptionGroupConfig] = {}

    def load(self) -> None:
        saved = read_json(self.path, {}) or {}
        with self._lock:
            self._table = {name: SubscriptionGroupConfig.from_json(obj)
                           for name, obj in (saved.get("subscriptionGroupTable") or {}).items()}

    def _save(self) -> None:
        write_json(self.path, {"subscriptionGroupTable": {n: g.to_json() for n, g in self._table.items()}})

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self._table.get(group)

    def find_or_create(self, group: str) -> SubscriptionGroupConfig:
        """autoCreateSubscriptionGroup: the group's config, created with defaults."""
        config = self._table.get(group)
        if config is not None:
            return config
        with self._lock:
            config = self._table.get(group)
            if config is None:
                config = self._table[group] = SubscriptionGroupConfig(group)
                self._save()
            return config

    def put(self, config: SubscriptionGroupConfig) -> None:
        with self._lock:
            self._table[config.group_name] = config
            self._save()

    def names(self) -> list[str]:
        return list(self._table)
