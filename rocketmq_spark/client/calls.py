"""Building requests and checking answers: the two steps every client call shares."""

from __future__ import annotations

from typing import Collection, Mapping

from rocketmq_spark.errors import BrokerError
from rocketmq_spark.remoting.codes import CLIENT_VERSION, ResponseCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import Header


def request(code: int, header: Header | Mapping[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    """A JSON-serialized request from PYTHON at CLIENT_VERSION; every ext value a string."""
    if isinstance(header, Header):
        ext: dict[str, str] | None = header.to_ext()
    elif header is not None:
        ext = {str(k): str(v) for k, v in header.items()}
    else:
        ext = None
    return RemotingCommand(code=int(code), ext_fields=ext, body=body, language="PYTHON",
                           version=CLIENT_VERSION)


def check(response: RemotingCommand, request_code: int, address: str,
          ok: Collection[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
    """``response`` if its code is in ``ok``, else the BrokerError it stands for."""
    if response.code not in ok:
        raise BrokerError(response.code, response.remark, request_code=int(request_code),
                          address=address)
    return response
