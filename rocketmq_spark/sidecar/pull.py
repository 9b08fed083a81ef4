"""Reading one queue's half-open range ``[start, end)`` with plain (non-suspended) pulls.

How this works: pull from the current offset, hand the body on undecoded (the columnar
decoder keeps the rows below ``end``), continue at the broker's ``next_begin_offset``, with
up to ``pipeline_depth`` pulls in flight; each pull status has its own handler (``_HANDLERS``):

  FOUND           deliver the body, continue at next_begin_offset.
  NO_MATCHED_MSG  the tag filter skipped entries: not data loss, continue at next_begin_offset.
  NO_NEW_MSG      ``end`` was observed as the max offset, so the messages should be visible;
                  wait with a short backoff and retry, until ``stall_timeout`` passes.
  OFFSET_ILLEGAL  below the min offset (retention removed data) or beyond the max (the
                  queue lost data): ``DataLossError``, or skip with a warning when
                  ``fail_on_data_loss`` is off.

A broker that stops answering (refused, dropped, silent past the request timeout) does not
end the read when the spec allows waiting (``broker_unavailable_timeout_ms``) and the caller
can ``reconnect``: the pulls in flight are dropped, and after a pause the read goes on at
the offset it reached, on the address ``reconnect`` gives (the master again, or a slave of
the same broker name while the master is away: same offsets, same rows). A slave that
lacks the rest of the range (it replicates behind its master) is waited on the same way.
Nothing is delivered twice: ``offset`` only moves past answers already handed on.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

from rocketmq_spark.errors import BrokerUnavailable, RemoteProtocolError, RequestTimeout, TransportError
from rocketmq_spark.sidecar.errors import DataLossError
from rocketmq_spark.sidecar.model import PullSpec, queue_name
from rocketmq_spark.remoting.message import decode_messages, parse_subscription
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import PullResult, PullStatus, WalkedBodies

log = logging.getLogger(__name__)



class Puller(Protocol):
    def pull(self, queue: MessageQueue, offset: int, *, group: str, max_nums: int = 32,
             expression: str = "*", commit_offset: int | None = None, suspend_ms: int = 0,
             timeout: float | None = None, decode: bool = True, expression_type: str = "TAG") -> PullResult: ...


@dataclass(frozen=True)
class PullPolicy:
    stall_timeout: float = 10.0      # seconds to wait for messages below `end` to appear
    backoff_initial: float = 0.01
    backoff_max: float = 0.5
    # Undecoded pulls of one range in flight at once. 32 rather than 16: with the reader's
    # host busy, a deeper pipeline keeps the broker working between the reader's wake-ups
    # (bench/README.md: the broker busy 91 % of the read instead of 86 %, medians).
    pipeline_depth: int = 32
    # a broker that stopped answering: pauses between attempts to go on (doubling)
    reconnect_initial: float = 0.1
    reconnect_max: float = 2.0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)


# (the puller that failed, the error) -> a puller to go on with; raises TransportError
# while none can be had.
Reconnect = Callable[["Puller", BaseException], "Puller"]


class Stalled(RequestTimeout):
    """Messages below the range's end did not become readable in time."""


@dataclass
class _Step:
    """What a handler decided: the next offset, a pull body to deliver, or stop."""

    offset: int
    body: bytes = b""
    stop: bool = False
    waiting: bool = False


class _RangeReader:
    def __init__(self, client: Puller, spec: PullSpec, policy: PullPolicy,
                 reconnect: Reconnect | None = None) -> None:
        self.client, self.spec, self.policy = client, spec, policy
        self._stall_since: float | None = None
        self._backoff = policy.backoff_initial
        self._reconnect = reconnect if spec.broker_unavailable_timeout_ms > 0 else None
        self._broken_since: float | None = None
        self._reconnect_pause = policy.reconnect_initial

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks():
            for body in chunk:
                yield body.joined() if isinstance(body, WalkedBodies) else body

    def chunks(self) -> Iterator[list[bytes | WalkedBodies]]:
        """The bodies in lists: a compiled run's whole (with where its records start, when
        the run noted it), else up to ``depth`` pulls' (a list goes out before any wait, so
        nothing received is held back while a pull stalls)."""
        s = self.spec
        offset = s.start
        held: list[bytes | WalkedBodies] = []
        # Pulls in flight, oldest first: (offset, its pull). Ahead of the oldest, pulls go
        # out at the offsets the last answer predicts (each pull advanced by ``stride``);
        # an answer that ends elsewhere (a tag filter's gap, a capped answer, data loss)
        # drops the ones ahead and the next pulls start where it ended.
        inflight: deque[tuple[int, _Pending]] = deque()
        depth = self._depth()
        stride = s.pull_batch_size
        ahead = offset
        # Whole pulls go in compiled runs when the client offers them (client/direct.py's
        # fast_range); each run hands back where this loop takes over for one pull (any
        # status but a whole FOUND, the range's last partial pull), and the next run starts
        # once that pull is done.
        fast = getattr(self.client, "fast_range", None) if depth > 1 else None
        try:
            while offset < s.end:
                try:
                    if fast is not None and not inflight:
                        got = fast(s.queue, offset, s.end, group=s.group, expression=s.sub_expression,
                                   expression_type=s.expression_type,
                                   max_nums=s.pull_batch_size, stride=stride, depth=depth,
                                   max_rows=s.max_rows_per_batch)
                        if got is None:                # not here (TLS, ACL, not built, the last pull)
                            fast = None
                        else:
                            bodies, resume = got
                            if bodies:
                                yield bodies
                            if resume > offset:
                                self._stall_since, self._backoff = None, self.policy.backoff_initial
                                self._broken_since = None
                                offset = ahead = resume
                                continue
                    # after a run, the pull it stopped at alone (then runs again); else pipelined
                    while len(inflight) < (1 if fast is not None else depth) and ahead < s.end:
                        inflight.append((ahead, self._send(ahead)))
                        ahead += min(stride, s.end - ahead)
                    at, pending = inflight.popleft()
                    res = pending.result()
                    step = _HANDLERS[res.status](self, offset, res)
                    if step.body:
                        held.append(step.body)
                    if held and (step.stop or step.waiting or len(held) >= depth or fast is not None):
                        yield held
                        held = []
                    if step.stop:
                        return
                    if step.waiting:
                        _cancel(inflight)
                        ahead = offset
                        if not self._wait(offset, res):
                            return
                        continue
                    self._stall_since, self._backoff = None, self.policy.backoff_initial
                    if step.offset != at + min(stride, s.end - at):
                        _cancel(inflight)
                        if step.offset > at:
                            stride = min(step.offset - at, s.pull_batch_size)
                        ahead = step.offset
                    offset = step.offset
                    self._broken_since = None
                except (TransportError, RequestTimeout) as exc:
                    _cancel(inflight)
                    if held:
                        yield held
                        held = []
                    self._go_on_after(exc, offset)
                    ahead, stride = offset, s.pull_batch_size
                    fast = getattr(self.client, "fast_range", None) if depth > 1 else None
            if held:
                yield held
        finally:
            _cancel(inflight)

    def _go_on_after(self, exc: BaseException, offset: int) -> None:
        """The broker stopped answering at ``offset``: pause, then a puller to go on with
        (``reconnect``), until ``broker_unavailable_timeout_ms`` has passed without an
        answer. Raises ``exc`` when the read cannot wait: no ``reconnect``, or a stall on
        a master (``_wait``: data the master itself does not serve)."""
        s, p = self.spec, self.policy
        if self._reconnect is None or (isinstance(exc, Stalled) and not getattr(self.client, "replica", False)):
            raise exc
        if self._broken_since is None:
            self._broken_since = p.clock()
            self._reconnect_pause = p.reconnect_initial
            log.warning("%s: no answer at offset %d from %s (%s); going on there once the broker "
                        "or a replica answers (for up to %d ms)", queue_name(s.queue), offset,
                        getattr(self.client, "address", "the broker"), exc, s.broker_unavailable_timeout_ms)
        while True:
            waited = p.clock() - self._broken_since
            if waited * 1000 >= s.broker_unavailable_timeout_ms:
                raise BrokerUnavailable(
                    f"{queue_name(s.queue)}: no answer at offset {offset} for {waited:.1f} s "
                    f"(option 'brokerUnavailableTimeoutMs' is {s.broker_unavailable_timeout_ms}): {exc}") from exc
            p.sleep(self._reconnect_pause)
            self._reconnect_pause = min(self._reconnect_pause * 2, p.reconnect_max)
            try:
                self.client = self._reconnect(self.client, exc)
            except TransportError as again:
                exc = again
                continue
            self._stall_since, self._backoff = None, p.backoff_initial
            return

    def _depth(self) -> int:
        return pipeline_depth(self.client, self.spec, self.policy)

    def _send(self, offset: int) -> "_Pending":
        s = self.spec
        args = dict(group=s.group, max_nums=min(s.pull_batch_size, s.end - offset),
                    expression=s.sub_expression, expression_type=s.expression_type, suspend_ms=0)
        if hasattr(self.client, "pull_async"):
            return self.client.pull_async(s.queue, offset, decode=False, **args)  # type: ignore[attr-defined]
        return _Done(self.client.pull(s.queue, offset, decode=False, **args))

    # ------------------------------------------------------------ status handlers

    def _found(self, offset: int, res: PullResult) -> _Step:
        """The body goes on undecoded (the columnar decoder keeps the range's rows)."""
        nxt = res.next_begin_offset
        if nxt <= offset:
            messages = decode_messages(res.raw_body)
            if not messages:
                raise RemoteProtocolError(
                    f"{queue_name(self.spec.queue)}: FOUND at offset {offset} with no messages "
                    f"and next_begin_offset {nxt}")
            nxt = max(m.queue_offset for m in messages) + 1
        return _Step(nxt, body=res.raw_body)

    def _no_matched(self, offset: int, res: PullResult) -> _Step:
        if res.next_begin_offset > offset:
            return _Step(res.next_begin_offset)
        return _Step(offset, waiting=True)   # "retry immediately" (a file being removed)

    def _no_new(self, offset: int, res: PullResult) -> _Step:
        if res.next_begin_offset > offset:      # an unreadable entry: the broker skips it
            return _Step(res.next_begin_offset)
        return _Step(offset, waiting=True)

    def _illegal(self, offset: int, res: PullResult) -> _Step:
        if offset < res.min_offset:
            return self._below_min(offset, res)
        return self._beyond_max(offset, res)

    # ------------------------------------------------------------ data loss

    def _below_min(self, offset: int, res: PullResult) -> _Step:
        s = self.spec
        lost_to = min(res.min_offset, s.end)
        text = (f"{queue_name(s.queue)}: offsets [{offset}, {lost_to}) are no longer stored "
                f"(the queue's min offset is now {res.min_offset}; retention removed them)")
        if s.fail_on_data_loss:
            raise DataLossError(text + "; set failOnDataLoss=false to skip them")
        log.warning("%s; skipping to %d", text, lost_to)
        return _Step(lost_to)

    def _beyond_max(self, offset: int, res: PullResult) -> _Step:
        s = self.spec
        text = (f"{queue_name(s.queue)}: offsets [{offset}, {s.end}) are not stored (the "
                f"queue's max offset is {res.max_offset}; the queue lost or reset data)")
        if s.fail_on_data_loss:
            raise DataLossError(text + "; set failOnDataLoss=false to skip them", beyond_max=True)
        log.warning("%s; ending the range at %d", text, offset)
        return _Step(offset, stop=True)

    # ------------------------------------------------------------ waiting

    def _wait(self, offset: int, res: PullResult) -> bool:
        """Sleep before retrying ``offset``; False when the range should end here."""
        p = self.policy
        now = p.clock()
        if self._stall_since is None:
            self._stall_since = now
        elif now - self._stall_since >= p.stall_timeout:
            if getattr(self.client, "replica", False) and self._reconnect is not None:
                # a slave replicates behind its master: not data loss, but not here yet
                raise Stalled(f"{queue_name(self.spec.queue)}: the replica at "
                              f"{getattr(self.client, 'address', '?')} holds offsets up to "
                              f"{res.max_offset}, not {self.spec.end}")
            if res.max_offset < self.spec.end:
                return not self._beyond_max(offset, res).stop   # raises unless skipping
            raise Stalled(
                f"{queue_name(self.spec.queue)}: no message at offset {offset} became readable "
                f"within {p.stall_timeout:g} s (max offset {res.max_offset}, range end {self.spec.end})")
        p.sleep(self._backoff)
        self._backoff = min(self._backoff * 2, p.backoff_max)
        return True


class _Pending(Protocol):
    def result(self) -> PullResult: ...


@dataclass(frozen=True)
class _Done:
    """A pull answered already (clients without ``pull_async``)."""

    res: PullResult

    def result(self) -> PullResult:
        return self.res

    def cancel(self) -> None:
        pass


def _cancel(inflight: "deque[tuple[int, _Pending]]") -> None:
    while inflight:
        _, pending = inflight.pop()
        cancel = getattr(pending, "cancel", None)
        if cancel is not None:
            cancel()


_HANDLERS: dict[PullStatus, Callable[[_RangeReader, int, PullResult], _Step]] = {
    PullStatus.FOUND: _RangeReader._found,
    PullStatus.NO_MATCHED_MSG: _RangeReader._no_matched,
    PullStatus.NO_NEW_MSG: _RangeReader._no_new,
    PullStatus.OFFSET_ILLEGAL: _RangeReader._illegal,
}


def pipeline_depth(client: Puller, spec: PullSpec, policy: PullPolicy) -> int:
    """Pulls of a range kept in flight: one when offsets cannot be predicted (a tag filter
    skips entries) or the client has no asynchronous pull."""
    if spec.expression_type != "TAG" or parse_subscription(spec.sub_expression):
        return 1
    return policy.pipeline_depth if hasattr(client, "pull_async") else 1


def read_range(client: Puller, spec: PullSpec, policy: PullPolicy = PullPolicy()) -> Iterator[bytes]:
    """The FOUND pull bodies covering ``[spec.start, spec.end)``, undecoded, in offset order.
    They may hold messages outside the range, and other tags than subscribed (the broker
    filters by tag hash): ``columnar.Window`` keeps exactly the range's rows."""
    return iter(_RangeReader(client, spec, policy))


def read_chunks(client: Puller, spec: PullSpec, policy: PullPolicy = PullPolicy(),
                reconnect: Reconnect | None = None) -> Iterator[list[bytes | WalkedBodies]]:
    """``read_range``'s bodies in lists (a compiled run's, or up to the pipeline's depth of
    pulls'): a thread can hand them over a list at a time. ``reconnect``: how the read goes
    on when its broker stops answering (see the module text)."""
    return _RangeReader(client, spec, policy, reconnect).chunks()
