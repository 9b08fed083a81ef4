"""The ``rocketmq-spark`` command. Each subcommand lives in its own module; this table
maps names to ``module:function`` taking ``argv`` and returning an exit code."""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("rocketmq_spark.embedded.cli:main", "run the embedded NameServer + broker(s)"),
    "sidecar": ("rocketmq_spark.sidecar.cli:main", "run the gRPC sidecar in the foreground"),
    "produce": ("rocketmq_spark.commands.produce:main", "send messages (file, stdin or a generated workload)"),
    "tail": ("rocketmq_spark.commands.tail:main", "follow a topic and print its messages"),
    "lag": ("rocketmq_spark.commands.lag:main", "a group's offsets and lag per queue"),
    "offsets": ("rocketmq_spark.commands.offsets:main", "reset a group's offsets (earliest, latest, time)"),
    "topics": ("rocketmq_spark.commands.topics:main", "list or create topics"),
}


def _usage() -> str:
    lines = ["usage: rocketmq-spark COMMAND [options]   (rocketmq-spark COMMAND --help)", "",
             "commands:"]
    lines += [f"  {name:<10} {desc}" for name, (_, desc) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = args[0], args[1:]
    entry = COMMANDS.get(name)
    if entry is None:
        print(f"rocketmq-spark: unknown command {name!r}; choose one of: {', '.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    module, _, func = entry[0].partition(":")
    return int(getattr(importlib.import_module(module), func)(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
