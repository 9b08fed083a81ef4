"""PULL_MESSAGE requests and answers, with no I/O.

The SUBSCRIPTION flag is always set (the broker filters by this request's expression, no
heartbeat needed); SUSPEND when ``suspend_ms`` > 0 (long polling); COMMIT_OFFSET when a
commit offset is given (and we pull from the master). Answers 0/19/20/21 become a
PullResult with the four offsets; messages are decoded as stored (compressed bodies stay
compressed, ``MessageExt.payload()`` inflates) and re-filtered by exact tag, since the
broker filters by tag hash only; a SQL92 selector (``expression_type="SQL92"``) is the
broker's to evaluate, and its answers are kept whole.
"""

from __future__ import annotations

from rocketmq_spark.client.calls import check, request
from rocketmq_spark.remoting.codes import PullSysFlag, RequestCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import PullMessageRequestHeader, PullMessageResponseHeader
from rocketmq_spark.remoting.message import MessageExt, decode_messages, parse_subscription
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import PullResult, PullStatus

PULL_STATUS = {0: PullStatus.FOUND, 19: PullStatus.NO_NEW_MSG, 20: PullStatus.NO_MATCHED_MSG,
               21: PullStatus.OFFSET_ILLEGAL}
SUSPEND_GRACE_S = 5.0   # the broker re-checks held pulls every 5 s


def pull_timeout(suspend_ms: int, request_timeout: float) -> float:
    """Seconds to wait for a pull: a held pull may last suspend_ms + 5 s."""
    if suspend_ms > 0:
        return suspend_ms / 1000 + SUSPEND_GRACE_S + request_timeout
    return request_timeout


def pull_request(queue: MessageQueue, offset: int, *, group: str, max_nums: int = 32,
                 expression: str = "*", commit_offset: int | None = None, suspend_ms: int = 0,
                 allow_commit: bool = True, expression_type: str = "TAG") -> RemotingCommand:
    if not group:
        raise ValueError("pull needs a consumer group")
    if offset < 0:
        raise ValueError(f"pull offset must be >= 0, got {offset}")
    if max_nums <= 0:
        raise ValueError(f"max_nums must be > 0, got {max_nums}")
    if suspend_ms < 0:
        raise ValueError(f"suspend_ms must be >= 0, got {suspend_ms}")
    sys_flag = PullSysFlag.SUBSCRIPTION
    if suspend_ms > 0:
        sys_flag |= PullSysFlag.SUSPEND
    if commit_offset is not None and allow_commit:
        sys_flag |= PullSysFlag.COMMIT_OFFSET
    header = PullMessageRequestHeader(
        consumer_group=group, topic=queue.topic, queue_id=queue.queue_id, queue_offset=offset,
        max_msg_nums=max_nums, sys_flag=sys_flag, commit_offset=commit_offset or 0,
        suspend_timeout_millis=suspend_ms, sub_version=0,
        subscription=(expression or "*").strip() or "*" if expression_type == "TAG" else expression,
        expression_type=expression_type)
    return request(RequestCode.PULL_MESSAGE, header)


def client_tags(expression: str, expression_type: str = "TAG") -> frozenset[str]:
    """The tags a client keeps of what the broker answered (empty: everything)."""
    return parse_subscription(expression) if expression_type == "TAG" else frozenset()


def filter_tags(messages: list[MessageExt], tags: frozenset[str]) -> tuple[MessageExt, ...]:
    if not tags:
        return tuple(messages)
    return tuple(m for m in messages if m.tags in tags)


def pull_result(response: RemotingCommand, *, expression: str, address: str,
                decode: bool = True, expression_type: str = "TAG") -> PullResult:
    """The typed answer; with ``decode=False`` a FOUND body is handed over as received
    (``raw_body``), for callers that decode it themselves (the sidecar's columnar path)."""
    check(response, RequestCode.PULL_MESSAGE, address, ok=PULL_STATUS)
    h = PullMessageResponseHeader.from_ext(response.ext)
    status = PULL_STATUS[response.code]
    messages: tuple[MessageExt, ...] = ()
    raw = b""
    if status is PullStatus.FOUND and response.body:
        if decode:
            messages = filter_tags(decode_messages(response.body), client_tags(expression, expression_type))
        else:
            raw = bytes(response.body)
    return PullResult(status=status, next_begin_offset=h.next_begin_offset,
                      min_offset=h.min_offset, max_offset=h.max_offset, messages=messages,
                      suggest_which_broker_id=h.suggest_which_broker_id, raw_body=raw)
