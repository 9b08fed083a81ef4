"""The message index of one broker: ``topic#key`` -> the records stored under it.

How this works. Apache's IndexService files every dispatched record (all but transaction
ROLLBACK records) under ``topic#UNIQ_KEY`` and under ``topic#k`` for each ``k`` of its
``KEYS`` property split on spaces (empty parts skipped); QUERY_MESSAGE reads it back. Its
index is a hash table on disk, so an answer can hold records of other keys that hash the
same: clients (mqadmin, ``MQClient.query_message``) check each record. This index keeps
the keys themselves, in memory, and is rebuilt from the commit log when the store opens
(recovery reads every record anyway), so it never answers another key's record; records
of deleted commit-log segments are skipped when read back (``MessageStore.query``).

Entries of a key are kept in store order; a query walks them newest first, as Apache's
does, checks each record's store time against the window and stops at ``max_num``. Most
keys are a UNIQ_KEY with one record, so an entry is a ``topic#key`` string and one int. Apache files a record's time in whole seconds past its
index file's first store time, so its time window is coarser than this exact one.
"""

from __future__ import annotations

import threading
from array import array
from typing import Iterator

from rocketmq_spark.remoting.codes import MessageSysFlag

__all__ = ["KeyIndex", "MAX_QUERY_NUM", "UNIQUE_QUERY_NUM", "index_keys"]

MAX_QUERY_NUM = 64          # maxMsgsNumBatch: QUERY_MESSAGE answers at most this many records
UNIQUE_QUERY_NUM = 32       # defaultQueryMaxNum: a _UNIQUE_KEY_QUERY answers at most this many

def index_keys(sys_flag: int, uniq_key: str | None, keys: str | None) -> list[str]:
    """The keys a record is filed under (without the topic), as IndexService.buildIndex
    picks them: none for a ROLLBACK record, else UNIQ_KEY and each space-separated key."""
    if sys_flag & MessageSysFlag.TRANSACTION_MASK == MessageSysFlag.TRANSACTION_ROLLBACK_TYPE:
        return []
    out = [uniq_key] if uniq_key else []
    if keys:
        out += [k for k in keys.split(" ") if k]
    return out


class KeyIndex:
    def __init__(self) -> None:
        # "topic#key" -> the commit-log offset of its one record, or of each in store order
        # (most keys are a UNIQ_KEY with one record: a bare int keeps that entry small)
        self._entries: dict[str, int | list[int]] = {}
        self._lock = threading.Lock()
        self.last_update_ms = 0       # indexLastUpdateTimestamp: store time of the last record
        self.last_update_phys = 0     # indexLastUpdatePhyoffset: commit-log offset of it

    def add(self, topic: str, keys: list[str], phys: int, store_ts: int) -> None:
        with self._lock:
            for k in dict.fromkeys(keys):             # a key given twice is filed once
                name = f"{topic}#{k}"
                had = self._entries.get(name)
                if had is None:
                    self._entries[name] = phys
                elif isinstance(had, int):
                    self._entries[name] = [had, phys]
                else:
                    had.append(phys)
            self.last_update_ms = max(self.last_update_ms, store_ts)
            self.last_update_phys = max(self.last_update_phys, phys)

    def find(self, topic: str, key: str) -> Iterator[int]:
        """Commit-log offsets filed under ``topic#key``, newest first."""
        with self._lock:
            had = self._entries.get(f"{topic}#{key}")
            found = [] if had is None else [had] if isinstance(had, int) else list(had)
        return reversed(found)
