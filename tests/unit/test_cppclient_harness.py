"""The C++ client harness (tests/cppclient.py) without a broker.

Covers: the declared prototypes against the library, binary bodies and properties through the
copy-on-write string / map tricks (on a created MQMessage and on an in-place MQMessageExt, the
type consumers receive), the push callback through its C thunk, and create/start/shutdown of
every client against a name server address where nothing listens.
"""

from __future__ import annotations

import ctypes
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests import cppclient
from tests.cppclient import (
    CppClientError, CppProducer, CppPullConsumer, CppPushConsumer, MessageQueue, PullStatus, ReceivedMessage, lib,
)

NO_SERVER = "127.0.0.1:1"  # nothing listens there: connections are refused at once
BINARY = b"\x00head\x00\xff\xfe mid \x00" + bytes(range(256)) + b"\x00"


@pytest.fixture(scope="module", autouse=True)
def _home(tmp_path_factory: pytest.TempPathFactory) -> None:
    cppclient.isolate_home(tmp_path_factory.mktemp("cpp-home"))


def _cpp(name: str, argtypes: list, restype: object = None):
    fn = getattr(ctypes.CDLL(cppclient.LIB_PATH), name)  # own CDLL object: harness prototypes stay as they are
    fn.argtypes, fn.restype = argtypes, restype
    return fn


@contextmanager
def message_ext(topic: str, body: bytes, tags: str, msg_id: str, reconsume_times: int = 0) -> Iterator[int]:
    """A rocketmq::MQMessageExt (sizeof 0xc8) constructed in place, as a consumer would receive it."""
    P, I, L = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    storage = (ctypes.c_int64 * 64)()  # 512 bytes, 8-aligned
    ext = ctypes.addressof(storage)
    _cpp("_ZN8rocketmq12MQMessageExtC1Ev", [P])(ext)
    try:
        _cpp("SetMessageTopic", [P, ctypes.c_char_p], I)(ext, topic.encode())
        assert lib.SetByteMessageBody(ext, body, len(body)) == 0
        assert lib.SetMessageTags(ext, tags.encode()) == 0 and lib.SetMessageKeys(ext, b"key") == 0
        assert lib.SetMessageProperty(ext, b"UNIQ_KEY", msg_id.encode()) == 0
        with cppclient.cpp_string(msg_id.encode()) as text:
            _cpp("_ZN8rocketmq12MQMessageExt8setMsgIdERKSs", [P, P])(ext, ctypes.byref(text))
        _cpp("_ZN8rocketmq12MQMessageExt10setQueueIdEi", [P, I])(ext, 3)
        _cpp("_ZN8rocketmq12MQMessageExt14setQueueOffsetEx", [P, L])(ext, 41)
        _cpp("_ZN8rocketmq12MQMessageExt18setCommitLogOffsetEx", [P, L])(ext, 123456789012)
        _cpp("_ZN8rocketmq12MQMessageExt17setReconsumeTimesEi", [P, I])(ext, reconsume_times)
        _cpp("_ZN8rocketmq12MQMessageExt16setBornTimestampEx", [P, L])(ext, 1700000000001)
        _cpp("_ZN8rocketmq12MQMessageExt17setStoreTimestampEx", [P, L])(ext, 1700000000002)
        yield ext
    finally:
        _cpp("_ZN8rocketmq12MQMessageExtD1Ev", [P])(ext)


def test_declared_functions_are_exported_by_the_library() -> None:
    out = subprocess.run(["nm", "-D", "--defined-only", cppclient.LIB_PATH],
                         capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines()}
    assert not set(cppclient._PROTOTYPES) - exported


def test_prototypes_agree_with_the_packages_own_ffi() -> None:
    """Same arity and argument/result sizes as rocketmq.ffi (which uses enums where we use c_int)."""
    from rocketmq import ffi

    def size(t: object) -> int:
        return 4 if isinstance(t, type) and issubclass(t, ffi.CtypesEnum) else ctypes.sizeof(t)

    compared = 0
    for name, (argtypes, restype) in cppclient._PROTOTYPES.items():
        theirs = getattr(ffi.dll, name)
        if name.startswith("_Z") or theirs.argtypes is None:
            continue
        assert [size(t) for t in argtypes] == [size(t) for t in theirs.argtypes], name
        assert size(restype) == size(theirs.restype), name
        compared += 1
    assert compared >= 50


def test_created_message_binary_body_and_properties_roundtrip() -> None:
    with cppclient.create_message("TopicBin", BINARY, tags="TagA", keys=["k1", "k2"],
                                  properties={"zeta": "1", "alpha": "v\u00e9", "empty": ""}, delay_level=3) as handle:
        assert cppclient.read_body(handle) == BINARY
        properties = cppclient.message_properties(handle)
        assert properties == {"alpha": "v\u00e9", "empty": "", "zeta": "1", "TAGS": "TagA", "KEYS": "k1 k2",
                              "DELAY": "3", "WAIT": "true"}
        for key, value in properties.items():  # the tree walk agrees with the C getter
            assert cppclient.read_cow_string(lib.GetMessageProperty(handle, key.encode())) == value.encode()
        for getter, expected in ((lib.GetMessageTopic, b"TopicBin"), (lib.GetMessageTags, b"TagA"),
                                 (lib.GetMessageKeys, b"k1 k2")):
            assert cppclient.read_cow_string(getter(handle)) == expected


def test_empty_body_reads_back_empty() -> None:
    with cppclient.create_message("TopicBin", b"") as handle:
        assert cppclient.read_body(handle) == b""
        assert cppclient.message_properties(handle) == {"WAIT": "true"}


def test_read_message_on_a_real_mqmessageext() -> None:
    with message_ext("TopicExt", BINARY, "TagB", "MSGID-1", reconsume_times=2) as ext:
        assert cppclient.read_message(ext) == ReceivedMessage(
            topic="TopicExt", tags="TagB", keys="key", body=BINARY, msg_id="MSGID-1", queue_id=3, queue_offset=41,
            commit_log_offset=123456789012, reconsume_times=2, born_timestamp=1700000000001,
            store_timestamp=1700000000002,
            properties={"TAGS": "TagB", "KEYS": "key", "UNIQ_KEY": "MSGID-1", "WAIT": "true"}, accepted=True)


def test_push_callback_statuses_and_wait_for() -> None:
    consumer = CppPushConsumer(NO_SERVER, "harness-callback", "TopicExt",
                               reconsume_later=lambda m: m.body == b"later")
    try:
        waiter: list[list[ReceivedMessage]] = []
        thread = threading.Thread(target=lambda: waiter.append(consumer.wait_for(2, timeout=10)))
        thread.start()
        with message_ext("TopicExt", b"later", "T", "ID-1") as first, message_ext("TopicExt", BINARY, "T", "ID-2") as ok:
            assert consumer._callback(None, first) == 1  # RECONSUME_LATER, through the C thunk
            assert consumer._callback(None, ok) == 0  # CONSUME_SUCCESS
        thread.join(10)
        assert [(m.msg_id, m.body, m.accepted) for m in waiter[0]] == [("ID-1", b"later", False), ("ID-2", BINARY, True)]
        accepted = consumer.wait_for(1, timeout=0, predicate=lambda m: m.accepted)
        assert [m.msg_id for m in accepted] == ["ID-2"]
        with pytest.raises(TimeoutError, match="2/3"):
            consumer.wait_for(3, timeout=0.1)
        assert consumer._callback(None, None) == 1  # an error in the callback: RECONSUME_LATER, then raised
        with pytest.raises(CppClientError, match="callback failed"):
            consumer.wait_for(1, timeout=0)
    finally:
        consumer.shutdown()


def test_producer_lifecycle_and_send_failures_without_server() -> None:
    with CppProducer(NO_SERVER, "harness-producer") as a, CppProducer(NO_SERVER, "harness-producer") as b:
        assert a.instance != b.instance  # same group twice in one process needs two instance names
        assert a.instance_name == a.instance
        assert a.client_id.endswith("@" + a.instance)
        with pytest.raises(CppClientError, match="No route info"):
            a.send("TopicX", b"a\x00b")
        with pytest.raises(CppClientError):
            a.send_oneway("TopicX", b"x")
        with pytest.raises(CppClientError):
            a.send_orderly("TopicX", b"x", sharding_arg=7)
        with pytest.raises(CppClientError):
            a.send_batch("TopicX", [b"1", b"2"])
    for use in (a.start, lambda: a.send("TopicX", b"x"), lambda: a.instance_name):
        with pytest.raises(CppClientError, match="shut down"):
            use()


@pytest.mark.parametrize("orderly,broadcasting", [(False, False), (True, False), (False, True)])
def test_push_consumer_lifecycle_without_server(orderly: bool, broadcasting: bool) -> None:
    group = f"harness-push-{orderly}-{broadcasting}"
    with CppPushConsumer(NO_SERVER, group, "TopicX", "TagA || TagB", orderly=orderly,
                         broadcasting=broadcasting) as a, CppPushConsumer(NO_SERVER, group, "TopicX") as b:
        assert a.instance_name == a.instance and b.instance_name == b.instance
        assert a.messages == []
        with pytest.raises(TimeoutError, match="0/1"):
            a.wait_for(1, timeout=0.2)


def test_pull_consumer_lifecycle_without_server() -> None:
    with CppPullConsumer(NO_SERVER, "harness-pull") as a, CppPullConsumer(NO_SERVER, "harness-pull") as b:
        assert a.instance_name == a.instance and b.instance_name == b.instance  # set through the C++ API
        assert a.queues("TopicX") == []
        result = a.pull(MessageQueue("TopicX", "broker-a", 0), "*", 0, 32)
        assert result.status is PullStatus.BROKER_TIMEOUT and result.messages == []
    with pytest.raises(CppClientError, match="shut down"):
        a.pull(MessageQueue("TopicX", "broker-a", 0))


def test_client_never_started_can_be_shut_down() -> None:
    for client in (CppProducer(NO_SERVER, "harness-idle"), CppPullConsumer(NO_SERVER, "harness-idle"),
                   CppPushConsumer(NO_SERVER, "harness-idle", "TopicX")):
        client.shutdown()
        client.shutdown()
        with pytest.raises(CppClientError, match="shut down"):
            client.client_id
