"""``rocketmq-spark sidecar``: run the gRPC sidecar in the foreground.

    rocketmq-spark sidecar [--listen unix:PATH|HOST:PORT] [--idle-timeout SEC]

Without ``--listen`` it takes the per-host socket that ``sidecar=auto`` looks for
(``spawn.default_runtime_dir()/sidecar.sock``). Prints ``sidecar listening on ADDRESS``
once it accepts calls; SIGTERM or Ctrl-C stop it.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import signal
import sys
import threading

from rocketmq_spark.errors import RocketMQError


# glibc's mallopt parameters
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> bool:
    """Have glibc keep freed blocks of up to 32 MiB for reuse instead of mapping fresh pages
    for each: the decoder allocates a record batch's columns (MiBs) batch after batch, and
    with the defaults each comes from a new mapping whose pages fault in again (measured:
    the compiled decode 390 -> 216 ns a message). The sidecar's memory stays at what its
    batches in flight need at most. False where the C library has no mallopt (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, 256 << 20))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rocketmq-spark sidecar",
                                description="Run the rocketmq_spark gRPC sidecar in the foreground.")
    p.add_argument("--listen", metavar="ADDRESS",
                   help="unix:PATH or HOST:PORT (default: the per-host socket of sidecar=auto)")
    p.add_argument("--idle-timeout", metavar="SEC", type=float, default=0.0,
                   help="exit after SEC seconds without calls (0 = never, the default); "
                        "before the first call, after 30 s at the soonest")
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.idle_timeout < 0:
        print(f"rocketmq-spark sidecar: --idle-timeout must be >= 0, got {args.idle_timeout:g}",
              file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    keep_freed_memory()
    from rocketmq_spark.sidecar import server, spawn

    try:
        listen = args.listen
        if listen is None:
            listen = f"unix:{spawn.private_runtime_dir() / spawn.SOCKET_NAME}"
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        server.serve(listen, args.idle_timeout, stop=stop,
                     on_ready=lambda addr: print(f"sidecar listening on {addr}", flush=True))
    except RocketMQError as exc:
        print(f"rocketmq-spark sidecar: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
