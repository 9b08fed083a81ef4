"""What every request handler shares: the call being answered and how to refuse it.

A handler takes ``(broker, call)`` and returns the answer, or None when there is none
now (a oneway request, a pull parked for long polling, a send waiting for fsync: those
answer later through ``call.send``). Validation failures raise ``Refuse`` with the wire
code, remark and extFields (``None`` = no extFields key, ``{}`` = present and empty),
which the dispatcher turns into the answer. Answers look like 4.9.8's: language JAVA,
version 409, the caller's serialization.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Optional

from rocketmq_spark.remoting.codes import FLAG_ONEWAY, SERVER_VERSION
from rocketmq_spark.remoting.command import RemotingCommand, response_to

if TYPE_CHECKING:
    from rocketmq_spark.embedded.broker import Broker
    from rocketmq_spark.embedded.server import Connection

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


Handler = Callable[["Broker", Call], Optional[RemotingCommand]]
