"""send_back's arguments: validated before anything is sent, errors naming the argument."""

from __future__ import annotations

import pytest

from rocketmq_spark.errors import ConfigError
from rocketmq_spark.spark.retry import RetrySettings, _item

NS = {"nameServer": "127.0.0.1:9876", "consumerGroup": "g"}

BAD = [
    (NS, {"delay_level": 19}, "delay_level: 19 is not one of -1"),
    (NS, {"delay_level": -2}, "delay_level: -2"),
    (NS, {"delay_level": True}, "delay_level: True"),
    (NS, {"max_reconsume_times": 0}, "max_reconsume_times: 0 must be an integer >= 1"),
    ({"nameServer": "127.0.0.1:9876"}, {}, "'consumerGroup' is required"),
    ({"consumerGroup": "g"}, {}, "'nameServer' is required"),
    ({**NS, "sidecar": "nowhere"}, {}, "'sidecar': 'nowhere'"),
    ({**NS, "accessKey": "a"}, {}, "'accessKey' and 'secretKey' must be set together"),
    ({**NS, "subExpression": "*"}, {}, "unknown option 'subexpression' for send_back"),
    ({**NS, "topic": "t", "consumeMode": "fifo"}, {}, "'consumeMode': 'fifo'"),
]


@pytest.mark.parametrize("options,kw,message", BAD, ids=[b[2][:50] for b in BAD])
def test_bad_arguments(options, kw, message):
    args = {"delay_level": 0, "max_reconsume_times": 16, **kw}
    with pytest.raises(ConfigError) as err:
        RetrySettings(options, **args)
    assert message in str(err.value)


def test_source_options_give_the_same_group_as_the_source():
    from rocketmq_spark.spark import options

    src = {"nameServer": "127.0.0.1:9876", "topic": "orders", "consumeMode": "concurrent"}
    s = RetrySettings(src, delay_level=3, max_reconsume_times=5)
    assert s.group == options.parse(src).consumer_group
    assert (s.delay_level, s.max_reconsume_times, s.sidecar) == (3, 5, "auto")


def test_rows_become_send_back_items_and_secrets_stay_hidden():
    s = RetrySettings({**NS, "accessKey": "AK", "secretKey": "SK-SECRET"}, delay_level=-1,
                      max_reconsume_times=2)
    item = _item({"topic": "orders", "broker": "broker-a", "msg_id": "U1", "offset_msg_id": "7F00"}, s)
    assert (item.origin_topic, item.broker_name, item.origin_msg_id, item.offset_msg_id) == \
        ("orders", "broker-a", "U1", "7F00")
    assert (item.delay_level, item.max_reconsume_times) == (-1, 2)
    assert "SK-SECRET" not in repr(s)
    with pytest.raises(ConfigError, match="needs the columns topic, broker, msg_id, offset_msg_id"):
        _item({"topic": "orders"}, s)
