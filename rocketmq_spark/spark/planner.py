"""Planning, as pure functions: which offsets a micro-batch ends at, and how its queue
ranges become Spark partitions. No I/O, no Spark; table-tested in tests/spark.

Ranges are half-open ``[start, end)`` in queue offsets (the next offset to read).

* :func:`rate_limit` caps a batch at ``max_rows`` messages in all, spread over the queues
  in proportion to their backlog (largest-remainder rounding, so the shares add up to
  exactly ``min(max_rows, total backlog)``; ties go to the queue that sorts first). When
  ``max_rows`` is at least the number of queues with a backlog, each of them reads at
  least one message, so no queue starves next to a busy one.
* :func:`plan_partitions` turns ranges into partitions: orderly mode gives exactly one
  partition per queue (its rows stay in offset order); concurrent mode splits ranges so
  there are at least ``min_partitions`` partitions, each range split in proportion to
  its size into nearly equal consecutive pieces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from rocketmq_spark.remoting.route import MessageQueue

__all__ = ["QueueRange", "rate_limit", "plan_partitions", "ranges"]


@dataclass(frozen=True, order=True)
class QueueRange:
    """Offsets ``[start, end)`` of one queue: one Spark partition's worth of work."""

    queue: MessageQueue
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def _apportion(total: int, weights: Sequence[int]) -> list[int]:
    """Split ``total`` into integers proportional to ``weights`` (largest remainder).

    Each share is at most ``ceil(total * w / sum(w))``; the shares add up to ``total``.
    Ties in the remainder go to the earlier weight.
    """
    whole = sum(weights)
    if whole <= 0 or total <= 0:
        return [0] * len(weights)
    floors = [total * w // whole for w in weights]
    left = total - sum(floors)
    order = sorted(range(len(weights)), key=lambda i: (-((total * weights[i]) % whole), i))
    for i in order[:left]:
        floors[i] += 1
    return floors


def _fair_shares(limit: int, backlog: Sequence[int]) -> list[int]:
    """``limit`` (< sum(backlog)) messages spread over queues by backlog.

    When the limit allows, every queue with a backlog reads at least one message, so a
    small queue next to a busy one is never starved; the rest goes by proportion.
    """
    busy = [b > 0 for b in backlog]
    if limit < sum(busy):
        return _apportion(limit, backlog)
    rest = _apportion(limit - sum(busy), [b - 1 if b > 0 else 0 for b in backlog])
    return [r + (1 if on else 0) for r, on in zip(rest, busy)]


def rate_limit(start: Mapping[MessageQueue, int], latest: Mapping[MessageQueue, int],
               max_rows: int | None) -> dict[MessageQueue, int]:
    """The end offsets of a batch reading at most ``max_rows`` messages from ``start``.

    ``latest`` is what is available per queue; queues missing from ``start`` start at
    ``latest`` (nothing to read). ``max_rows=None`` reads everything available.
    The result has every queue of ``latest`` and never goes below ``start``.
    """
    queues = sorted(latest)
    begin = {q: min(start.get(q, latest[q]), latest[q]) for q in queues}
    backlog = [latest[q] - begin[q] for q in queues]
    if max_rows is None or sum(backlog) <= max_rows:
        return {q: max(latest[q], start.get(q, latest[q])) for q in queues}
    if max_rows < 0:
        raise ValueError(f"max_rows must be >= 0, got {max_rows}")
    shares = _fair_shares(max_rows, backlog)
    return {q: max(begin[q] + share, start.get(q, begin[q])) for q, share in zip(queues, shares)}


def ranges(start: Mapping[MessageQueue, int], end: Mapping[MessageQueue, int]) -> list[QueueRange]:
    """Non-empty ranges between two offset maps, sorted by queue.

    ``start`` must hold every queue of ``end`` (the caller fills in where new queues begin).
    """
    out = []
    for q in sorted(end):
        if q not in start:
            raise KeyError(f"no start offset for {q}")
        if end[q] > start[q]:
            out.append(QueueRange(q, start[q], end[q]))
    return out


def _split(r: QueueRange, parts: int) -> Iterable[QueueRange]:
    step, extra = divmod(r.size, parts)
    pos = r.start
    for i in range(parts):
        nxt = pos + step + (1 if i < extra else 0)
        yield QueueRange(r.queue, pos, nxt)
        pos = nxt


def plan_partitions(queue_ranges: Sequence[QueueRange], *, orderly: bool,
                    min_partitions: int | None = None) -> list[QueueRange]:
    """Ranges -> partitions. Empty ranges are dropped.

    Orderly: one partition per queue, whatever ``min_partitions`` says. Concurrent: when
    there are fewer ranges than ``min_partitions``, split the ranges (in proportion to their
    sizes, never into empty pieces) so that there are ``min_partitions`` partitions, or one
    per message when there are fewer messages than that.
    """
    todo = sorted(r for r in queue_ranges if r.size > 0)
    if orderly or not min_partitions or len(todo) >= min_partitions:
        return todo
    sizes = [r.size for r in todo]
    target = min(min_partitions, sum(sizes))
    # Every range keeps at least one part; the rest of the target is apportioned by size.
    extra = _apportion(target - len(todo), sizes)
    out: list[QueueRange] = []
    for r, more in zip(todo, extra):
        out.extend(_split(r, min(r.size, 1 + more)))
    return out
