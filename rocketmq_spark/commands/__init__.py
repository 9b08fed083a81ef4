"""Subcommands of ``rocketmq-spark`` that talk to a cluster with the client directly."""
