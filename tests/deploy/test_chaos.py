"""bench/chaos.py at CI size: two kill cycles (the seed picks the driver, then the sidecar;
tests/deploy/test_faults.py and tests/sink/test_exactly_once_faults.py cover the broker),
run as a user runs it, with each pipeline: nothing lost, duplicated or with another body than
the producer sent; through the exactly-once sink, each sharding key's messages in order on
one output queue, and the C++ client reading the output topic as ours does; and with
``--victims master``, broker-a's master killed while its slave serves (parquet pipeline)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _chaos(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ROCKETMQ_SPARK_SIDECAR_DIR", "ROCKETMQ_NAMESRV")}
    return subprocess.run([sys.executable, str(ROOT / "bench" / "chaos.py"), *args],
                          capture_output=True, text=True, timeout=400, cwd=ROOT, env=env)


def test_chaos_two_cycles_lose_duplicate_and_garble_nothing() -> None:
    r = _chaos("--cycles", "2", "--seed", "1")
    out = r.stdout
    assert r.returncode == 0, f"chaos.py failed ({r.returncode}):\n{out[-4000:]}\n{r.stderr[-4000:]}"
    cycles = re.findall(r"^cycle (\d+): .*killed=(\w+), rows=(\d+), acked=(\d+), lost=(\d+), "
                        r"duplicated=(\d+), broker>chk=(\d+), bad bodies=(\d+)", out, re.M)
    assert [(c[0], c[1]) for c in cycles] == [("1", "driver"), ("2", "sidecar")], out
    for _, _, rows, acked, lost, duplicated, ahead, bad_bodies in cycles:
        assert int(rows) >= int(acked) > 0
        assert (lost, duplicated, ahead, bad_bodies) == ("0", "0", "0", "0"), out[-4000:]
    # the final check compared every row's body with the one the producer sent there
    final = re.search(r"^bodies ok: (\d+) rows match what was sent$", out, re.M)
    assert final and int(final.group(1)) >= int(cycles[-1][3]), out[-3000:]
    result = re.search(r"^RESULT cycles=2 lost=(\d+) duplicated=(\d+) broker_ahead=(\d+) bad_bodies=(\d+)$",
                       out, re.M)
    assert result and result.groups() == ("0", "0", "0", "0"), out[-3000:]


def test_chaos_exactly_once_pipeline_two_cycles() -> None:
    """RocketMQ -> Spark -> RocketMQ with deliveryGuarantee=exactly-once: the driver killed
    (its batch replayed by the restarted query), then the sidecar (about a minute)."""
    r = _chaos("--pipeline", "exactly-once", "--cycles", "2", "--seed", "1")
    out = r.stdout
    assert r.returncode == 0, f"chaos.py failed ({r.returncode}):\n{out[-4000:]}\n{r.stderr[-4000:]}"
    cycles = re.findall(r"^cycle (\d+): .*killed=(\w+), rows=(\d+), acked=(\d+), lost=(\d+), "
                        r"duplicated=(\d+), broker>chk=(\d+), bad bodies=(\d+), .*keys out of order=(\d+)",
                        out, re.M)
    assert [(c[0], c[1]) for c in cycles] == [("1", "driver"), ("2", "sidecar")], out
    for _, _, rows, acked, *figures in cycles:
        assert int(rows) >= int(acked) > 0
        assert figures == ["0"] * 5, out[-4000:]
    final = re.search(r"^bodies ok: (\d+) rows match what was sent$", out, re.M)
    assert final and int(final.group(1)) >= int(cycles[-1][3]), out[-3000:]
    assert "C++ read back: 0 queues differ from ours" in out, out[-3000:]
    result = re.search(r"^RESULT cycles=2 lost=(\d+) duplicated=(\d+) broker_ahead=(\d+) bad_bodies=(\d+) "
                       r"out_of_order_keys=(\d+) cpp_queues_differ=(\d+)$", out, re.M)
    assert result and result.groups() == ("0",) * 6, out[-3000:]


def test_chaos_master_kills_with_a_slave_present() -> None:
    """``--victims master``: broker-a's master killed twice while its slave serves; the
    orderly query waits for it each time and never fails."""
    r = _chaos("--victims", "master", "--cycles", "2", "--seed", "1")
    out = r.stdout
    assert r.returncode == 0, f"chaos.py failed ({r.returncode}):\n{out[-4000:]}\n{r.stderr[-4000:]}"
    cycles = re.findall(r"^cycle (\d+): .*killed=(\w+), rows=(\d+), acked=(\d+), lost=(\d+), "
                        r"duplicated=(\d+), broker>chk=(\d+), bad bodies=(\d+), recovery s=[\d.]+, "
                        r"driver restarts=(\d+)", out, re.M)
    assert [(c[0], c[1]) for c in cycles] == [("1", "master"), ("2", "master")], out
    for _, _, rows, acked, *figures in cycles:
        assert int(rows) >= int(acked) > 0
        assert figures == ["0"] * 5, out[-4000:]
    result = re.search(r"^RESULT cycles=2 lost=(\d+) duplicated=(\d+) broker_ahead=(\d+) bad_bodies=(\d+)$",
                       out, re.M)
    assert result and result.groups() == ("0", "0", "0", "0"), out[-3000:]
