"""A Spark standalone cluster on loopback, started from the pip package's ``bin/spark-class``.

    with SparkStandalone(tmp, hosts={"host-1": env1, "host-2": env2}) as spark:
        spark.master_url          # "spark://127.0.0.1:PORT"
        spark_submit(spark.master_url, script, args, env=...)

The pyspark wheel ships ``bin/spark-class`` but not the ``start-master.sh`` scripts, so the
Master and each Worker are started directly (``org.apache.spark.deploy.master.Master`` /
``...worker.Worker``) on 127.0.0.1 with free ports. Each worker stands for a host: it gets
its own work directory, local directory and extra environment (e.g. its own
``ROCKETMQ_SPARK_SIDECAR_DIR``), which the executors it launches inherit (a standalone
worker starts executors with its own environment plus the application's
``spark.executorEnv.*``). Every process runs in a process group of its own and is stopped
by that group's id (SIGTERM, then SIGKILL), which takes the worker's executors with it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Mapping

import pyspark

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
SPARK_SUBMIT = SPARK_HOME / "bin" / "spark-submit"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# Short-lived JVMs on a small machine: C1 only and a serial GC start markedly faster.
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
_MASTER_URL = re.compile(r"Starting Spark master at (spark://[0-9.]+:\d+)")
_REGISTERED = "Successfully registered with master"


def _wait_for_log(proc: subprocess.Popen, log: Path, pattern: re.Pattern[str] | str,
                  timeout: float, what: str) -> re.Match[str] | str:
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        found = pattern.search(text) if isinstance(pattern, re.Pattern) else (pattern if pattern in text else None)
        if found:
            return found
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready; "
                               f"its log {log} ends with:\n{text[-3000:]}")
        if time.monotonic() >= deadline:
            raise RuntimeError(f"{what} was not ready within {timeout:g} s; see {log}")
        time.sleep(0.1)


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    # Spark finds format("rocketmq") by scanning the Python path for pyspark_* modules, which
    # an editable install does not put there: the checkout goes on PYTHONPATH (a deployment
    # installs the wheel or ships the code with --py-files instead).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["SPARK_HOME"] = str(SPARK_HOME)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env["SPARK_DAEMON_JAVA_OPTS"] = FAST_JVM
    for k in ("ROCKETMQ_SPARK_SIDECAR_DIR", "SPARK_CONF_DIR", "ROCKETMQ_NAMESRV"):
        env.pop(k, None)
    return env


class SparkStandalone:
    """A Master and one Worker per entry of ``hosts`` (name -> extra environment)."""

    def __init__(self, root: Path, hosts: Mapping[str, Mapping[str, str]], *,
                 cores: int = 1, memory: str = "1g", start_timeout: float = 90.0) -> None:
        self.root = root
        self.hosts = {name: dict(env) for name, env in hosts.items()}
        self.cores, self.memory, self.start_timeout = cores, memory, start_timeout
        self.master_url = ""
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    def _launch(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(SPARK_CLASS), *args], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=self.root, start_new_session=True)
        self.procs[name], self.logs[name] = proc, log
        return proc

    def start(self) -> "SparkStandalone":
        self.root.mkdir(parents=True, exist_ok=True)
        env = base_env()
        # no REST submission server (it wants the fixed port 6066)
        env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"
        try:
            master = self._launch("master", [MASTER_CLASS, "--host", "127.0.0.1", "--port", "0",
                                             "--webui-port", "0"], env)
            found = _wait_for_log(master, self.logs["master"], _MASTER_URL, self.start_timeout,
                                  "the Spark master")
            assert isinstance(found, re.Match)
            self.master_url = found.group(1)
            for name, extra in self.hosts.items():
                work = self.root / name / "work"
                local = self.root / name / "local"
                work.mkdir(parents=True, exist_ok=True)
                local.mkdir(parents=True, exist_ok=True)
                wenv = {**base_env(), "SPARK_WORKER_DIR": str(work), "SPARK_LOCAL_DIRS": str(local),
                        **extra}
                self._launch(name, [WORKER_CLASS, "--host", "127.0.0.1", "--port", "0",
                                    "--webui-port", "0", "--cores", str(self.cores),
                                    "--memory", self.memory, "--work-dir", str(work),
                                    self.master_url], wenv)
            for name in self.hosts:
                _wait_for_log(self.procs[name], self.logs[name], _REGISTERED, self.start_timeout,
                              f"Spark worker {name}")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Workers first (they end their executors), then the master."""
        order = [n for n in self.procs if n != "master"] + [n for n in self.procs if n == "master"]
        for name in order:
            _stop_group(self.procs[name])
        self.procs.clear()

    def __enter__(self) -> "SparkStandalone":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _stop_group(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """SIGTERM the process group ``proc`` leads, then SIGKILL it if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout)
            if sig == signal.SIGTERM:
                try:   # the leader is gone; make sure nothing of its group stays behind
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break
        except subprocess.TimeoutExpired:
            continue


def submit_command(master_url: str, script: Path, args: list[str], *, local_dir: Path,
                   conf: Mapping[str, str] | None = None) -> list[str]:
    """The ``spark-submit`` command line (client deploy mode) with this suite's settings."""
    settings = {
        "spark.ui.enabled": "false",
        "spark.local.dir": str(local_dir),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executor.memory": "512m",
        "spark.driver.memory": "512m",
        "spark.python.worker.reuse": "true",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        # wait for every executor before the first job, so each "host" gets tasks
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.level=WARN {FAST_JVM}",
        "spark.executor.extraJavaOptions": FAST_JVM,
        **(conf or {}),
    }
    cmd = [str(SPARK_SUBMIT), "--master", master_url, "--deploy-mode", "client"]
    for k, v in settings.items():
        cmd += ["--conf", f"{k}={v}"]
    return cmd + [str(script), *args]


def spark_submit(master_url: str, script: Path, args: list[str], *, env: Mapping[str, str],
                 local_dir: Path, conf: Mapping[str, str] | None = None,
                 timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    """``spark-submit --master MASTER_URL SCRIPT ARGS`` in client deploy mode (the driver runs
    here, in a process of its own with ``env``); returns the finished process."""
    cmd = submit_command(master_url, script, args, local_dir=local_dir, conf=conf)
    full_env = {**base_env(), **env}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=full_env, cwd=local_dir, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop_group(proc, timeout=10)
        out, err = proc.communicate()
        raise AssertionError(f"spark-submit {script.name} did not finish within {timeout:g} s:\n"
                             f"{out[-3000:]}\n{err[-5000:]}") from None
    finally:
        try:   # the driver's Python and anything else of its group
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
