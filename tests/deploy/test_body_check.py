"""The body checks of bench/chaos.py on made-up rows (no broker, no Spark): what each kind
of mismatch is counted as, and that the report names where and which digests."""

from __future__ import annotations

from bench.chaos import Key, compare_bodies, compare_digests, digest, keys_out_of_order

T = "t"


def _sent(n: int) -> dict[Key, str]:
    return {(T, "broker-a", 0, o): digest(f"m{o}".encode()) for o in range(n)}


def test_the_bodies_sent_at_their_positions_pass() -> None:
    sent = _sent(4)
    check = compare_bodies(sent, list(sent.items()))
    assert check.ok and check.rows == 4, check.report()
    assert check.report() == "bodies ok: 4 rows match what was sent"


def test_a_wrong_body_at_the_right_offset_fails_and_is_named() -> None:
    sent = _sent(6)
    rows = [(k, digest(b"m3!") if k[3] == 3 else d) for k, d in sent.items()]
    check = compare_bodies(sent, rows)
    assert (check.wrong, check.missing, check.duplicated, check.unexpected) == (1, 0, 0, 0)
    report = check.report()
    assert "1 wrong body" in report
    assert f"wrong body at t/broker-a/0@3: expected {digest(b'm3')[:16]}, got {digest(b'm3!')[:16]}" in report


def test_missing_duplicated_and_unexpected_rows_fail() -> None:
    sent = _sent(3)
    k0, k1, k2 = sent
    stray = (T, "broker-a", 0, 7)
    rows = [(k0, sent[k0]), (k0, sent[k0]), (k1, sent[k1]), (stray, digest(b"nobody sent this"))]
    check = compare_bodies(sent, rows)
    assert (check.wrong, check.missing, check.duplicated, check.unexpected) == (0, 1, 1, 1)
    assert check.bad == 3 and not check.ok
    # only positions required (say, committed) must be there
    assert compare_bodies(sent, rows[1:], required=lambda k: k != k2).missing == 0


def test_a_send_of_unknown_outcome_may_appear_once_anywhere_else() -> None:
    sent = _sent(2)
    maybe = digest(b"timed out")
    rows = [*sent.items(), ((T, "broker-a", 0, 2), maybe)]
    assert compare_bodies(sent, rows, optional=[maybe]).ok
    twice = compare_bodies(sent, [*rows, ((T, "broker-a", 0, 3), maybe)], optional=[maybe])
    assert twice.unexpected == 1
    # an acknowledged body is not optional at another position
    moved = compare_bodies(sent, [*rows, ((T, "broker-a", 0, 3), sent[(T, "broker-a", 0, 0)])],
                           optional=[maybe])
    assert moved.unexpected == 1


def test_digests_without_positions_for_an_output_topic() -> None:
    a, b, c = (digest(x) for x in (b"a", b"b", b"c"))
    assert compare_digests({a: 1, b: 2}, [b, a, b]).ok
    check = compare_digests({a: 1, b: 2}, [a, a, b, c], optional=[c])
    assert (check.missing, check.duplicated, check.unexpected) == (1, 1, 0)
    assert "missing: expected" in check.report() and "duplicated: expected" in check.report()
    assert compare_digests({a: 1}, [a, b]).unexpected == 1


def test_keys_spread_over_queues_or_out_of_source_order_are_named() -> None:
    """The exactly-once pipeline's order check: bodies ``key:n``, sent at source offset n."""
    bodies = {k: [f"{k}:{n}".encode() for n in range(3)] for k in ("k0", "k1", "k2", "k3")}
    sent_at = {digest(b): (T, "broker-a", 0, n) for msgs in bodies.values() for n, b in enumerate(msgs)}
    q0, q1 = ("broker-a", 0), ("broker-a", 1)
    stray = b"k0:unacknowledged"       # no known position: left out of the order
    output = {q0: [stray] + bodies["k0"] + [bodies["k1"][1], bodies["k1"][0], bodies["k1"][2]]
              + bodies["k2"][:2],
              q1: bodies["k2"][2:] + bodies["k3"]}
    assert keys_out_of_order(output, sent_at) == ["k1", "k2"]       # k1 swapped, k2 on two queues
    assert keys_out_of_order({q0: bodies["k0"][:2], q1: bodies["k3"]}, sent_at) == []  # a prefix is fine
