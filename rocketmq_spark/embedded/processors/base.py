"""What every request handler shares: the call being answered, how to refuse it, and
``BrokerContext``, the part of the broker handlers may use.

A handler takes ``(broker, call)`` and returns the answer, or None when there is none
now (a oneway request, a pull parked for long polling, a send waiting for fsync: those
answer later through ``call.send``). Validation failures raise ``Refuse`` with the wire
code, remark and extFields (``None`` = no extFields key, ``{}`` = present and empty),
which the dispatcher turns into the answer. Answers look like 4.9.8's: language JAVA,
version 409, the caller's serialization.

Handlers see the broker only through ``BrokerContext`` (a Protocol): ``embedded.broker``
imports the processors, never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Protocol, Sequence

from rocketmq_spark.remoting.codes import FLAG_ONEWAY, SERVER_VERSION
from rocketmq_spark.remoting.command import RemotingCommand, response_to

if TYPE_CHECKING:  # types only; none of these modules imports the processors
    from rocketmq_spark.embedded.clients import ClientManager, Notice
    from rocketmq_spark.embedded.clock import Clock
    from rocketmq_spark.embedded.groups import SubscriptionGroupManager
    from rocketmq_spark.embedded.half_messages import HalfMessages
    from rocketmq_spark.embedded.locks import RebalanceLockManager
    from rocketmq_spark.embedded.long_poll import PullHoldService
    from rocketmq_spark.embedded.offsets import ConsumerOffsetManager
    from rocketmq_spark.embedded.processors.replicate import CommitLogWaiters
    from rocketmq_spark.embedded.schedule import ScheduleService
    from rocketmq_spark.embedded.timer import TimerService
    from rocketmq_spark.embedded.server import Connection
    from rocketmq_spark.embedded.stats import BrokerStats
    from rocketmq_spark.embedded.store import MessageStore, PutResult
    from rocketmq_spark.embedded.topics import TopicManager
    from rocketmq_spark.remoting.message import MessageExt

FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
SERVER_LANGUAGE = "JAVA"


class Refuse(Exception):
    """Answer the current request with ``code``/``remark``/``ext`` and stop handling it."""

    def __init__(self, code: int, remark: str | None, ext: Mapping[str, str] | None = None) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark
        self.ext = ext


@dataclass(frozen=True)
class Call:
    cmd: RemotingCommand
    conn: "Connection"

    @property
    def ext(self) -> Mapping[str, str]:
        return self.cmd.ext

    @property
    def oneway(self) -> bool:
        return bool(self.cmd.flag & FLAG_ONEWAY)

    def answer(self, code: int = 0, remark: str | None = None, ext: Mapping[str, str] | None = None,
               body: bytes = b"") -> RemotingCommand:
        return response_to(self.cmd, code, remark=remark, ext_fields=dict(ext) if ext is not None else None,
                           body=body, version=SERVER_VERSION, language=SERVER_LANGUAGE)

    def send(self, response: RemotingCommand | None) -> None:
        """Deliver an answer produced later (dropped for oneway requests)."""
        if response is not None and not self.oneway:
            self.conn.send(response)


class AclHook(Protocol):
    def check(self, call: Call) -> None:
        """Raise ``Refuse`` when the ACL denies ``call``."""


class Served(Protocol):
    """What the dispatcher needs of whoever answers (a broker, the NameServer)."""

    @property
    def name(self) -> str: ...

    @property
    def acl(self) -> AclHook | None: ...


class BrokerContext(Served, Protocol):
    """Exactly what the broker's request handlers use of it."""

    @property
    def cluster(self) -> str: ...

    @property
    def root(self) -> Path: ...                       # its data directory

    @property
    def clock(self) -> Clock: ...

    @property
    def broker_id(self) -> int: ...                   # 0 a master, 1.. a slave

    @property
    def is_slave(self) -> bool: ...

    @property
    def replication_waiters(self) -> CommitLogWaiters: ...

    @property
    def boot_ms(self) -> int: ...

    @property
    def flush_sync(self) -> bool: ...

    @property
    def enable_property_filter(self) -> bool: ...         # SQL92 subscriptions allowed

    @property
    def store(self) -> MessageStore: ...

    @property
    def topics(self) -> TopicManager: ...

    @property
    def groups(self) -> SubscriptionGroupManager: ...

    @property
    def offsets(self) -> ConsumerOffsetManager: ...

    @property
    def clients(self) -> ClientManager: ...

    @property
    def locks(self) -> RebalanceLockManager: ...

    @property
    def long_poll(self) -> PullHoldService: ...

    @property
    def schedule(self) -> ScheduleService: ...

    @property
    def timer(self) -> TimerService | None: ...

    @property
    def half_messages(self) -> HalfMessages: ...

    @property
    def stats(self) -> BrokerStats: ...

    def put(self, messages: Sequence[MessageExt], *, apply_delay: bool = True) -> PutResult:
        """Store messages (a DELAY > 0 goes through SCHEDULE_TOPIC_XXXX with ``apply_delay``)."""

    def answer_when_durable(self, call: Call, result: PutResult, answer: RemotingCommand, *,
                            wait: bool) -> RemotingCommand | None:
        """``answer`` now, or None and ``call.send(answer)`` once ``result`` is fsynced."""

    def notify_consumer_ids_changed(self, notice: Notice) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED to the channels of ``notice``."""


Handler = Callable[[BrokerContext, Call], Optional[RemotingCommand]]
