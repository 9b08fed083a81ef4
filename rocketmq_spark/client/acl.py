"""Request signing for brokers with ``aclEnable=true`` (protocol doc section 1.10).

``AccessKey`` goes into extFields; ``Signature`` = base64(HmacSHA1(secret, the UTF-8
values of every extFields entry except ``Signature``, AccessKey included, in ascending
key order, followed by the body bytes)). Java's AclClientRPCHook does the same.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import replace
from typing import Mapping

from rocketmq_spark.remoting.command import RemotingCommand

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"


def signature(ext: Mapping[str, str], body: bytes, secret_key: str) -> str:
    content = "".join(ext[k] for k in sorted(ext) if k != SIGNATURE).encode("utf-8") + body
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def signed_ext(ext: Mapping[str, str] | None, body: bytes, access_key: str,
               secret_key: str) -> dict[str, str]:
    """``ext`` plus AccessKey and Signature (a Signature already present is replaced)."""
    out = {k: v for k, v in (ext or {}).items() if k != SIGNATURE}
    out[ACCESS_KEY] = access_key
    out[SIGNATURE] = signature(out, body, secret_key)
    return out


class Signer:
    """An RPC hook: ``signer(cmd)`` returns the command with AccessKey and Signature."""

    def __init__(self, access_key: str, secret_key: str) -> None:
        if not access_key or not secret_key:
            raise ValueError("ACL signing needs both an access key and a secret key")
        self.access_key = access_key
        self._secret_key = secret_key

    def __call__(self, cmd: RemotingCommand) -> RemotingCommand:
        return replace(cmd, ext_fields=signed_ext(cmd.ext_fields, cmd.body, self.access_key,
                                                  self._secret_key))
