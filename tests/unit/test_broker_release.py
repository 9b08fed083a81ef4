"""A broker's release from GET_BROKER_RUNTIME_INFO: 4.x answers brokerVersionDesc and the
brokerVersion ordinal, 5.x (5.5.0, tried) brokerVersionDesc alone."""

from __future__ import annotations

import pytest

from rocketmq_spark.client.admin import broker_release


@pytest.mark.parametrize("info, release", [
    ({"brokerVersionDesc": "V4_9_7", "brokerVersion": "407"}, (4, 9, 7)),
    ({"brokerVersionDesc": "V5_5_0"}, (5, 5, 0)),                   # 5.5.0: no ordinal
    ({"brokerVersionDesc": "V5_3_4_SNAPSHOT"}, (5, 3, 4)),
    ({"brokerVersion": "439"}, (5, 0, 0)),                           # an ordinal alone: the release at or below
    ({"brokerVersion": "409"}, (4, 9, 8)),
    ({"brokerVersion": "300"}, (4,)),
    ({"brokerVersionDesc": "", "brokerVersion": "x"}, None),
    ({}, None),
])
def test_the_release_comes_from_the_description_else_the_ordinal(info, release) -> None:  # type: ignore[no-untyped-def]
    assert broker_release(info) == release
    if release is not None:
        assert (release >= (5,)) == (release[0] == 5)
