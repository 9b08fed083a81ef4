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


class ConfigError(RocketMQError, ValueError):
    """A user-facing option has a bad value; the message names the option."""
