"""ACL of the embedded broker: Apache's ``plain_acl.yml``, checked before every request.

The file (4.9.8 ``PlainPermissionManager`` format)::

    globalWhiteRemoteAddresses: ["10.10.103.*"]     # these hosts need no credentials
    accounts:
      - accessKey: rocketmq2                        # at least 6 characters
        secretKey: 12345678                         # at least 6 characters
        whiteRemoteAddress: 192.168.1.*             # this account's hosts need no signature
        admin: false                                # admin requests (create topic, ...)
        defaultTopicPerm: PUB|SUB                   # PUB, SUB, PUB|SUB or DENY
        defaultGroupPerm: SUB
        topicPerms: [topicA=DENY, topicB=PUB|SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB]

How a request is checked (protocol doc section 1.10, in Apache's order): a host matching
a global white address passes; then the request needs an ``AccessKey`` ext field naming
a configured account; a host matching the account's white address passes; then the
``Signature`` must be base64(HmacSHA1(secretKey, the ext values except Signature in
ascending key order + body)); then admin requests need ``admin: true`` and every
resource the request touches needs its permission: topics by ``topicPerms`` or
``defaultTopicPerm``, groups (as ``%RETRY%<group>``) by ``groupPerms`` or
``defaultGroupPerm`` (the ``RESOURCES`` table says what each request code touches);
DENY refuses.
A refusal is SYSTEM_ERROR (1) without extFields and the remark
``org.apache.rocketmq.acl.common.AclException: <reason>, <stack frame>``, as 4.9.8 answers.
Only the broker checks; the NameServer answers everyone.

White addresses: ``*`` (everyone), an exact IP, ``a.b.c.*`` / ``a.b.*`` (any value of the
starred parts), ``a.b.c.10-20`` (a range), ``a.b.c.{1,2,3}`` and ``ip1,ip2`` (lists).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from rocketmq_spark.embedded.processors.base import Call, Refuse
from rocketmq_spark.errors import ConfigError, RemoteProtocolError
from rocketmq_spark.remoting.bodies import HeartbeatData, LockBatchBody
from rocketmq_spark.remoting.codes import RETRY_PREFIX, RequestCode, ResponseCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import UNIQUE_KEY_QUERY

# org.apache.rocketmq.acl.common.Permission
DENY, ANY, PUB, SUB = 1, 2, 4, 8
PERMS = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}
# Permission.ADMIN_CODE: what only an admin account may ask for.
ADMIN_CODES = frozenset({RequestCode.UPDATE_AND_CREATE_TOPIC, 25, 215, 200, 207})
ACCESS_KEY, SIGNATURE = "AccessKey", "Signature"
MIN_KEY_LENGTH = 6

EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
MANAGER = "org.apache.rocketmq.acl.plain.PlainPermissionManager"
# The stack frame 4.9.8 reports with each reason (line unknown where it was never recorded).
FRAME_NO_KEY = f"{MANAGER}.validate(PlainPermissionManager.java:664)"
FRAME_UNKNOWN_KEY = f"{MANAGER}.validate(PlainPermissionManager.java:668)"
FRAME_SIGNATURE = f"{MANAGER}.validate(PlainPermissionManager.java:684)"
FRAME_ADMIN = f"{MANAGER}.checkPerm(PlainPermissionManager.java:581)"
FRAME_PERM = f"{MANAGER}.checkPerm(PlainPermissionManager.java)"
FRAME_PARSE = "org.apache.rocketmq.acl.plain.PlainAccessValidator.parse(PlainAccessValidator.java)"


def denied(reason: str, frame: str) -> Refuse:
    return Refuse(ResponseCode.SYSTEM_ERROR, f"{EXCEPTION}: {reason}, {frame}", None)


def check_permission(needed: int, owned: int) -> bool:
    """``Permission.checkPermission``: DENY refuses; ANY needs PUB or SUB; else a common bit."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def parse_perm(text: Any, where: str) -> int:
    perm = PERMS.get(str(text).strip().upper()) if text is not None else None
    if perm is None:
        raise ConfigError(f"{where}: permission {text!r} is not one of {sorted(PERMS)}")
    return perm


# ---------------------------------------------------------------- white addresses

@dataclass(frozen=True)
class WhiteAddress:
    """One ``whiteRemoteAddress`` pattern; ``matches(ip)``."""

    text: str
    _match: Callable[[str], bool] = field(repr=False, compare=False)

    def matches(self, ip: str) -> bool:
        return self._match(ip)

    @classmethod
    def parse(cls, text: Any, where: str) -> "WhiteAddress":
        raw = "" if text is None else str(text).strip()
        if not raw:
            return cls(raw, lambda _ip: False)
        if raw in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
            return cls(raw, lambda _ip: True)
        if raw.endswith("}") and "{" in raw:
            prefix, _, items = raw[:-1].partition("{")
            return cls(raw, _exact_set([prefix + i.strip() for i in items.split(",")], raw, where))
        if "," in raw:
            return cls(raw, _exact_set(raw.split(","), raw, where))
        if "*" in raw or "-" in raw:
            return cls(raw, _ranges(raw, where))
        return cls(raw, _exact_set([raw], raw, where))


def _normal_ip(text: str, pattern: str, where: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise ConfigError(f"{where}: bad white address {pattern!r} ({text.strip()!r} is not an IP address)") \
            from None


def _exact_set(items: list[str], pattern: str, where: str) -> Callable[[str], bool]:
    allowed = frozenset(_normal_ip(i, pattern, where) for i in items)
    return lambda ip: ip in allowed


def _ranges(pattern: str, where: str) -> Callable[[str], bool]:
    """IPv4 with ``*`` or ``lo-hi`` parts; missing trailing parts after a ``*`` are ``*``."""
    parts = pattern.split(".")
    if not 1 <= len(parts) <= 4 or (len(parts) < 4 and parts[-1] != "*"):
        raise ConfigError(f"{where}: bad white address {pattern!r}")
    ranges: list[tuple[int, int]] = []
    for part in parts + ["*"] * (4 - len(parts)):
        lo, sep, hi = part.partition("-")
        if part == "*":
            ranges.append((0, 255))
        elif lo.isdigit() and (not sep or hi.isdigit()) and int(lo) <= int(hi or lo) <= 255:
            ranges.append((int(lo), int(hi or lo)))
        else:
            raise ConfigError(f"{where}: bad white address {pattern!r} (part {part!r})")

    def match(ip: str) -> bool:
        octets = ip.split(".")
        return len(octets) == 4 and all(o.isdigit() and lo <= int(o) <= hi for o, (lo, hi) in zip(octets, ranges))

    return match


# ---------------------------------------------------------------- configuration

@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str
    white: WhiteAddress
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    perms: Mapping[str, int] = field(default_factory=dict)  # topic or %RETRY%<group> -> perm

    def owned(self, resource: str) -> int:
        if resource in self.perms:
            return self.perms[resource]
        return self.default_group_perm if resource.startswith(RETRY_PREFIX) else self.default_topic_perm


@dataclass(frozen=True)
class AclConfig:
    global_white: tuple[WhiteAddress, ...]
    accounts: Mapping[str, Account]

    @classmethod
    def load(cls, path: str | Path) -> "AclConfig":
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read the ACL file {str(path)!r}: {exc.strerror or exc}") from None
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, source: str = "plain_acl.yml") -> "AclConfig":
        try:
            import yaml
        except ImportError:  # pragma: no cover - PyYAML is a dependency
            raise ConfigError("reading an ACL file needs PyYAML (pip install pyyaml)") from None
        try:
            doc = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: not valid YAML: {exc}") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"{source}: expected a mapping with 'accounts', got {type(doc).__name__}")
        white = tuple(WhiteAddress.parse(a, f"{source}: globalWhiteRemoteAddresses")
                      for a in _list(doc.get("globalWhiteRemoteAddresses"), source, "globalWhiteRemoteAddresses"))
        accounts: dict[str, Account] = {}
        for i, raw in enumerate(_list(doc.get("accounts"), source, "accounts")):
            account = _account(raw, f"{source}: accounts[{i}]")
            if account.access_key in accounts:
                raise ConfigError(f"{source}: accounts[{i}]: accessKey {account.access_key!r} appears twice")
            accounts[account.access_key] = account
        return cls(white, accounts)


def _list(value: Any, source: str, key: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{source}: {key} must be a list, got {value!r}")
    return value


def _account(raw: Any, where: str) -> Account:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {raw!r}")
    key, secret = raw.get("accessKey"), raw.get("secretKey")
    key = None if key is None else str(key)
    secret = None if secret is None else str(secret)
    if not key or not secret or len(key) < MIN_KEY_LENGTH or len(secret) < MIN_KEY_LENGTH:
        raise ConfigError(f"{where}: the accessKey={key} and secretKey={'<hidden>' if secret else None} "
                          f"cannot be null and length should longer than {MIN_KEY_LENGTH - 1}")
    admin = raw.get("admin", False)
    if not isinstance(admin, bool):
        raise ConfigError(f"{where}: admin must be true or false, got {admin!r}")
    perms: dict[str, int] = {}
    for list_key, as_resource in (("topicPerms", lambda n: n), ("groupPerms", lambda n: RETRY_PREFIX + n)):
        for item in _list(raw.get(list_key), where, list_key):
            name, sep, perm = str(item).partition("=")
            if not sep or not name.strip():
                raise ConfigError(f"{where}: {list_key} entry {item!r} is not NAME=PERM")
            perms[as_resource(name.strip())] = parse_perm(perm, f"{where}: {list_key} {name.strip()}")
    return Account(key, secret, WhiteAddress.parse(raw.get("whiteRemoteAddress"), f"{where}: whiteRemoteAddress"),
                   admin, parse_perm(raw.get("defaultTopicPerm", "DENY"), f"{where}: defaultTopicPerm"),
                   parse_perm(raw.get("defaultGroupPerm", "DENY"), f"{where}: defaultGroupPerm"), perms)


# ---------------------------------------------------------------- what a request touches

def _retry(group: str | None) -> str | None:
    return RETRY_PREFIX + group if group else None


def _heartbeat(cmd: RemotingCommand) -> list[tuple[str | None, int]]:
    data = HeartbeatData.decode(cmd.body)
    out: list[tuple[str | None, int]] = []
    for consumer in data.consumers:
        out.append((_retry(consumer.group_name), SUB))
        out.extend((s.topic, SUB) for s in consumer.subscriptions)
    return out


def _locks(cmd: RemotingCommand) -> list[tuple[str | None, int]]:
    body = LockBatchBody.decode(cmd.body)
    return [(_retry(body.consumer_group), SUB)] + [(mq.topic, SUB) for mq in body.mqs]


def _send(topic_key: str) -> Callable[[RemotingCommand], list[tuple[str | None, int]]]:
    """PUB on the topic; a send to ``%RETRY%<group>`` (a consumer's resend) needs SUB on the group."""
    def resources(cmd: RemotingCommand) -> list[tuple[str | None, int]]:
        topic = cmd.ext.get(topic_key)
        return [(topic, SUB if topic and topic.startswith(RETRY_PREFIX) else PUB)]
    return resources


def _ext(*pairs: tuple[str, int, bool]) -> Callable[[RemotingCommand], list[tuple[str | None, int]]]:
    """Resources named by ext fields: (field, perm, is a group)."""
    return lambda cmd: [(_retry(cmd.ext.get(k)) if group else cmd.ext.get(k), perm) for k, perm, group in pairs]


R = RequestCode
RESOURCES: dict[int, Callable[[RemotingCommand], list[tuple[str | None, int]]]] = {
    R.SEND_MESSAGE: _send("topic"),
    R.SEND_MESSAGE_V2: _send("b"),
    R.SEND_BATCH_MESSAGE: _send("b"),
    R.CONSUMER_SEND_MSG_BACK: _ext(("group", SUB, True)),
    R.PULL_MESSAGE: _ext(("topic", SUB, False), ("consumerGroup", SUB, True)),
    R.LITE_PULL_MESSAGE: _ext(("topic", SUB, False), ("consumerGroup", SUB, True)),
    R.QUERY_MESSAGE: _ext(("topic", SUB, False)),
    R.QUERY_CONSUMER_OFFSET: _ext(("consumerGroup", SUB, True), ("topic", SUB, False)),
    R.UPDATE_CONSUMER_OFFSET: _ext(("consumerGroup", SUB, True), ("topic", SUB, False)),
    R.UNREGISTER_CLIENT: _ext(("consumerGroup", SUB, True)),
    R.GET_CONSUMER_LIST_BY_GROUP: _ext(("consumerGroup", SUB, True)),
    R.HEART_BEAT: _heartbeat,
    R.LOCK_BATCH_MQ: _locks,
    R.UNLOCK_BATCH_MQ: _locks,
}


# ---------------------------------------------------------------- the check

def signature_of(ext: Mapping[str, str], body: bytes, secret: str) -> str:
    content = "".join(v for k, v in sorted(ext.items()) if k not in (SIGNATURE, UNIQUE_KEY_QUERY))
    digest = hmac.new(secret.encode("utf-8"), content.encode("utf-8") + body, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


class AclValidator:
    """The broker's ACL hook: ``check(call)`` raises ``Refuse`` for a denied request."""

    def __init__(self, config: AclConfig) -> None:
        self.config = config

    @classmethod
    def from_file(cls, path: str | Path) -> "AclValidator":
        return cls(AclConfig.load(path))

    def check(self, call: Call) -> None:
        self.validate(call.cmd, call.conn.remote.host)

    def validate(self, cmd: RemotingCommand, remote_ip: str) -> None:
        ext = cmd.ext_fields
        # What the request touches is read first, as Apache does (not without extFields).
        resources = self._resources(cmd) if ext is not None else []
        ip = _normal_ip_or_raw(remote_ip)
        if any(w.matches(ip) for w in self.config.global_white):
            return
        key = ext.get(ACCESS_KEY) if ext is not None else None
        if key is None:
            raise denied("No accessKey is configured", FRAME_NO_KEY)
        account = self.config.accounts.get(key)
        if account is None:
            raise denied(f"No acl config for {key}", FRAME_UNKNOWN_KEY)
        if account.white.matches(ip):
            return
        expected = signature_of(ext or {}, cmd.body, account.secret_key)
        if not hmac.compare_digest(expected, (ext or {}).get(SIGNATURE) or ""):
            raise denied(f"Check signature failed for accessKey={key}", FRAME_SIGNATURE)
        self._check_perm(cmd.code, account, resources)

    @staticmethod
    def _resources(cmd: RemotingCommand) -> list[tuple[str, int]]:
        parse = RESOURCES.get(cmd.code)
        if parse is None:
            return []
        try:
            found = parse(cmd)
        except (RemoteProtocolError, ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
            raise denied(f"cannot read the request to check its permissions: {exc}", FRAME_PARSE) from None
        return [(name, perm) for name, perm in found if name]

    @staticmethod
    def _check_perm(code: int, account: Account, resources: list[tuple[str, int]]) -> None:
        if code in ADMIN_CODES and not account.admin:
            raise denied(f"Need admin permission for request code={code}, but accessKey={account.access_key} is not",
                         FRAME_ADMIN)
        if not resources or (account.admin and not account.perms):
            return
        for resource, needed in resources:
            if not check_permission(needed, account.owned(resource)):
                group = resource.startswith(RETRY_PREFIX)
                what = f"group:{resource[len(RETRY_PREFIX):]}" if group else f"topic:{resource}"
                raise denied(f"No default permission for {what}", FRAME_PERM)


def _normal_ip_or_raw(text: str) -> str:
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return text
    mapped = getattr(ip, "ipv4_mapped", None)  # an IPv4 client of a dual-stack listener
    return str(mapped or ip)
