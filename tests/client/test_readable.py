"""Which address of a broker name a read goes to (client/readable.py; pure logic)."""

from __future__ import annotations

from rocketmq_spark.client.readable import Unreachable, choose

ADDRS = {0: "m:1", 1: "s1:1", 2: "s2:1"}


def never(address: str) -> bool:
    return False


def test_the_master_unless_another_broker_was_suggested() -> None:
    assert choose(ADDRS, 0, never) == (0, "m:1")
    assert choose(ADDRS, 2, never) == (2, "s2:1")
    assert choose(ADDRS, 7, never) == (0, "m:1")          # an id the route does not know


def test_a_master_missing_from_the_route_or_down_leaves_reads_to_the_lowest_slave() -> None:
    assert choose({1: "s1:1", 2: "s2:1"}, 0, never) == (1, "s1:1")
    assert choose(ADDRS, 0, lambda a: a == "m:1") == (1, "s1:1")
    assert choose(ADDRS, 1, lambda a: a == "s1:1") == (0, "m:1")


def test_when_every_address_is_down_the_first_choice_is_tried_again() -> None:
    assert choose(ADDRS, 0, lambda a: True) == (0, "m:1")
    assert choose({}, 0, never) is None


def test_an_address_is_down_for_a_while_only() -> None:
    now = [0.0]
    u = Unreachable(clock=lambda: now[0], down_for=10.0)
    u.mark("m:1")
    assert u.down("m:1") and not u.down("s1:1")
    now[0] = 9.9
    assert u.down("m:1")
    now[0] = 10.0
    assert not u.down("m:1")
    u.mark("m:1")
    u.clear("m:1")
    assert not u.down("m:1")
