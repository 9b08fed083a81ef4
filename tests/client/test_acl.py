"""ACL signing reproduces the recorded signed requests that the real broker accepted."""

from __future__ import annotations

import pytest

from rocketmq_spark.client.acl import Signer, signature, signed_ext
from rocketmq_spark.remoting import command
from rocketmq_spark.remoting.command import RemotingCommand
from tests.vectors import apache_vectors

VECTORS = apache_vectors()
ACCESS_KEY, SECRET_KEY = "rocketmq2", "12345678"
ACCEPTED = ["acl_signed_ok_send", "acl_signed_heartbeat", "acl_signed_ok_pull",
            "acl_signed_ok_query_offset"]


def _recorded_request(name: str) -> tuple[bytes, RemotingCommand]:
    frame = bytes.fromhex(VECTORS[name]["request"]["frame_hex"])
    return frame, command.decode(frame)[0]


@pytest.mark.parametrize("name", ACCEPTED)
def test_signing_reproduces_the_accepted_frame_byte_for_byte(name: str) -> None:
    frame, recorded = _recorded_request(name)
    assert VECTORS[name]["response"]["code"] == 0          # the broker accepted it
    unsigned = RemotingCommand(
        code=recorded.code, opaque=recorded.opaque, flag=recorded.flag,
        ext_fields={k: v for k, v in recorded.ext.items() if k not in ("AccessKey", "Signature")}
        if len(recorded.ext) > 2 else None,
        body=recorded.body, language="JAVA", version=409)
    signed = Signer(ACCESS_KEY, SECRET_KEY)(unsigned)
    assert signed.ext_fields["Signature"] == recorded.ext["Signature"]
    assert command.encode(signed) == frame


@pytest.mark.parametrize("name", ["acl_wrong_signature", "acl_signature_without_body"])
def test_rejected_signatures_differ_from_ours(name: str) -> None:
    _, recorded = _recorded_request(name)
    assert VECTORS[name]["response"]["code"] == 1
    assert recorded.ext["Signature"] != signature(recorded.ext, recorded.body, SECRET_KEY)


def test_signature_without_body_is_the_one_the_broker_refused() -> None:
    _, recorded = _recorded_request("acl_signature_without_body")
    assert recorded.ext["Signature"] == signature(recorded.ext, b"", SECRET_KEY)


def test_signed_ext_replaces_an_old_signature_and_covers_every_value() -> None:
    ext = signed_ext({"b": "2", "a": "1", "Signature": "old"}, b"xy", "AK", "SK")
    assert list(ext) == ["b", "a", "AccessKey", "Signature"]
    assert ext["Signature"] == signature({"AccessKey": "AK", "a": "1", "b": "2"}, b"xy", "SK")
    assert ext["Signature"] != signature({"AccessKey": "AK", "a": "1", "b": "3"}, b"xy", "SK")


def test_signer_needs_both_keys() -> None:
    with pytest.raises(ValueError, match="access key and a secret key"):
        Signer("AK", "")
