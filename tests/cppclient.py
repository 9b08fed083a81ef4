"""Test harness driving the independent C++ RocketMQ client (PyPI ``rocketmq==0.4.4``).

It calls ``librocketmq.so`` through its own ``ctypes.CDLL`` (the package's ``rocketmq.ffi``
prototypes stay untouched) to avoid the traps of the package's own wrapper: bodies are sent with ``SetByteMessageBody`` and read
as the pre-C++11 copy-on-write ``std::string`` they are (length 24 bytes before the characters);
properties are read by walking the message's ``std::map`` (libstdc++ red-black tree); push
callbacks answer CONSUME_SUCCESS (0) / RECONSUME_LATER (1) themselves; pulls are single
``Pull`` calls; the pull consumer's instance name goes through ``MQClient::setInstanceName``
(no C setter exists). Call :func:`isolate_home` before the first client so the client's log
(``$HOME/logs/rocketmq-cpp``) and broadcasting offsets stay out of the real home.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import tempfile
import threading
import time
from ctypes import POINTER, Structure, byref, c_char, c_char_p, c_int, c_int64, c_longlong, c_void_p
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import IntEnum
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple, TypeVar

import rocketmq

LIB_PATH = os.path.join(os.path.dirname(rocketmq.__file__), "librocketmq.so")
lib = ctypes.CDLL(LIB_PATH)
_std = ctypes.CDLL("libstdc++.so.6")  # already loaded as a dependency of librocketmq


class _CSendResult(Structure):
    _fields_ = [("sendStatus", c_int), ("msgId", c_char * 256), ("offset", c_longlong)]


class _CMessageQueue(Structure):
    _fields_ = [("topic", c_char * 512), ("brokerName", c_char * 256), ("queueId", c_int)]


class _CPullResult(Structure):
    _fields_ = [("pullStatus", c_int), ("nextBeginOffset", c_longlong), ("minOffset", c_longlong),
                ("maxOffset", c_longlong), ("msgFoundList", POINTER(c_void_p)), ("size", c_int),
                ("pData", c_void_p)]


MSG_CALLBACK_FUNC = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p)  # (consumer, CMessageExt*) -> status
QUEUE_SELECTOR_CALLBACK = ctypes.CFUNCTYPE(c_int, c_int, c_void_p, c_void_p)  # (size, msg, arg) -> index

_P, _S, _I = c_void_p, c_char_p, c_int
_PROTOTYPES: dict[str, tuple[list, object]] = {
    # messages (a CMessage is a rocketmq::MQMessage*, a CMessageExt a MQMessageExt*; getters work on both)
    "CreateMessage": ([_S], _P), "DestroyMessage": ([_P], _I), "SetMessageTags": ([_P, _S], _I),
    "SetMessageKeys": ([_P, _S], _I), "SetByteMessageBody": ([_P, _S, _I], _I),
    "SetMessageProperty": ([_P, _S, _S], _I), "SetDelayTimeLevel": ([_P, _I], _I),
    "GetMessageTopic": ([_P], _P), "GetMessageTags": ([_P], _P), "GetMessageKeys": ([_P], _P),
    "GetMessageBody": ([_P], _P), "GetMessageId": ([_P], _P), "GetMessageProperty": ([_P, _S], _P),
    "GetMessageQueueId": ([_P], _I), "GetMessageReconsumeTimes": ([_P], _I),
    "GetMessageQueueOffset": ([_P], c_longlong), "GetMessageCommitLogOffset": ([_P], c_longlong),
    "GetMessageBornTimestamp": ([_P], c_longlong), "GetMessageStoreTimestamp": ([_P], c_longlong),
    "CreateBatchMessage": ([], _P), "AddMessage": ([_P, _P], _I), "DestroyBatchMessage": ([_P], _I),
    # producer
    "CreateProducer": ([_S], _P), "DestroyProducer": ([_P], _I), "StartProducer": ([_P], _I),
    "ShutdownProducer": ([_P], _I), "SetProducerNameServerAddress": ([_P, _S], _I),
    "SetProducerSendMsgTimeout": ([_P, _I], _I),
    "SendMessageSync": ([_P, _P, POINTER(_CSendResult)], _I), "SendMessageOneway": ([_P, _P], _I),
    "SendMessageOrderly": ([_P, _P, QUEUE_SELECTOR_CALLBACK, _P, _I, POINTER(_CSendResult)], _I),
    "SendBatchMessage": ([_P, _P, POINTER(_CSendResult)], _I),
    # push consumer
    "CreatePushConsumer": ([_S], _P), "StartPushConsumer": ([_P], _I),
    "ShutdownPushConsumer": ([_P], _I), "SetPushConsumerNameServerAddress": ([_P, _S], _I),
    "SetPushConsumerMessageModel": ([_P, _I], _I),
    "Subscribe": ([_P, _S, _S], _I), "RegisterMessageCallback": ([_P, MSG_CALLBACK_FUNC], _I),
    "RegisterMessageCallbackOrderly": ([_P, MSG_CALLBACK_FUNC], _I),
    # pull consumer
    "CreatePullConsumer": ([_S], _P), "DestroyPullConsumer": ([_P], _I), "StartPullConsumer": ([_P], _I),
    "ShutdownPullConsumer": ([_P], _I), "SetPullConsumerNameServerAddress": ([_P, _S], _I),
    "FetchSubscriptionMessageQueues": ([_P, _S, POINTER(POINTER(_CMessageQueue)), POINTER(c_int)], _I),
    "ReleaseSubscriptionMessageQueue": ([POINTER(_CMessageQueue)], _I),
    "Pull": ([_P, POINTER(_CMessageQueue), _S, c_longlong, _I], _CPullResult),
    "ReleasePullResult": ([_CPullResult], _I),
    "GetLatestErrorMessage": ([], _S),
    # C++ entry points (Itanium ABI, old-ABI COW std::string = one pointer)
    "_ZN8rocketmq8MQClient15setInstanceNameERKSs": ([_P, _P], None),  # (this, const string&)
    "_ZNK8rocketmq8MQClient15getInstanceNameEv": ([_P], _P),  # returns const string&
    "_ZNK8rocketmq8MQClient13getMQClientIdEv": ([_P, _P], None),  # (sret string*, this)
}
for _name, (_args, _res) in _PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.argtypes, _fn.restype = _args, _res
_string_ctor = _std._ZNSsC1EPKcRKSaIcE  # std::string::string(const char*, const allocator&)
_string_ctor.argtypes, _string_ctor.restype = [_P, _S, _P], None
_string_dtor = _std._ZNSsD1Ev
_string_dtor.argtypes, _string_dtor.restype = [_P], None

# Layout of rocketmq::MQMessage: std::map properties at +0x30 (root at +0x40, size at +0x58);
# a libstdc++ tree node is color, parent, left (+0x10), right (+0x18), key (+0x20), value (+0x28).
_PROPS_ROOT, _PROPS_COUNT, _NODE_LEFT, _NODE_RIGHT, _NODE_KEY, _NODE_VALUE = 0x40, 0x58, 0x10, 0x18, 0x20, 0x28


class CppClientError(RuntimeError):
    """A C API call returned a non-zero status."""


class SendStatus(IntEnum):
    OK, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE = range(4)


class PullStatus(IntEnum):  # BROKER_TIMEOUT also means: broker unknown or unreachable
    FOUND, NO_NEW_MSG, NO_MATCHED_MSG, OFFSET_ILLEGAL, BROKER_TIMEOUT = range(5)


class SendResult(NamedTuple):
    msg_id: str  # the UNIQ_KEY; empty for batches
    offset: int  # queue offset reported by the broker
    status: SendStatus


@dataclass(frozen=True)
class ReceivedMessage:
    topic: str
    tags: str
    keys: str
    body: bytes
    msg_id: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    reconsume_times: int
    born_timestamp: int
    store_timestamp: int
    properties: dict[str, str] = field(default_factory=dict)
    accepted: bool = True  # False when the push callback answered RECONSUME_LATER


class MessageQueue(NamedTuple):
    topic: str
    broker_name: str
    queue_id: int


class PullResult(NamedTuple):
    status: PullStatus
    next_offset: int
    messages: list[ReceivedMessage]


def read_cow_string(chars: int | None) -> bytes:
    """Bytes of a pre-C++11 ``std::string`` given its character pointer (length at ``p - 24``)."""
    if not chars:
        return b""
    return ctypes.string_at(chars, c_int64.from_address(chars - 24).value)


def _string_at_object(address: int) -> bytes:
    """Bytes of the ``std::string`` object stored at ``address`` (one pointer to the characters)."""
    return read_cow_string(c_void_p.from_address(address).value)


@contextmanager
def cpp_string(value: bytes) -> Iterator[c_void_p]:
    """A temporary ``std::string`` object (pass it by reference to C++ ``const string&`` parameters)."""
    text, alloc = c_void_p(), c_char()
    _string_ctor(byref(text), value, byref(alloc))
    try:
        yield text
    finally:
        _string_dtor(byref(text))


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _call(name: str, *args: object) -> None:
    """Call a C API function returning a status; raise :class:`CppClientError` unless it is 0 (OK)."""
    status = getattr(lib, name)(*args)
    if status != 0:
        detail = (lib.GetLatestErrorMessage() or b"").decode("utf-8", "replace")
        raise CppClientError(f"{name} failed with status {status}: {detail}")


_home: Path | None = None


def isolate_home(directory: str | Path | None = None) -> Path:
    """Point ``HOME`` at ``directory`` (a fresh temp dir if None) for the rest of the process.

    The C++ client opens its log under ``$HOME/logs/rocketmq-cpp`` when the first client is
    created, and keeps broadcasting offsets under ``$HOME/.rocketmq_offsets``; call this first.
    Later calls return the directory chosen by the first one.
    """
    global _home
    if _home is None:
        _home = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="rmq-cpp-home-"))
        _home.mkdir(parents=True, exist_ok=True)
        os.environ["HOME"] = str(_home)
    return _home


_instance_counter = itertools.count(1)


def unique_instance_name(prefix: str = "cpp") -> str:
    """An instance name unique in this process and across concurrent test processes."""
    return f"{prefix}-{os.getpid()}-{next(_instance_counter)}"


def message_properties(message: int) -> dict[str, str]:
    """All properties of a ``CMessage``/``CMessageExt`` handle (including TAGS, KEYS, UNIQ_KEY...)."""
    out: dict[str, str] = {}
    stack: list[int] = []
    node = c_void_p.from_address(message + _PROPS_ROOT).value
    while stack or node:  # in-order walk of the red-black tree
        while node:
            stack.append(node)
            node = c_void_p.from_address(node + _NODE_LEFT).value
        node = stack.pop()
        out[_text(_string_at_object(node + _NODE_KEY))] = _text(_string_at_object(node + _NODE_VALUE))
        node = c_void_p.from_address(node + _NODE_RIGHT).value
    expected = c_int64.from_address(message + _PROPS_COUNT).value
    if len(out) != expected:
        raise CppClientError(f"property map walk found {len(out)} entries, map size is {expected}")
    return out


def read_body(message: int) -> bytes:
    """The body of a ``CMessage``/``CMessageExt`` handle, byte for byte (NUL bytes included)."""
    return read_cow_string(lib.GetMessageBody(message))


def read_message(message: int) -> ReceivedMessage:
    """Copy a *received* message (``CMessageExt``: valid only in the callback / before release).

    Do not use it on a ``CreateMessage`` handle: ``GetMessageId`` and the offset getters read
    ``MQMessageExt`` fields a plain ``MQMessage`` does not have.
    """
    def text(getter: Callable[[int], int | None]) -> str:
        return _text(read_cow_string(getter(message)))

    return ReceivedMessage(
        topic=text(lib.GetMessageTopic), tags=text(lib.GetMessageTags), keys=text(lib.GetMessageKeys),
        body=read_body(message), msg_id=text(lib.GetMessageId), queue_id=lib.GetMessageQueueId(message),
        queue_offset=lib.GetMessageQueueOffset(message), commit_log_offset=lib.GetMessageCommitLogOffset(message),
        reconsume_times=lib.GetMessageReconsumeTimes(message), born_timestamp=lib.GetMessageBornTimestamp(message),
        store_timestamp=lib.GetMessageStoreTimestamp(message), properties=message_properties(message))


@contextmanager
def create_message(topic: str, body: bytes, tags: str | None = None, keys: str | Iterable[str] | None = None,
                   properties: dict[str, str] | None = None, delay_level: int | None = None) -> Iterator[int]:
    """A ``CMessage`` handle (destroyed on exit) with a binary-safe body; keys are joined by spaces."""
    handle = lib.CreateMessage(topic.encode())
    if not handle:
        raise CppClientError("CreateMessage returned NULL")
    try:
        _call("SetByteMessageBody", handle, body, len(body))
        if tags is not None:
            _call("SetMessageTags", handle, tags.encode())
        if keys is not None:
            _call("SetMessageKeys", handle, (keys if isinstance(keys, str) else " ".join(keys)).encode())
        for key, value in (properties or {}).items():
            _call("SetMessageProperty", handle, key.encode(), value.encode())
        if delay_level is not None:
            _call("SetDelayTimeLevel", handle, delay_level)
        yield handle
    finally:
        lib.DestroyMessage(handle)


_C = TypeVar("_C", bound="_Client")


class _Client:
    """Creation, unique instance name, idempotent ``start()``/``shutdown()``, context manager."""

    _kind: str  # "Producer", "PushConsumer" or "PullConsumer", as in the C function names
    running: "set[_Client]" = set()     # started and not shut down (see tests/conftest.py)

    def __init__(self, namesrv: str, group: str, instance: str | None = None) -> None:
        self.instance = instance or unique_instance_name(f"cpp-{self._kind.lower()}")
        self._started = False
        self._handle: int = getattr(lib, f"Create{self._kind}")(group.encode()) or 0
        if not self._handle:
            raise CppClientError(f"Create{self._kind} returned NULL")
        _call(f"Set{self._kind}NameServerAddress", self._handle, namesrv.encode())
        # MQClient::setInstanceName is what Set{Producer,PushConsumer}InstanceName call; the pull
        # consumer has no C setter, so all three go through the C++ method.
        with cpp_string(self.instance.encode()) as name:
            lib._ZN8rocketmq8MQClient15setInstanceNameERKSs(self._handle, byref(name))

    @property
    def _live(self) -> int:
        if not self._handle:
            raise CppClientError(f"{self.instance} was shut down; the C++ client cannot be used or restarted")
        return self._handle

    @property
    def instance_name(self) -> str:
        """The instance name as the C++ client holds it."""
        return _text(_string_at_object(lib._ZNK8rocketmq8MQClient15getInstanceNameEv(self._live)))

    @property
    def client_id(self) -> str:
        """``pid-ip@instance``: the id this client reports to the broker (heartbeats, consumer lists)."""
        buf = c_void_p()
        lib._ZNK8rocketmq8MQClient13getMQClientIdEv(byref(buf), self._live)
        try:
            return _text(_string_at_object(ctypes.addressof(buf)))
        finally:
            _string_dtor(byref(buf))

    def start(self) -> None:
        if not self._started:
            _call(f"Start{self._kind}", self._live)
            self._started = True
            _Client.running.add(self)

    def shutdown(self) -> None:
        """Shut down (if started) and free the C++ object; the client is unusable afterwards."""
        if not self._handle:
            return
        _Client.running.discard(self)
        try:
            if self._started:
                self._started = False
                _call(f"Shutdown{self._kind}", self._handle)
        finally:
            self._destroy()
            self._handle = 0

    def _destroy(self) -> None:
        _call(f"Destroy{self._kind}", self._handle)

    def __enter__(self: _C) -> _C:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class CppProducer(_Client):
    """``DefaultMQProducer``. Failed sends raise :class:`CppClientError` (3 attempts, then an error)."""

    _kind = "Producer"

    def __init__(self, namesrv: str, group: str, instance: str | None = None,
                 send_timeout_ms: int | None = None) -> None:
        super().__init__(namesrv, group, instance)
        if send_timeout_ms is not None:
            _call("SetProducerSendMsgTimeout", self._handle, send_timeout_ms)

    def send(self, topic: str, body: bytes, tags: str | None = None, keys: str | Iterable[str] | None = None,
             properties: dict[str, str] | None = None, delay_level: int | None = None) -> SendResult:
        """Synchronous send."""
        result = _CSendResult()
        with create_message(topic, body, tags, keys, properties, delay_level) as msg:
            _call("SendMessageSync", self._live, msg, byref(result))
        return _send_result(result)

    def send_orderly(self, topic: str, body: bytes, sharding_arg: int, tags: str | None = None,
                     keys: str | Iterable[str] | None = None, properties: dict[str, str] | None = None,
                     retry_times: int = 3) -> SendResult:
        """Send to queue ``sharding_arg % queue_count`` (Python modulo: never negative)."""
        selector = QUEUE_SELECTOR_CALLBACK(lambda size, _msg, arg: c_int.from_address(arg).value % size)
        arg, result = c_int(sharding_arg), _CSendResult()
        with create_message(topic, body, tags, keys, properties) as msg:
            _call("SendMessageOrderly", self._live, msg, selector, ctypes.addressof(arg), retry_times,
                  byref(result))
        return _send_result(result)

    def send_oneway(self, topic: str, body: bytes, tags: str | None = None,
                    keys: str | Iterable[str] | None = None, properties: dict[str, str] | None = None) -> None:
        """Oneway send: no result (on the wire an ordinary SEND_MESSAGE with flag 0)."""
        with create_message(topic, body, tags, keys, properties) as msg:
            _call("SendMessageOneway", self._live, msg)

    def send_batch(self, topic: str, bodies: Iterable[bytes], tags: str | None = None,
                   keys: str | Iterable[str] | None = None,
                   properties: dict[str, str] | None = None) -> SendResult:
        """One SEND_MESSAGE with ``batch`` "1" (README quirks 1-2); the result's msg_id is empty."""
        batch, result = lib.CreateBatchMessage(), _CSendResult()
        if not batch:
            raise CppClientError("CreateBatchMessage returned NULL")
        try:
            for body in bodies:
                with create_message(topic, body, tags, keys, properties) as msg:
                    _call("AddMessage", batch, msg)  # copies the message
            _call("SendBatchMessage", self._live, batch, byref(result))
        finally:
            lib.DestroyBatchMessage(batch)
        return _send_result(result)


def _send_result(result: _CSendResult) -> SendResult:
    return SendResult(result.msgId.decode(), result.offset, SendStatus(result.sendStatus))


_RETIRED: list[object] = []  # callbacks of shut-down push consumers, which C++ may still reference


class CppPushConsumer(_Client):
    """``DefaultMQPushConsumer`` collecting every delivery into a thread-safe list.

    ``reconsume_later(msg)`` returning True makes the callback answer RECONSUME_LATER for that
    delivery (recorded with ``accepted=False``); an exception in it is recorded, answers
    RECONSUME_LATER and is re-raised by :meth:`wait_for`. The C++ client applies RECONSUME_LATER
    to the whole pulled batch and stops calling back for the rest of it; new groups start at the
    last offset (README, "Flows" and quirk 8).
    """

    _kind = "PushConsumer"

    def __init__(self, namesrv: str, group: str, topic: str, expression: str = "*", orderly: bool = False,
                 broadcasting: bool = False, instance: str | None = None,
                 reconsume_later: Callable[[ReceivedMessage], bool] | None = None) -> None:
        super().__init__(namesrv, group, instance)
        self.orderly = orderly
        self._reconsume_later = reconsume_later
        self._messages: list[ReceivedMessage] = []
        self._errors: list[BaseException] = []
        self._cond = threading.Condition()
        self._callback = MSG_CALLBACK_FUNC(self._on_message)  # referenced as long as C may call it
        _call("SetPushConsumerMessageModel", self._handle, 0 if broadcasting else 1)
        _call("Subscribe", self._handle, topic.encode(), expression.encode())
        _call("RegisterMessageCallbackOrderly" if orderly else "RegisterMessageCallback",
              self._handle, self._callback)

    def _on_message(self, _consumer: int, message: int) -> int:
        try:
            received = read_message(message)
            later = bool(self._reconsume_later and self._reconsume_later(received))
            with self._cond:
                self._messages.append(replace(received, accepted=False) if later else received)
                self._cond.notify_all()
            return 1 if later else 0
        except BaseException as exc:  # never let an exception cross into C
            with self._cond:
                self._errors.append(exc)
                self._cond.notify_all()
            return 1

    def _destroy(self) -> None:
        # Not destroyed: ShutdownPushConsumer leaves the consume pool's threads waiting on its
        # io_service, and ~DefaultMQPushConsumer then hangs in pthread_cond_destroy (seen every few
        # consumers). The C++ object and this callback are kept alive for the rest of the process.
        _RETIRED.append(self._callback)

    @property
    def messages(self) -> list[ReceivedMessage]:
        """A snapshot of all deliveries so far, in arrival order."""
        with self._cond:
            return list(self._messages)

    def wait_for(self, count: int, timeout: float = 30.0,
                 predicate: Callable[[ReceivedMessage], bool] | None = None) -> list[ReceivedMessage]:
        """Wait until ``count`` deliveries (matching ``predicate`` if given) are collected; return them.

        Raises ``TimeoutError`` (saying what did arrive) or a :class:`CppClientError` from the
        first callback error.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if self._errors:
                    raise CppClientError("push consumer callback failed") from self._errors[0]
                matching = [m for m in self._messages if predicate is None or predicate(m)]
                if len(matching) >= count:
                    return matching
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{self.instance}: {len(matching)}/{count} matching messages after "
                                       f"{timeout}s ({len(self._messages)} delivered)")
                self._cond.wait(remaining)


class CppPullConsumer(_Client):
    """``DefaultMQPullConsumer``: each :meth:`pull` is exactly one ``Pull`` call (no retry loop)."""

    _kind = "PullConsumer"  # CppPullConsumer(namesrv, group, instance=None)

    def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's queues from the name server (empty if it has no route or is unreachable)."""
        array, size = POINTER(_CMessageQueue)(), c_int()
        _call("FetchSubscriptionMessageQueues", self._live, topic.encode(), byref(array), byref(size))
        if not array:
            return []
        try:
            return [MessageQueue(array[i].topic.decode(), array[i].brokerName.decode(), array[i].queueId)
                    for i in range(size.value)]
        finally:
            lib.ReleaseSubscriptionMessageQueue(array)

    def pull(self, queue: MessageQueue, expression: str = "*", offset: int = 0, max_nums: int = 32) -> PullResult:
        """One PULL_MESSAGE, answered at once. An unknown or unreachable broker gives BROKER_TIMEOUT."""
        cqueue = _CMessageQueue(queue.topic.encode(), queue.broker_name.encode(), queue.queue_id)
        result = lib.Pull(self._live, byref(cqueue), expression.encode(), offset, max_nums)
        try:
            messages = [read_message(result.msgFoundList[i]) for i in range(result.size)]
        finally:
            if result.size and result.msgFoundList:
                lib.ReleasePullResult(result)  # frees the C++ PullResult the messages live in
        return PullResult(PullStatus(result.pullStatus), result.nextBeginOffset, messages)
