"""``rocketmq-spark broker``: options, the nameServer= line, exit codes."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rocketmq_spark.embedded.cli import main, parser
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.route import decode_route
from tests.embedded.test_durability import ROOT, start_broker
from tests.embedded.wire import Wire, max_offset, req, send_msg, wait_for


def test_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for option in ("--brokers", "--data-dir", "--namesrv-port", "--host", "--topic", "--default-queues",
                   "--flush", "--acl", "--transaction-timeout-ms", "--transaction-check-interval-ms",
                   "--transaction-check-max", "--slaves", "--join", "--broker-name", "--broker-id", "--master"):
        assert option in out
    for apache_name in ("transactionTimeOut", "transactionCheckInterval", "transactionCheckMax"):
        assert apache_name in out


@pytest.mark.parametrize("argv,needle", [
    (["--topic", "bad name:2"], "bad topic"),
    (["--topic", "ok:zero"], "bad queue count"),
    (["--brokers", "-1"], "integer >= 0"),
    (["--slaves", "-1"], "integer >= 0"),
    (["--broker-id", "-1"], "integer >= 0"),
    (["--broker-id", "1"], "go with --join"),
    (["--join", "127.0.0.1:1", "--slaves", "1"], "--join runs one broker"),
    (["--flush", "maybe"], "invalid choice"),
    (["--namesrv-port", "70000"], "bad port"),
    (["--transaction-check-interval-ms", "0"], "integer >= 1"),
    (["--transaction-timeout-ms", "-5"], "integer >= 0"),
    (["--transaction-check-max", "many"], "integer >= 0"),
])
def test_bad_options_are_named(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and needle in capsys.readouterr().err


def test_defaults() -> None:
    args = parser().parse_args([])
    assert (args.brokers, args.data_dir, args.namesrv_port, args.host, args.flush, args.default_queues) == \
        (1, "./data/rocketmq", 9876, "127.0.0.1", "sync", 4)
    assert (args.transaction_timeout_ms, args.transaction_check_interval_ms, args.transaction_check_max) == \
        (6000, 60000, 15)  # Apache's defaults


def test_transaction_settings_reach_the_brokers(tmp_path: Path) -> None:
    proc, ns = start_broker(tmp_path / "d", tmp_path / "log", "--transaction-timeout-ms", "100",
                            "--transaction-check-interval-ms", "200", "--transaction-check-max", "0",
                            "--topic", "tx:1")
    try:
        with Wire(ns) as w:
            addr = decode_route(w.request(req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "tx"})).body) \
                .master_addr("broker-a")
        assert addr
        with Wire(addr) as w:  # with transactionCheckMax 0 a half message is given up on in the second round
            ans = send_msg(w, "tx", b"half", props={"TRAN_MSG": "true", "PGROUP": "pg"}, sys_flag=4)
            assert ans.code == 0
            assert wait_for(lambda: max_offset(w, "TRANS_CHECK_MAX_TIME_TOPIC", 0) == 1, 10)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_topics_and_brokers_from_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "acl.yml").write_text("accounts:\n  - accessKey: rocketmq2\n    secretKey: '12345678'\n")
    proc, ns = start_broker(tmp_path / "d", tmp_path / "log", "--brokers", "2", "--topic", "three:3",
                            "--topic", "dflt", "--default-queues", "2", "--acl", str(tmp_path / "acl.yml"))
    try:
        with Wire(ns) as w:
            for topic, n in (("three", 3), ("dflt", 2)):
                route = decode_route(w.request(req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})).body)
                assert [(q.broker_name, q.read_queue_nums) for q in route.queue_datas] == \
                    [("broker-a", n), ("broker-b", n)]
        assert (tmp_path / "d" / "broker-b" / "commitlog").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_slaves_from_the_command_line(tmp_path: Path) -> None:
    proc, ns = start_broker(tmp_path / "d", tmp_path / "log", "--slaves", "1", "--topic", "s:1",
                            "--slave-sync-interval-ms", "200")
    try:
        with Wire(ns) as w:
            route = decode_route(w.request(req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "s"})).body)
        [broker] = route.broker_datas
        assert sorted(broker.broker_addrs) == [0, 1]
        with Wire(broker.broker_addrs[0]) as m:
            assert send_msg(m, "s", b"copied").code == 0
        with Wire(broker.broker_addrs[1]) as slave:
            assert wait_for(lambda: max_offset(slave, "s", 0) == 1, 10)
            assert send_msg(slave, "s", b"refused").code == 14
        assert (tmp_path / "d" / "broker-a-1" / "commitlog").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_busy_namesrv_port_exits_1(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "rocketmq_spark.cli", "broker", "--namesrv-port", str(port),
                               "--data-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "cannot start" in done.stderr and "nameServer=" not in done.stdout


def test_main_leaves_the_callers_signal_mask_as_it_was(tmp_path) -> None:
    import signal

    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    assert main(["--data-dir", str(tmp_path), "--namesrv-port", "0", "--acl", str(tmp_path / "missing.yml")]) != 0
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before
