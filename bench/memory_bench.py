"""Peak memory of the read path: the Python workers and the sidecar during one
Trigger.AvailableNow read of a large backlog, with no maxMessagesPerTrigger.

    python bench/memory_bench.py [--messages 100000,1000000] [--size 64] [--mode orderly]

For each backlog size: a fresh embedded broker subprocess (async flush) gets that many small
messages over 4 queues (send_batch from several threads); then a Spark driver in a
subprocess (local[2]) reads the whole topic once (Trigger.AvailableNow, noop sink) through
a sidecar auto-started in a private directory. Meanwhile this process samples every
process of the driver's tree and the sidecar: VmHWM (peak resident set) from
/proc/<pid>/status, so no psutil is needed; each process is classified by its command line.
Prints one table row per size: read time, rows/s, the largest peak of one Python process
running read() (the ``pyspark.daemon`` running ``pyspark.worker`` and its forks), of the
driver's streaming source runner (offsets, planning), of the sidecar, of the JVM and of
the driver's own Python. VmHWM of a forked worker includes pages shared with its parent.

``python bench/memory_bench.py read ...`` is the driver process itself (used internally).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BrokerProcess, Timer, sidecar_pid, table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "membench"
QUEUES = 4
SEND_BATCH = 256
PRODUCER_THREADS = 4


# ------------------------------------------------------------------ the driver process

def read(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="memory_bench.py read")
    p.add_argument("--namesrv", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--local-dir", required=True)
    p.add_argument("--mode", default="orderly")
    args = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("rocketmq-memory-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.local.dir", args.local_dir)
             .config("spark.python.worker.reuse", "true")
             .config("spark.driver.memory", "1g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = (spark.readStream.format("rocketmq").option("nameServer", args.namesrv)
          .option("topic", TOPIC).option("consumerGroup", f"{TOPIC}-{args.mode}")
          .option("consumeMode", args.mode).option("startingOffsets", "earliest").load())
    with Timer() as t:
        q = (df.writeStream.format("noop").option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True).start())
        q.awaitTermination()
    rows = sum(pr["numInputRows"] for pr in q.recentProgress)
    print(f"READ rows={rows} seconds={t.seconds:.3f} batches={len(q.recentProgress)}", flush=True)
    spark.stop()
    return 0


# ------------------------------------------------------------------ /proc sampling

def _status_kb(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def _descendants(root: int) -> list[int]:
    kids, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


def role(cmdline: str) -> str:
    """What a process of the driver's tree is, from its command line."""
    words = cmdline.split()
    if "rocketmq_spark.sidecar.cli" in words:
        return "sidecar"
    exe = os.path.basename(words[0]) if words else ""
    if exe == "java":
        return "jvm"
    if not exe.startswith("python"):
        # a shell or `env` running spark-submit's script, which execs java later: looked at
        # again at the next sample (its arguments end in "pyspark-shell", which made it a
        # Python helper for good when a sample caught `env`, and hid the driver's JVM)
        return "other"
    if "read" in words and any(w.endswith("memory_bench.py") for w in words):
        return "driver-python"
    if "pyspark.daemon" in words and "pyspark.worker" in words:
        return "read-worker"       # executes read(): the daemon and the workers it forks
    if "pyspark.sql.streaming.python_streaming_source_runner" in words:
        return "source-runner"     # the stream reader on the driver: offsets, planning
    if any(w.startswith("pyspark") for w in words):
        return "python-helper"     # data source lookup, creation, planning
    return "other"


@dataclass
class Sampler:
    """Polls the VmHWM of ``root``'s process tree and of the sidecar in ``sidecar_dir``."""

    root: int
    sidecar_dir: Path
    interval: float = 0.1
    peaks: dict[int, tuple[str, int]] = field(default_factory=dict)   # pid -> (role, kB)
    cmdlines: dict[int, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    sidecar: int | None = None

    def _sample(self) -> None:
        if self.sidecar is None:
            self.sidecar = sidecar_pid(self.sidecar_dir, timeout=0.5)
        pids = set(_descendants(self.root))
        if self.sidecar is not None:
            pids.add(self.sidecar)
        for pid in pids:
            hwm = _status_kb(pid, "VmHWM")
            if hwm is None:
                continue
            name, peak = self.peaks.get(pid) or ("other", 0)
            if name == "other":     # first sight, or a shell that may have exec'd java since
                self.cmdlines[pid] = _cmdline(pid)
                name = role(self.cmdlines[pid])
            self.peaks[pid] = (name, max(hwm, peak))

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> "Sampler":
        self._thread = threading.Thread(target=self.run, name="vmhwm-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()          # the sidecar outlives the read: its final peak

    def by_role(self, name: str) -> list[int]:
        return [kb for r, kb in self.peaks.values() if r == name]


# ------------------------------------------------------------------ producing

def produce(namesrv: str, total: int, size: int) -> float:
    """``total`` messages of ``size`` bytes over the topic's queues; returns seconds."""
    from rocketmq_spark.client import ClientConfig, MQClient
    from rocketmq_spark.structs import Message

    body = (b"m" * size)[:size]

    def worker(k: int) -> int:
        c = MQClient(ClientConfig.parse(namesrv, request_timeout=30.0))
        try:
            queues = c.publish_queues(TOPIC)
            share = total // PRODUCER_THREADS + (1 if k < total % PRODUCER_THREADS else 0)
            sent, i = 0, 0
            while sent < share:
                n = min(SEND_BATCH, share - sent)
                r = c.send_batch([Message(TOPIC, body) for _ in range(n)],
                                 queue=queues[(k + i) % len(queues)])
                if r.status != "SEND_OK":
                    raise RuntimeError(f"send failed: {r}")
                sent += n
                i += 1
            return sent
        finally:
            c.close()

    with Timer() as t, ThreadPoolExecutor(PRODUCER_THREADS) as pool:
        sent = sum(pool.map(worker, range(PRODUCER_THREADS)))
    assert sent == total, (sent, total)
    return t.seconds


# ------------------------------------------------------------------ one size

def measure(total: int, size: int, mode: str, work: Path) -> dict[str, object]:
    work.mkdir(parents=True, exist_ok=True)
    sidecar_dir = Path(tempfile.mkdtemp(prefix="rmq-mem-sc-"))
    sidecar_dir.chmod(0o700)
    broker = BrokerProcess(work / "rocketmq", topics=(f"{TOPIC}:{QUEUES}",), log=work / "broker.log")
    proc: subprocess.Popen | None = None
    try:
        broker.start()
        produce_s = produce(broker.namesrv_addr, total, size)
        env = dict(os.environ)
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env["ROCKETMQ_SPARK_SIDECAR_DIR"] = str(sidecar_dir)
        (work / "local").mkdir(exist_ok=True)
        log = work / "driver.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "read",
                                     "--namesrv", broker.namesrv_addr, "--checkpoint",
                                     str(work / "checkpoint"), "--local-dir", str(work / "local"),
                                     "--mode", mode],
                                    cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            with Sampler(proc.pid, sidecar_dir) as sampler:
                code = proc.wait(timeout=3600)
        text = log.read_text(errors="replace")
        if code != 0 or "READ rows=" not in text:
            raise RuntimeError(f"the read failed ({code}); {log} ends with:\n{text[-3000:]}")
        fields = dict(kv.split("=") for kv in text.split("READ ", 1)[1].split()[:3])
        rows, seconds = int(fields["rows"]), float(fields["seconds"])
        if rows != total:
            raise RuntimeError(f"read {rows} rows, expected {total}")
        mb = lambda kbs: round(max(kbs, default=0) / 1024, 1)  # noqa: E731
        workers = sampler.by_role("read-worker")
        return {"messages": total, "body B": size, "mode": mode, "produce s": round(produce_s, 1),
                "read s": round(seconds, 1), "rows/s": int(rows / seconds),
                "read workers": len(workers), "read worker MB": mb(workers),
                "source runner MB": mb(sampler.by_role("source-runner")),
                "sidecar MB": mb(sampler.by_role("sidecar")),
                "driver JVM MB": mb(sampler.by_role("jvm")),
                "driver py MB": mb(sampler.by_role("driver-python"))}
    finally:
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)    # anything of the driver's left
            except ProcessLookupError:
                pass
        pid = sidecar_pid(sidecar_dir)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
        broker.stop()
        shutil.rmtree(sidecar_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["read"]:
        return read(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", default="100000,1000000",
                   help="comma-separated backlog sizes (default 100000,1000000)")
    p.add_argument("--size", type=int, default=64, help="body bytes (default 64)")
    p.add_argument("--mode", choices=("orderly", "concurrent"), default="orderly")
    p.add_argument("--work", default=None, help="working directory (default: temporary, removed)")
    args = p.parse_args(argv)
    try:
        sizes = [int(s) for s in args.messages.split(",") if s.strip()]
    except ValueError:
        p.error(f"--messages: {args.messages!r} is not a comma-separated list of integers")
    if not sizes or any(n < 1 for n in sizes):
        p.error(f"--messages: sizes must be >= 1, got {args.messages!r}")
    if args.size < 1:
        p.error(f"--size must be >= 1, got {args.size}")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="rmq-membench-"))
    rows = []
    try:
        for n in sizes:
            rows.append(measure(n, args.size, args.mode, work / str(n)))
            print(f"measured {n}: {rows[-1]}", flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
