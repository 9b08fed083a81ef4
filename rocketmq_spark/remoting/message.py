"""Stored-message codec (pull bodies, VIEW_MESSAGE_BY_ID), batch bodies, properties, ids.

Layout of one stored record (big-endian): TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG,
QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP, BORNHOST (ip+port; 16-byte ip when
SYSFLAG bit 4), STORETIMESTAMP, STOREHOST (bit 5), RECONSUMETIMES, PREPARED TX OFFSET,
BODY (len32), TOPIC (len8 with magic V1, len16 with V2), PROPERTIES (len16).
Everything here is pure: bytes in, frozen values out.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from rocketmq_spark.errors import LocalProtocolError, RemoteProtocolError
from rocketmq_spark.remoting.codes import MessageSysFlag
from rocketmq_spark.remoting.compression import inflate

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
MAGIC_BLANK = -875286124  # 0xCBD43194
_HEAD = struct.Struct(">iiiiiqqiq")  # size..borntimestamp: 4*5 + 8 + 8 + 4 + 8 = 52
NAME_VALUE_SEP = "\x01"
PROPERTY_SEP = "\x02"

PROP_KEYS = "KEYS"
PROP_TAGS = "TAGS"
PROP_WAIT = "WAIT"
PROP_DELAY = "DELAY"
PROP_UNIQ_KEY = "UNIQ_KEY"
PROP_RETRY_TOPIC = "RETRY_TOPIC"
PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QID = "REAL_QID"
PROP_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROP_CLUSTER = "CLUSTER"
PROP_SHARDING_KEY = "__SHARDINGKEY"
PROP_RECONSUME_TIME = "RECONSUME_TIME"
PROP_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROP_TRANSACTION_PREPARED = "TRAN_MSG"
PROP_PRODUCER_GROUP = "PGROUP"
PROP_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROP_CHECK_IMMUNITY_TIME = "CHECK_IMMUNITY_TIME_IN_SECONDS"


# ---------------------------------------------------------------- properties

def encode_properties(props: Mapping[str, str]) -> str:
    return "".join(f"{k}{NAME_VALUE_SEP}{v}{PROPERTY_SEP}" for k, v in props.items() if k and v)


def decode_properties(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEP):
        name, sep, value = item.partition(NAME_VALUE_SEP)
        if sep and name and value:
            out[name] = value
    return out


# ---------------------------------------------------------------- hosts and ids

@dataclass(frozen=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> "HostPort":
        host, _, port = text.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"not host:port: {text!r}")
        return cls(host.strip("[]"), int(port))

    def packed(self) -> bytes:
        return _packed(self.host, self.port)

    @property
    def is_v6(self) -> bool:
        return len(_packed(self.host, self.port)) == 20


@functools.lru_cache(maxsize=1024)
def _packed(host: str, port: int) -> bytes:
    return ipaddress.ip_address(host).packed + struct.pack(">i", port)


def offset_msg_id(store: HostPort, commit_log_offset: int) -> str:
    return (store.packed() + struct.pack(">q", commit_log_offset)).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[HostPort, int]:
    raw = bytes.fromhex(msg_id)
    iplen = {16: 4, 28: 16}.get(len(raw))
    if iplen is None:
        raise ValueError(f"offset message id of {len(raw)} bytes")
    host = str(ipaddress.ip_address(raw[:iplen]))
    port, offset = struct.unpack_from(">iq", raw, iplen)
    return HostPort(host, port), offset


def java_string_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units, 32-bit signed (the tag code)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    return java_string_hash(tags) if tags else 0


def parse_subscription(expression: str | None) -> frozenset[str]:
    """``TagA || TagB`` -> {TagA, TagB}; ``*`` or empty -> empty set (= everything)."""
    expr = (expression or "").strip()
    if not expr or expr == "*":
        return frozenset()
    return frozenset(p.strip() for p in expr.split("||") if p.strip())


# ---------------------------------------------------------------- stored message

@dataclass(frozen=True)
class MessageExt:
    """A message as stored by a broker (what a pull returns)."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: HostPort = HostPort("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: HostPort = HostPort("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: Mapping[str, str] = field(default_factory=dict)
    body_crc: int = 0
    magic: int = MAGIC_V1

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROP_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROP_KEYS)

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        return self.properties.get(PROP_UNIQ_KEY) or self.offset_msg_id

    def payload(self) -> bytes:
        """The body as the application sent it (inflated when compressed)."""
        return inflate(self.sys_flag, self.body)


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def encode_message(m: MessageExt) -> bytes:
    """One stored record; IPv6 host bits and the V2 magic follow from the values."""
    sys_flag = m.sys_flag & ~(MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6)
    if m.born_host.is_v6:
        sys_flag |= MessageSysFlag.BORNHOST_V6
    if m.store_host.is_v6:
        sys_flag |= MessageSysFlag.STOREHOST_V6
    topic = m.topic.encode("utf-8")
    # A 4.9.8 broker stores the properties without the separator after the last pair.
    props = encode_properties(m.properties).removesuffix(PROPERTY_SEP).encode("utf-8")
    if len(props) > 32767:
        raise LocalProtocolError("properties longer than 32767 bytes")
    magic = MAGIC_V2 if len(topic) > 127 else MAGIC_V1
    topic_len = struct.pack(">h", len(topic)) if magic == MAGIC_V2 else struct.pack(">b", len(topic))
    tail = b"".join((
        struct.pack(">q", m.store_timestamp), m.store_host.packed(),
        struct.pack(">iqi", m.reconsume_times, m.prepared_transaction_offset, len(m.body)),
        m.body, topic_len, topic, struct.pack(">h", len(props)), props))
    born = m.born_host.packed()
    size = _HEAD.size + len(born) + len(tail)
    head = _HEAD.pack(size, magic, body_crc(m.body), m.queue_id, m.flag, m.queue_offset,
                      m.commit_log_offset, sys_flag, m.born_timestamp)
    return head + born + tail


@functools.lru_cache(maxsize=1024)
def _host_of(raw: bytes) -> HostPort:
    """ip + port bytes -> HostPort; cached: a pull body repeats a handful of hosts."""
    (port,) = struct.unpack_from(">i", raw, len(raw) - 4)
    return HostPort(str(ipaddress.ip_address(raw[:-4])), port)


def _host(data: bytes, pos: int, v6: bool) -> tuple[HostPort, int]:
    n = (16 if v6 else 4) + 4
    if pos + n > len(data):
        raise RemoteProtocolError("stored message truncated in a host field")
    return _host_of(bytes(data[pos:pos + n])), pos + n


def decode_message(data: bytes, pos: int = 0) -> tuple[MessageExt, int]:
    """Decode the record at ``pos``; return it and the position after it."""
    if pos + _HEAD.size > len(data):
        raise RemoteProtocolError("stored message truncated in its header")
    (size, magic, crc, queue_id, flag, queue_offset, phys, sys_flag,
     born_ts) = _HEAD.unpack_from(data, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise RemoteProtocolError(f"bad magic code 0x{magic & 0xFFFFFFFF:08X}")
    end = pos + size
    if size < _HEAD.size or end > len(data):
        raise RemoteProtocolError(f"stored message size {size} does not fit the data")
    rec = data[:end]
    try:
        born, p = _host(rec, pos + _HEAD.size, bool(sys_flag & MessageSysFlag.BORNHOST_V6))
        (store_ts,) = struct.unpack_from(">q", rec, p)
        store, p = _host(rec, p + 8, bool(sys_flag & MessageSysFlag.STOREHOST_V6))
        reconsume, prepared, body_len = struct.unpack_from(">iqi", rec, p)
        p += 16
        if body_len < 0 or p + body_len > end:
            raise RemoteProtocolError("body length does not fit the record")
        body = bytes(rec[p:p + body_len])
        p += body_len
        if magic == MAGIC_V2:
            (tlen,) = struct.unpack_from(">h", rec, p)
            p += 2
        else:
            (tlen,) = struct.unpack_from(">b", rec, p)
            p += 1
        if tlen < 0 or p + tlen > end:
            raise RemoteProtocolError("topic length does not fit the record")
        topic = rec[p:p + tlen].decode("utf-8")
        p += tlen
        (plen,) = struct.unpack_from(">h", rec, p)
        p += 2
        if plen < 0 or p + plen != end:
            raise RemoteProtocolError("properties length does not match the record size")
        props = decode_properties(rec[p:p + plen].decode("utf-8"))
    except struct.error as exc:
        raise RemoteProtocolError(f"stored message truncated: {exc}") from None
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"stored message text is not UTF-8: {exc}") from None
    return MessageExt(topic=topic, body=body, queue_id=queue_id, flag=flag,
                      queue_offset=queue_offset, commit_log_offset=phys, sys_flag=sys_flag,
                      born_timestamp=born_ts, born_host=born, store_timestamp=store_ts,
                      store_host=store, reconsume_times=reconsume,
                      prepared_transaction_offset=prepared, properties=props,
                      body_crc=crc, magic=magic), end


def decode_messages(data: bytes) -> list[MessageExt]:
    out, pos = [], 0
    while pos < len(data):
        msg, pos = decode_message(data, pos)
        out.append(msg)
    return out


# ---------------------------------------------------------------- batch body

@dataclass(frozen=True)
class BatchItem:
    body: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    flag: int = 0


_BATCH_HEAD = struct.Struct(">iiiii")


def encode_batch(items: Iterable[BatchItem]) -> bytes:
    out = bytearray()
    for item in items:
        props = encode_properties(item.properties).encode("utf-8")
        size = _BATCH_HEAD.size + len(item.body) + 2 + len(props)
        out += _BATCH_HEAD.pack(size, 0, 0, item.flag, len(item.body))
        out += item.body + struct.pack(">h", len(props)) + props
    return bytes(out)


def decode_batch(data: bytes) -> list[BatchItem]:
    items, pos = [], 0
    try:
        while pos < len(data):
            size, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(data, pos)
            end = pos + size
            p = pos + _BATCH_HEAD.size
            if size < _BATCH_HEAD.size + 2 or end > len(data) or body_len < 0 or p + body_len + 2 > end:
                raise RemoteProtocolError("batch entry does not fit the body")
            body = bytes(data[p:p + body_len])
            (plen,) = struct.unpack_from(">h", data, p + body_len)
            pstart = p + body_len + 2
            if plen < 0 or pstart + plen != end:
                raise RemoteProtocolError("batch entry properties do not fit the entry")
            props = decode_properties(data[pstart:end].decode("utf-8"))
            items.append(BatchItem(body=body, properties=props, flag=flag))
            pos = end
    except struct.error as exc:
        raise RemoteProtocolError(f"batch body truncated: {exc}") from None
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"batch properties are not UTF-8: {exc}") from None
    return items
