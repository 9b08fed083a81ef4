"""rocketmq_spark: Apache RocketMQ for PySpark Structured Streaming.

Layers (each package owns one thing, see docs/architecture.md):
remoting (sans-IO wire codec) -> client (sockets, operations) -> sidecar (gRPC, per host)
-> spark (the DataSource named ``rocketmq``). ``embedded`` is a RocketMQ-compatible
NameServer + Broker for laptops and tests; nothing in the source depends on it.
"""

__version__ = "0.1.0"
