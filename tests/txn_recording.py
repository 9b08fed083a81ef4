"""The recorded transaction session (``vectors/apache-broker-txn``): what replaying it needs.

Shared by ``tests/embedded/txn_session.py`` (the embedded broker's own replay) and
``tests/differential/txn_replay.py`` (the differential suite). The 40 exchanges were
recorded in one run against a second 4.9.8 broker with its own ports and the settings
below; their request opaques give their order. Before the first of them (opaque 2) the
recorder sent one ordinary message to another topic, at commit-log offset 0
(``txn_end_offset_of_normal_message`` names it; Apache stored it in 203 bytes: the first
half message is at 203). ``PLAIN_*`` sends one with its recorded UNIQ_KEY; what else
it carried is not recorded, so commit-log offsets are mapped (recorded -> ours), never
assumed equal.
"""

from __future__ import annotations

from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.message import PROP_UNIQ_KEY, PROP_WAIT
from tests.vectors import txn_vectors

V = txn_vectors()
RECORDED_RUN = "195645r0"
RECORDED_BROKER = "127.0.0.1:50911"
RECORDED_NAMESRV = "127.0.0.1:49876"
TIMEOUT_MS, INTERVAL_MS, CHECK_MAX = 2000, 3000, 3  # transactionTimeOut, transactionCheckInterval, transactionCheckMax
ORDER = sorted(V, key=lambda n: V[n]["request"]["header"]["opaque"])
CHECK_ANSWERS = tuple(n for n in ORDER if any(p["code"] == RequestCode.CHECK_TRANSACTION_STATE
                                              for p in V[n].get("server_requests_seen") or []))
NEVER_ANSWERED = frozenset(n for n in V if V[n]["response"] is None)
OTHER_CONNECTION = frozenset({"txn_send_half_unknown_group"})  # sent without a producer heartbeat
PLAIN_SUFFIX = "plain"  # the ordinary message's topic: rec_<run>_plain
PLAIN_BODY = b"an ordinary message"
PLAIN_PROPERTIES = {PROP_UNIQ_KEY: V["txn_end_offset_of_normal_message"]["request"]["header"]["extFields"]["msgId"],
                    PROP_WAIT: "true"}

assert {v["run_id"] for v in V.values()} == {RECORDED_RUN}, "the transaction recordings come from one run"
