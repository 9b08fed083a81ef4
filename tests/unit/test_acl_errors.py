"""Which broker refusals are ACL refusals (AclError, naming the accessKey/secretKey options):
4.x's AclException remarks and 5.x's NO_PERMISSION answers of ACL 2.0, not a broker's or a
topic's read/write permission, nor any other error."""

from __future__ import annotations

import pickle

import pytest

from rocketmq_spark.errors import AclError, BrokerError, as_acl_error


@pytest.mark.parametrize("code, remark", [
    (1, "org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=rocketmq2, "
        "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:...)"),
    (1, "org.apache.rocketmq.acl.common.AclException: No accessKey is configured, ..."),
    (16, "check signature failed."),                       # 5.5.0, wrong secret
    (16, "username cannot be null."),                      # 5.5.0, unsigned
    (16, "User:rocketmq2 has no permission to access Topic:t from 127.0.0.1, the decided policy is Deny"),
])
def test_acl_refusals_of_4x_and_5x_name_the_options(code: int, remark: str) -> None:
    err = as_acl_error(BrokerError(code, remark, request_code=310, address="127.0.0.1:10911"))
    assert isinstance(err, AclError) and err.code == code
    assert "accessKey" in str(err) and "secretKey" in str(err) and remark in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, AclError) and str(again) == str(err)


@pytest.mark.parametrize("code, remark", [
    (16, "the broker[broker-a] sending message is forbidden"),
    (16, "the topic[t] pulling message is forbidden"),
    (1, "java.lang.NullPointerException"),
    (17, "topic[t] not exist, apply first please!"),
])
def test_other_refusals_stay_what_they_are(code: int, remark: str) -> None:
    err = BrokerError(code, remark)
    assert as_acl_error(err) is err
