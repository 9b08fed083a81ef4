"""Domain errors <-> gRPC status: one table each way.

Server side, ``to_status`` gives the status code, a details text such as
``BrokerError code=17 TOPIC_NOT_EXIST: topic[t] not exist`` and trailing metadata with the
error's kind, broker response code and remark. Client side, ``from_status`` rebuilds the
same error class from that metadata (``BrokerError`` keeps ``code``, ``remark`` and
``retriable``).
"""

from __future__ import annotations

from typing import Callable, Sequence

import grpc

from rocketmq_spark.errors import (BrokerError, ConfigError, ProtocolError, RemoteProtocolError,
                                   RequestTimeout, RocketMQError, TransportError)
from rocketmq_spark.remoting.codes import ResponseCode, response_name
from rocketmq_spark.sidecar.errors import DataLossError, SidecarError, SidecarUnavailable

MD_KIND = "rocketmq-error-kind"
MD_CODE = "rocketmq-response-code"
MD_REMARK = "rocketmq-remark-bin"
MD_MESSAGE = "rocketmq-message-bin"
MD_BEYOND_MAX = "rocketmq-beyond-max"

Metadata = Sequence[tuple[str, str | bytes]]

# Broker response codes with a more telling status than the default (UNAVAILABLE when a
# retry can help, else FAILED_PRECONDITION).
_BROKER_STATUS: dict[int, grpc.StatusCode] = {
    ResponseCode.TOPIC_NOT_EXIST: grpc.StatusCode.NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: grpc.StatusCode.NOT_FOUND,
    ResponseCode.SUBSCRIPTION_NOT_EXIST: grpc.StatusCode.NOT_FOUND,
    ResponseCode.NO_PERMISSION: grpc.StatusCode.PERMISSION_DENIED,
    ResponseCode.MESSAGE_ILLEGAL: grpc.StatusCode.INVALID_ARGUMENT,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: grpc.StatusCode.INVALID_ARGUMENT,
    ResponseCode.INVALID_PARAMETER: grpc.StatusCode.INVALID_ARGUMENT,
    ResponseCode.FLOW_CONTROL: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ResponseCode.SYSTEM_BUSY: grpc.StatusCode.RESOURCE_EXHAUSTED,
}

# (class, kind, status); the first class the error is an instance of wins.
_KINDS: tuple[tuple[type[BaseException], str, grpc.StatusCode], ...] = (
    (DataLossError, "data_loss", grpc.StatusCode.FAILED_PRECONDITION),
    (BrokerError, "broker", grpc.StatusCode.FAILED_PRECONDITION),
    (ConfigError, "config", grpc.StatusCode.INVALID_ARGUMENT),
    (RequestTimeout, "timeout", grpc.StatusCode.DEADLINE_EXCEEDED),
    (TransportError, "transport", grpc.StatusCode.UNAVAILABLE),
    (ProtocolError, "protocol", grpc.StatusCode.INTERNAL),
)


def to_status(exc: BaseException) -> tuple[grpc.StatusCode, str, Metadata]:
    for cls, kind, status in _KINDS:
        if isinstance(exc, cls):
            break
    else:
        kind, status = "internal", grpc.StatusCode.INTERNAL
    md: list[tuple[str, str | bytes]] = [(MD_KIND, kind), (MD_MESSAGE, str(exc).encode())]
    if isinstance(exc, BrokerError):
        status = _BROKER_STATUS.get(exc.code, grpc.StatusCode.UNAVAILABLE if exc.retriable else status)
        md += [(MD_CODE, str(exc.code)), (MD_REMARK, exc.remark.encode())]
        details = f"BrokerError code={exc.code} {response_name(exc.code)}: {exc.remark}"
    elif isinstance(exc, DataLossError):
        if exc.beyond_max:
            status = grpc.StatusCode.OUT_OF_RANGE
        md.append((MD_BEYOND_MAX, "1" if exc.beyond_max else "0"))
        details = f"DataLossError: {exc}"
    else:
        details = f"{type(exc).__name__}: {exc}"
    return status, details, md


def _text(md: dict[str, str | bytes], key: str) -> str:
    v = md.get(key, "")
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def _broker(md: dict[str, str | bytes], message: str) -> RocketMQError:
    try:
        code = int(_text(md, MD_CODE))
    except ValueError:
        return SidecarError(message)
    return BrokerError(code, _text(md, MD_REMARK))


_REBUILD: dict[str, Callable[[dict[str, str | bytes], str], RocketMQError]] = {
    "broker": _broker,
    "data_loss": lambda md, m: DataLossError(m, beyond_max=_text(md, MD_BEYOND_MAX) == "1"),
    "config": lambda md, m: ConfigError(m),
    "timeout": lambda md, m: RequestTimeout(m),
    "transport": lambda md, m: TransportError(m),
    "protocol": lambda md, m: RemoteProtocolError(m),
}


def from_status(err: grpc.RpcError, address: str) -> RocketMQError:
    """The rocketmq_spark error a failed call stands for."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = (err.details() if hasattr(err, "details") else None) or ""
    md: dict[str, str | bytes] = {}
    trailing = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    for k, v in trailing or ():
        md[k] = v
    kind = _text(md, MD_KIND)
    message = _text(md, MD_MESSAGE) or details
    rebuild = _REBUILD.get(kind)
    if rebuild is not None:
        return rebuild(md, message)
    if not kind and code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return SidecarUnavailable(f"sidecar at {address}: {code.name}: {details}")
    return SidecarError(f"sidecar at {address}: {code.name}: {details}", status=code.name)
