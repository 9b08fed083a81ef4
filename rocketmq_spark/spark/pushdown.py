"""Filter push-down for batch reads, as pure logic: Spark's filters -> what to read.

Spark hands a batch reader the conjuncts of a query's ``WHERE`` (``pyspark.sql.datasource``
``Filter`` objects); :func:`push` turns those it can answer into a :class:`Pushed` and
returns the rest, which Spark keeps evaluating. What each column gives:

==================== ============================= ==========================================
column               filters                       what the read does with them
==================== ============================= ==========================================
``topic``            ``=``, ``IN``                 reads only those topics' queues
``broker``           ``=``, ``IN``                 reads only those brokers' queues
``queue_id``         ``=``, ``IN``                 reads only those queues
``tags``             ``=``, ``IN``                 subscribes with ``A || B`` (intersected
                                                   with ``subExpression``): the broker skips
                                                   other tags, the sidecar re-checks them
``keys``, ``msg_id`` ``=``                         looked up in every broker's message index
                                                   (QUERY_MESSAGE) instead of reading the
                                                   topic; only the matching offsets are read
``store_timestamp``  ``>``, ``>=``, ``<``, ``<=``  each queue's range starts / ends where the
                                                   time does (SEARCH_OFFSET_BY_TIMESTAMP, then
                                                   exact by reading around it, as
                                                   ``startingTimestamp``)
==================== ============================= ==========================================

Queue, topic, broker and tag filters select whole queues or exactly the tagged messages,
so Spark need not check them again: they are not returned. A time bound narrows each
queue's offsets on the assumption that a queue's store times do not go down, the one
``startingTimestamp`` makes; Spark still checks it (it is returned too), so the rows are
Spark's own whatever the broker's clock did. A read that includes ``%RETRY%<group>``
(concurrent mode) returns every filter: rows of the retry topic carry their original
topic and are read whole.

A ``keys = 'v'`` lookup asks the index for one space-separated part of ``v`` (a record is
filed under each part of its KEYS) and keeps the records whose whole KEYS is ``v``; a
``msg_id = 'v'`` lookup asks for the UNIQ_KEY ``v`` (and the sidecar views the record of
``v`` read as an offset message id, a message stored without UNIQ_KEY having that as its
``msg_id``). When a broker's answer is as long as QUERY_MESSAGE allows (64; 32 for a
UNIQ_KEY) it may have left records out, and the read scans instead. One lookup a read;
Spark checks the lookup's filter again (it is returned).

Spark's timestamps are microseconds, store times milliseconds: ``store_timestamp > t``
holds from ``floor(t / 1000) + 1`` ms, ``>= t`` from ``ceil(t / 1000)``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Sequence

from rocketmq_spark.remoting.message import parse_subscription
from rocketmq_spark.remoting.route import MessageQueue

__all__ = ["Lookup", "Pushed", "push", "NOTHING"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class Lookup:
    """An equality the brokers' message indexes answer: ``column`` is ``keys`` or ``msg_id``."""

    column: str
    value: str

    @property
    def unique(self) -> bool:
        return self.column == "msg_id"

    @property
    def key(self) -> str:
        """What to ask the index for: a ``msg_id`` as it is; for ``keys``, every record
        whose KEYS is the value is filed under each of its space-separated parts, the
        longest is the least shared."""
        if self.unique:
            return self.value
        return max((k for k in self.value.split(" ") if k), key=len)

    @property
    def max_num(self) -> int:
        """The longest answer a broker gives (maxMsgsNumBatch 64; defaultQueryMaxNum 32 for
        a UNIQ_KEY): an answer this long may have left records out."""
        return 32 if self.unique else 64


@dataclass(frozen=True)
class Pushed:
    """What the pushed filters allow; ``None`` is "any". Time bounds are store times in
    ms: ``since_ms`` inclusive, ``until_ms`` exclusive."""

    topics: frozenset[str] | None = None
    brokers: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    tags: frozenset[str] | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    lookup: Lookup | None = None   # ``keys = 'v'`` / ``msg_id = 'v'``: look v up in the message index

    @property
    def empty(self) -> bool:
        """No row can pass (e.g. ``queue_id = 1 AND queue_id = 2``)."""
        sets = (self.topics, self.brokers, self.queue_ids, self.tags)
        if any(s is not None and not s for s in sets):
            return True
        return self.since_ms is not None and self.until_ms is not None and self.since_ms >= self.until_ms

    def keeps(self, q: MessageQueue) -> bool:
        return ((self.topics is None or q.topic in self.topics)
                and (self.brokers is None or q.broker_name in self.brokers)
                and (self.queue_ids is None or q.queue_id in self.queue_ids))

    def sub_expression(self, base: str) -> str:
        """The subscription of the read: ``base`` (``subExpression``) narrowed to the
        pushed tags, sorted so the same filters give the same text."""
        if self.tags is None:
            return base
        given = parse_subscription(base)           # empty: '*'
        tags = self.tags & given if given else self.tags
        return " || ".join(sorted(tags))


NOTHING = Pushed()


def _intersect(old: frozenset[Any] | None, new: Iterable[Any]) -> frozenset[Any]:
    new = frozenset(new)
    return new if old is None else old & new


def _micros(value: Any) -> int | None:
    """An aware datetime as µs since the epoch; a naive one cannot be placed in time."""
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        return None
    return (value - _EPOCH) // dt.timedelta(microseconds=1)


def _ms_from(us: int, strict: bool) -> int:
    """First store time in ms past (``strict``) or at ``us`` µs."""
    return us // 1000 + 1 if strict else -(-us // 1000)


# Column -> the type its values must have for the filter to be pushed (a value of another
# type, e.g. a string compared with queue_id, is left for Spark to cast).
_SET_COLUMNS: dict[str, tuple[type, str]] = {
    "topic": (str, "topics"),
    "broker": (str, "brokers"),
    "queue_id": (int, "queue_ids"),
    "tags": (str, "tags"),
}


def _tag_ok(tag: str) -> bool:
    # a tag a subscription can name: not '*', no '||', nothing stripped away
    return bool(tag) and tag != "*" and "||" not in tag and tag == tag.strip()


def _values(column: str, values: Sequence[Any]) -> list[Any] | None:
    want = _SET_COLUMNS[column][0]
    got = [v for v in values if v is not None]    # `x IN (.., NULL)` is never true for NULL
    if not got or any(isinstance(v, bool) or not isinstance(v, want) for v in got):
        return None
    if column == "tags" and not all(_tag_ok(v) for v in got):
        return None
    return got


def _push_set(p: Pushed, column: str, values: Sequence[Any]) -> Pushed | None:
    got = _values(column, values)
    if got is None:
        return None
    field = _SET_COLUMNS[column][1]
    return replace(p, **{field: _intersect(getattr(p, field), got)})


def _push_lookup(p: Pushed, column: str, value: Any) -> Pushed | None:
    # one lookup a read; a value with no key in it (empty, spaces) is in no index
    if p.lookup is not None or not isinstance(value, str) or not value.split():
        return None
    return replace(p, lookup=Lookup(column, value))


def _push_time(p: Pushed, value: Any, *, lower: bool, strict: bool) -> Pushed | None:
    us = _micros(value)
    if us is None:
        return None
    if lower:
        ms = _ms_from(us, strict)
        return replace(p, since_ms=ms if p.since_ms is None else max(p.since_ms, ms))
    # store_timestamp < t  <=>  ms < ceil(t);  <= t  <=>  ms < floor(t) + 1
    ms = _ms_from(us, not strict)
    return replace(p, until_ms=ms if p.until_ms is None else min(p.until_ms, ms))


Handler = Callable[[Pushed, str, Any], "Pushed | None"]

# Filter class name -> how it narrows the read; each returns None when it cannot.
_HANDLERS: dict[str, Handler] = {
    "EqualTo": lambda p, col, v: (_push_set(p, col, [v]) if col in _SET_COLUMNS and v is not None
                                  else _push_lookup(p, col, v) if col in _LOOKUP_COLUMNS else None),
    "In": lambda p, col, v: _push_set(p, col, list(v)) if col in _SET_COLUMNS else None,
    "GreaterThan": lambda p, col, v: (_push_time(p, v, lower=True, strict=True)
                                      if col == "store_timestamp" else None),
    "GreaterThanOrEqual": lambda p, col, v: (_push_time(p, v, lower=True, strict=False)
                                             if col == "store_timestamp" else None),
    "LessThan": lambda p, col, v: (_push_time(p, v, lower=False, strict=True)
                                   if col == "store_timestamp" else None),
    "LessThanOrEqual": lambda p, col, v: (_push_time(p, v, lower=False, strict=False)
                                          if col == "store_timestamp" else None),
}

# Filters Spark need not check again once pushed (time bounds and keys are checked by Spark too).
_EXACT = frozenset({"EqualTo", "In"})
_LOOKUP_COLUMNS = frozenset({"keys", "msg_id"})
_CHECKED_AGAIN = _LOOKUP_COLUMNS | {"store_timestamp"}


def push(filters: Sequence[Any], *, exact: bool = True) -> tuple[Pushed, list[Any]]:
    """The read ``filters`` (a conjunction) allow, and the filters Spark must still
    evaluate (each one of ``filters``, by identity). With ``exact=False`` (a read of the
    retry topic too) every filter is returned."""
    pushed, rest = NOTHING, []
    for f in filters:
        name = type(f).__name__
        attr = getattr(f, "attribute", ())
        handler = _HANDLERS.get(name)
        narrowed = None
        if handler is not None and len(attr) == 1:
            narrowed = handler(pushed, attr[0], getattr(f, "value", None))
        if narrowed is None:
            rest.append(f)
            continue
        pushed = narrowed
        if not exact or name not in _EXACT or attr[0] in _CHECKED_AGAIN:
            rest.append(f)
    return pushed, rest
