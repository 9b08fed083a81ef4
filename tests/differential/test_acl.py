"""ACL: the recorded acl_* exchanges, the plain_acl.yml rules, and MQClient end to end.

The signed requests the Apache broker accepted are reproduced by ``tests/client/test_acl.py``;
here the ones it refused are, then every recorded acl_* request frame is sent unchanged
(in recorded order) to an embedded cluster started with the README's plain_acl.yml: the
refusals must come back byte for byte, remark included, the accepted ones with code 0.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Iterator

import pytest

from rocketmq_spark.client.acl import Signer, signature, signed_ext
from rocketmq_spark.client.config import ClientConfig
from rocketmq_spark.client.mqclient import MQClient
from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.embedded.acl import AclConfig, AclValidator, WhiteAddress, check_permission, PUB, SUB, DENY
from rocketmq_spark.embedded.cli import main as broker_main
from rocketmq_spark.embedded.processors.base import Refuse
from rocketmq_spark.errors import BrokerError, ConfigError
from rocketmq_spark.remoting import command
from rocketmq_spark.remoting.bodies import ConsumerData, SubscriptionData
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import Message, PullStatus
from tests.differential.replay import ACL_RUN, ACL_SECRET, Conn, plain_acl_yml
from tests.embedded.test_durability import broker_addr, start_broker
from tests.embedded.wire import Wire, req
from tests.vectors import apache_vectors

V = apache_vectors()
ACL = sorted((n for n, v in V.items() if v["run_id"] == ACL_RUN), key=lambda n: V[n]["request"]["header"]["opaque"])
KEY = "rocketmq2"


def recorded_request(name: str) -> tuple[bytes, RemotingCommand]:
    frame = bytes.fromhex(V[name]["request"]["frame_hex"])
    return frame, command.decode(frame)[0]


def reason(remark: str) -> str:
    """``AclException: <reason>, <frame>`` -> reason."""
    head, _, rest = remark.partition(": ")
    assert head == "org.apache.rocketmq.acl.common.AclException", remark
    return rest.rsplit(", ", 1)[0]


# ---------------------------------------------------------------- the recorded frames

def _unsigned(recorded: RemotingCommand) -> dict[str, str] | None:
    ext = {k: v for k, v in recorded.ext.items() if k not in ("AccessKey", "Signature")}
    return ext or None


@pytest.mark.parametrize("name", ["acl_admin_op_denied", "acl_unknown_access_key"])
def test_signer_reproduces_refused_but_well_signed_frames(name: str) -> None:
    frame, recorded = recorded_request(name)
    unsigned = RemotingCommand(code=recorded.code, opaque=recorded.opaque, ext_fields=_unsigned(recorded),
                               body=recorded.body, language="JAVA", version=409)
    assert command.encode(Signer(recorded.ext["AccessKey"], ACL_SECRET)(unsigned)) == frame


def test_signature_without_the_body_is_reproduced_byte_for_byte() -> None:
    frame, recorded = recorded_request("acl_signature_without_body")
    ext = signed_ext(_unsigned(recorded), b"", KEY, ACL_SECRET)  # the mistake: body left out
    again = RemotingCommand(code=recorded.code, opaque=recorded.opaque, ext_fields=ext, body=recorded.body,
                            language="JAVA", version=409)
    assert command.encode(again) == frame
    assert ext["Signature"] != signature(ext, recorded.body, ACL_SECRET)


def test_wrong_signature_frame_differs_from_ours_only_in_the_signature() -> None:
    frame, recorded = recorded_request("acl_wrong_signature")
    ours = Signer(KEY, ACL_SECRET)(RemotingCommand(code=recorded.code, opaque=recorded.opaque,
                                                   ext_fields=_unsigned(recorded), body=recorded.body,
                                                   language="JAVA", version=409))
    assert ours.ext["Signature"] != recorded.ext["Signature"]
    wrong = dict(ours.ext, Signature=recorded.ext["Signature"])
    assert command.encode(RemotingCommand(code=ours.code, opaque=ours.opaque, ext_fields=wrong, body=ours.body,
                                          language="JAVA", version=409)) == frame


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    root = tmp_path_factory.mktemp("acl-golden")
    (root / "plain_acl.yml").write_text(plain_acl_yml())
    with EmbeddedCluster(root / "data", acl_file=str(root / "plain_acl.yml")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def acl_answers(acl_cluster: EmbeddedCluster) -> dict[str, bytes | None]:
    """Every acl_* request frame, unchanged, in recorded order; our answer frames."""
    conns = {"broker": Conn(acl_cluster.brokers["broker-a"].addr), "namesrv": Conn(acl_cluster.namesrv_addr)}
    out: dict[str, bytes | None] = {}
    try:
        for name in ACL:
            conn = conns[V[name]["server"]]
            conn.send(bytes.fromhex(V[name]["request"]["frame_hex"]))
            got = conn.answer(V[name]["request"]["header"]["opaque"], 10.0)
            out[name] = got[0] if got else None
    finally:
        for c in conns.values():
            c.close()
    return out


REFUSED = [n for n in ACL if V[n]["response"]["code"] != 0]
ACCEPTED = [n for n in ACL if V[n]["response"]["code"] == 0]


def test_the_recordings_cover_every_refusal_reason() -> None:
    reasons = {reason(V[n]["response"]["remark"]) for n in REFUSED}
    assert reasons == {"No accessKey is configured", "No acl config for nosuchkey",
                       "Check signature failed for accessKey=rocketmq2",
                       "Need admin permission for request code=17, but accessKey=rocketmq2 is not"}


@pytest.mark.parametrize("name", REFUSED)
def test_refusals_match_the_recording_byte_for_byte(name: str, acl_answers: dict[str, bytes | None]) -> None:
    ours = acl_answers[name]
    assert ours is not None, f"{name}: no answer"
    answer = command.decode(ours)[0]
    assert (answer.code, answer.ext_fields) == (ResponseCode.SYSTEM_ERROR, None)
    assert reason(answer.remark or "") == reason(V[name]["response"]["remark"])
    assert ours == bytes.fromhex(V[name]["response"]["frame_hex"])


@pytest.mark.parametrize("name", ACCEPTED)
def test_accepted_requests_succeed(name: str, acl_answers: dict[str, bytes | None]) -> None:
    ours = acl_answers[name]
    assert ours is not None
    answer = command.decode(ours)[0]
    recorded = V[name]["response"]
    assert answer.code == recorded["code"] == 0
    assert (answer.ext_fields is None) == (recorded["extFields"] is None)
    assert answer.remark == recorded["remark"]


def test_the_nameserver_does_no_acl_check(acl_answers: dict[str, bytes | None]) -> None:
    ours = acl_answers["acl_namesrv_route_unsigned"]
    assert ours is not None and command.decode(ours)[0].code == 0


# ---------------------------------------------------------------- MQClient end to end

ACL_YML = """\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms: [closed=DENY, readonly=SUB]
    groupPerms: [banned=DENY]
"""


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    root = tmp_path_factory.mktemp("acl-e2e")
    (root / "acl.yml").write_text(ACL_YML)
    with EmbeddedCluster(root / "data", acl_file=str(root / "acl.yml"),
                         topics={"open": 2, "closed": 1, "readonly": 1}) as cluster:
        yield cluster


def client(cluster: EmbeddedCluster, access_key: str | None = None, secret_key: str | None = None) -> MQClient:
    return MQClient(ClientConfig((cluster.namesrv_addr,), access_key=access_key, secret_key=secret_key,
                                 client_id="127.0.0.1@acl-test", request_timeout=5.0))


def test_right_keys_send_pull_and_heartbeat(e2e: EmbeddedCluster) -> None:
    with client(e2e, KEY, ACL_SECRET) as c:
        mq = MessageQueue("open", "broker-a", 0)
        sent = c.send(Message("open", b"signed", tags="T"), queue=mq)
        assert sent.status == "SEND_OK"
        pulled = c.pull(mq, 0, group="g1")
        assert pulled.status is PullStatus.FOUND and [m.body for m in pulled.messages] == [b"signed"]
        c.heartbeat(consumers=[ConsumerData("g1", subscriptions=(SubscriptionData("open", "*"),))])
        assert list(e2e.brokers["broker-a"].clients.consumer_ids("g1")) == ["127.0.0.1@acl-test"]
        c.update_consumer_offset("g1", mq, 1)
        assert c.query_consumer_offset("g1", mq) == 1


@pytest.mark.parametrize("keys,expected", [
    ((KEY, "wrong-secret"), "Check signature failed for accessKey=rocketmq2"),
    (("nosuchkey", ACL_SECRET), "No acl config for nosuchkey"),
    ((None, None), "No accessKey is configured"),
])
def test_bad_credentials_fail_with_code_1_and_the_reason(e2e: EmbeddedCluster, keys: tuple, expected: str) -> None:
    mq = MessageQueue("open", "broker-a", 0)
    with client(e2e, *keys) as c:
        for call in (lambda: c.send(Message("open", b"x"), queue=mq), lambda: c.pull(mq, 0, group="g1"),
                     lambda: c.heartbeat(consumers=[ConsumerData("g1")])):
            with pytest.raises(BrokerError) as exc:
                call()
            assert exc.value.code == ResponseCode.SYSTEM_ERROR and reason(exc.value.remark or "") == expected
        assert c.route("open").queue_datas  # the NameServer still answers


@pytest.mark.parametrize("action,expected", [
    ("send closed", "No default permission for topic:closed"),
    ("pull closed", "No default permission for topic:closed"),
    ("send readonly", "No default permission for topic:readonly"),
    ("pull banned", "No default permission for group:banned"),
    ("create topic", "Need admin permission for request code=17, but accessKey=rocketmq2 is not"),
])
def test_permissions_per_topic_and_group(e2e: EmbeddedCluster, action: str, expected: str) -> None:
    with client(e2e, KEY, ACL_SECRET) as c:
        calls = {
            "send closed": lambda: c.send(Message("closed", b"x"), queue=MessageQueue("closed", "broker-a", 0)),
            "pull closed": lambda: c.pull(MessageQueue("closed", "broker-a", 0), 0, group="g1"),
            "send readonly": lambda: c.send(Message("readonly", b"x"), queue=MessageQueue("readonly", "broker-a", 0)),
            "pull banned": lambda: c.pull(MessageQueue("open", "broker-a", 0), 0, group="banned"),
            "create topic": lambda: c.create_topic("newtopic", queues=1),
        }
        with pytest.raises(BrokerError) as exc:
            calls[action]()
        assert exc.value.code == ResponseCode.SYSTEM_ERROR and reason(exc.value.remark or "") == expected


def test_a_read_only_topic_can_still_be_pulled(e2e: EmbeddedCluster) -> None:
    with client(e2e, KEY, ACL_SECRET) as c:
        result = c.pull(MessageQueue("readonly", "broker-a", 0), 0, group="g1")
        assert result.status is PullStatus.NO_NEW_MSG


# ---------------------------------------------------------------- the rules, without sockets

def _cmd(code: int, ext: dict[str, str] | None, body: bytes = b"", *, key: str | None = KEY,
         secret: str = ACL_SECRET) -> RemotingCommand:
    if key is not None:
        ext = signed_ext(ext, body, key, secret)
    return RemotingCommand(code=code, ext_fields=ext, body=body)


def _refusal(validator: AclValidator, cmd: RemotingCommand, ip: str = "127.0.0.1") -> str | None:
    try:
        validator.validate(cmd, ip)
    except Refuse as r:
        assert r.code == ResponseCode.SYSTEM_ERROR and r.ext is None
        return reason(r.remark or "")
    return None


def validator(yml: str) -> AclValidator:
    return AclValidator(AclConfig.parse(yml))


def test_white_addresses_skip_the_checks_they_cover() -> None:
    v = validator(ACL_YML.replace("globalWhiteRemoteAddresses: []", "globalWhiteRemoteAddresses: [10.1.*]")
                  .replace("whiteRemoteAddress:\n", "whiteRemoteAddress: 192.168.0.{1,2}\n"))
    unsigned = RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={"topic": "closed", "consumerGroup": "g"})
    assert _refusal(v, unsigned, "10.1.200.3") is None  # global white: nothing is checked
    assert _refusal(v, unsigned, "10.2.0.1") == "No accessKey is configured"
    bad_signature = _cmd(RequestCode.SEND_MESSAGE_V2, {"b": "open"}, secret="not-the-secret")
    assert _refusal(v, bad_signature, "192.168.0.2") is None  # the account's host: no signature check
    assert _refusal(v, bad_signature, "192.168.0.3") == "Check signature failed for accessKey=rocketmq2"


def test_signature_covers_the_body_and_every_ext_value() -> None:
    v = validator(ACL_YML)
    cmd = _cmd(RequestCode.SEND_MESSAGE_V2, {"b": "open", "a": "pg"}, b"body")
    assert _refusal(v, cmd) is None
    for changed in (RemotingCommand(code=cmd.code, ext_fields=cmd.ext_fields, body=b"other"),
                    RemotingCommand(code=cmd.code, ext_fields=dict(cmd.ext, a="pg2"), body=cmd.body)):
        assert _refusal(v, changed) == "Check signature failed for accessKey=rocketmq2"


def test_heartbeat_and_locks_need_their_groups_and_topics() -> None:
    v = validator(ACL_YML)
    beat = json.dumps({"clientID": "c", "consumerDataSet": [
        {"groupName": "g", "subscriptionDataSet": [{"topic": "closed", "subString": "*"}]}],
        "producerDataSet": []}).encode()
    assert _refusal(v, _cmd(RequestCode.HEART_BEAT, None, beat)) == "No default permission for topic:closed"
    lock = json.dumps({"consumerGroup": "banned", "clientId": "c",
                       "mqSet": [{"topic": "open", "brokerName": "b", "queueId": 0}]}).encode()
    assert _refusal(v, _cmd(RequestCode.LOCK_BATCH_MQ, None, lock)) == "No default permission for group:banned"
    assert _refusal(v, _cmd(RequestCode.HEART_BEAT, None, b"not json")).startswith("cannot read the request")


def test_admin_accounts_may_administer_and_others_may_read_offsets() -> None:
    admin = validator(ACL_YML.replace("admin: false", "admin: true"))
    create = _cmd(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "t"})
    assert _refusal(admin, create) is None
    offsets = _cmd(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "open", "queueId": "0"})
    assert _refusal(validator(ACL_YML), offsets) is None
    assert _refusal(validator(ACL_YML), _cmd(RequestCode.GET_MAX_OFFSET, {"topic": "closed", "queueId": "0"})) is None


def test_permission_bits_as_apache_combines_them() -> None:
    assert check_permission(PUB, PUB | SUB) and check_permission(SUB, SUB) and not check_permission(PUB, SUB)
    assert not check_permission(SUB, DENY | SUB) and check_permission(2, PUB) and not check_permission(2, DENY)


@pytest.mark.parametrize("pattern,inside,outside", [
    ("*", ["1.2.3.4", "::1"], []),
    ("192.168.1.*", ["192.168.1.7"], ["192.168.2.7"]),
    ("192.168.*", ["192.168.9.9"], ["192.169.0.1"]),
    ("10.0.0.1-5", ["10.0.0.1", "10.0.0.5"], ["10.0.0.6"]),
    ("10.0.0.{1,3}", ["10.0.0.3"], ["10.0.0.2"]),
    ("1.1.1.1,2.2.2.2", ["2.2.2.2"], ["3.3.3.3"]),
    ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
    ("", [], ["127.0.0.1"]),
])
def test_white_address_patterns(pattern: str, inside: list[str], outside: list[str]) -> None:
    w = WhiteAddress.parse(pattern, "test")
    assert all(w.matches(ip) for ip in inside) and not any(w.matches(ip) for ip in outside)


@pytest.mark.parametrize("yml,needle", [
    ("accounts:\n  - accessKey: short\n    secretKey: 12345678\n", "accessKey=short"),
    ("accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n    defaultTopicPerm: ALL\n", "'ALL'"),
    ("accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n    topicPerms: [noequals]\n", "'noequals'"),
    ("accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n    whiteRemoteAddress: 1.2.x.4\n",
     "'1.2.x.4'"),
    ("accounts: {a: 1}\n", "accounts must be a list"),
    ("accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n  - accessKey: rocketmq2\n"
     "    secretKey: 87654321\n", "appears twice"),
    ("[1, 2]\n", "expected a mapping"),
    ("accounts: [\n", "not valid YAML"),
])
def test_bad_acl_files_are_named(yml: str, needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        AclConfig.parse(yml, "acl.yml")
    assert needle in str(exc.value) and "acl.yml" in str(exc.value)


def test_the_readme_file_parses_to_one_account() -> None:
    config = AclConfig.parse(plain_acl_yml())
    account = config.accounts[KEY]
    assert (account.secret_key, account.admin, account.default_topic_perm, account.default_group_perm) == \
        (ACL_SECRET, False, PUB | SUB, SUB)
    assert config.global_white == () and not account.white.matches("127.0.0.1")


def test_the_cli_broker_enforces_its_acl_file(tmp_path: Path) -> None:
    (tmp_path / "plain_acl.yml").write_text(plain_acl_yml())
    proc, ns = start_broker(tmp_path / "d", tmp_path / "log", "--acl", str(tmp_path / "plain_acl.yml"))
    try:
        with Wire(broker_addr(ns, "TBW102")) as w:
            ext = {"topic": "TBW102", "queueId": "0"}
            assert w.request(req(RequestCode.GET_MAX_OFFSET, ext)).remark == \
                V["acl_no_credentials"]["response"]["remark"]
            assert w.request(req(RequestCode.GET_MAX_OFFSET, signed_ext(ext, b"", KEY, ACL_SECRET))).code == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_the_cli_refuses_a_missing_acl_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yml"
    assert broker_main(["--acl", str(missing), "--namesrv-port", "0", "--data-dir", str(tmp_path / "d")]) == 1
    err = capsys.readouterr().err
    assert "cannot start" in err and str(missing) in err


def test_a_consumer_may_resend_to_its_retry_topic_and_send_back() -> None:
    v = validator(ACL_YML)  # defaultGroupPerm SUB: no PUB on groups
    assert _refusal(v, _cmd(RequestCode.SEND_MESSAGE_V2, {"b": "%RETRY%g1", "a": "pg"}, b"x")) is None
    assert _refusal(v, _cmd(RequestCode.SEND_MESSAGE_V2, {"b": "%RETRY%banned", "a": "pg"}, b"x")) == \
        "No default permission for group:banned"
    back = {"group": "g1", "offset": "0", "originTopic": "closed", "delayLevel": "0"}
    assert _refusal(v, _cmd(RequestCode.CONSUMER_SEND_MSG_BACK, back)) is None
