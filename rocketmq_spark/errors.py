"""The project's error tree.

Protocol errors (a peer sent bytes we cannot parse) are separate from broker errors
(a well-formed answer with a non-success code). Broker errors carry the wire code, the
remark and whether a retry can help; callers branch on ``retriable``, never on text.
"""

from __future__ import annotations


class RocketMQError(Exception):
    """Base of every error raised by rocketmq_spark."""


class ProtocolError(RocketMQError):
    """Bytes that do not follow the remoting protocol."""


class LocalProtocolError(ProtocolError):
    """We were asked to encode something the protocol cannot carry."""


class RemoteProtocolError(ProtocolError):
    """The peer sent a malformed frame, header or body."""


class NeedMoreData(ProtocolError):
    """The buffer holds an incomplete item; nothing was consumed."""


class TransportError(RocketMQError):
    """Connecting, sending or receiving failed, or the call timed out."""

    retriable = True


class RequestTimeout(TransportError):
    """No answer arrived within the call's timeout."""


class ConnectError(TransportError):
    """No connection could be had: nothing was sent."""


class BrokerUnavailable(TransportError):
    """A broker gave no answer for longer than the caller may wait (the message names the
    option that sets how long)."""


# Response codes after which the same call can succeed later or elsewhere
# (the Java producer retries on another broker for these).
RETRIABLE_CODES = frozenset({1, 2, 14, 16, 17, 204, 205, 215, 1500})


class BrokerError(RocketMQError):
    """A response whose code means failure. ``code`` is the wire code."""

    def __init__(self, code: int, remark: str | None, *, request_code: int | None = None,
                 address: str | None = None) -> None:
        self.code = code
        self.remark = remark or ""
        self.request_code = request_code
        self.address = address
        self.retriable = code in RETRIABLE_CODES
        from rocketmq_spark.remoting.codes import response_name  # local: avoid a cycle

        where = f" from {address}" if address else ""
        req = f" to request {request_code}" if request_code is not None else ""
        super().__init__(f"{response_name(code)} ({code}){req}{where}: {self.remark}")


# How brokers refuse a subscription (CHECK_CLIENT_CONFIG, PULL_MESSAGE): SUBSCRIPTION_PARSE_FAILED
# (23), or SYSTEM_ERROR (1) with this remark when the expression type is not enabled.
FILTER_NOT_SUPPORTED = "The broker does not support consumer to filter message by "


def subscription_refused(exc: BrokerError) -> bool:
    """Whether ``exc`` is a broker refusing a subscription: no retry can help."""
    return exc.code == 23 or (exc.code == 1 and exc.remark.startswith(FILTER_NOT_SUPPORTED))


class AclError(BrokerError):
    """The broker refused the request's credentials (ACL): options accessKey / secretKey."""

    def __init__(self, cause: BrokerError) -> None:
        super().__init__(cause.code, cause.remark, request_code=cause.request_code,
                         address=cause.address)
        self.args = (f"options 'accessKey'/'secretKey': the broker refused the credentials: "
                     f"{cause}",)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_acl_error, (self.code, self.remark, self.request_code, self.address))


def _acl_error(code: int, remark: str, request_code: int | None, address: str | None) -> "AclError":
    return AclError(BrokerError(code, remark, request_code=request_code, address=address))


_NO_PERMISSION = 16
_NOT_ACL = "is forbidden"    # NO_PERMISSION of a broker or topic whose perm forbids it ("the broker[..] sending message is forbidden")


def as_acl_error(exc: BrokerError) -> BrokerError:
    """An ACL refusal as an AclError: Apache 4.x answers every one with SYSTEM_ERROR and an
    AclException remark (plain_acl.yml); 5.x's authentication and authorization (ACL 2.0)
    with NO_PERMISSION and the reason ("check signature failed.", "username cannot be null.",
    "User:... has no permission ...")."""
    if isinstance(exc, AclError):
        return exc
    if "AclException" in exc.remark or (exc.code == _NO_PERMISSION and _NOT_ACL not in exc.remark):
        return AclError(exc)
    return exc


class ConfigError(RocketMQError, ValueError):
    """A user-facing option has a bad value; the message names the option."""
