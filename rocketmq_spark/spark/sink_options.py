"""The sink's options (``df.write.format("rocketmq")``), parsed once into a frozen value.

Like the source's (``options.py``), each option is looked up in a table (name -> parser,
help); a bad value raises :class:`ConfigError` naming the option and what it accepts, and
an unknown option (a source-only option such as ``consumerGroup``, or a typo) is an error.
The parsers of options shared with the source (``nameServer``, ``sidecar``, ``accessKey``,
``secretKey``) are the source's own, so both accept exactly the same values.

Secrets (``accessKey``, ``secretKey``, ``tlsKeyPassword``) never appear in ``repr``, in errors or in logs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from rocketmq_spark.errors import ConfigError
from rocketmq_spark.client.mqclient import DEFAULT_PRODUCER_GROUP
from rocketmq_spark.remoting.compression import CODECS, COMPRESS_OVER_BYTES, DEFAULT_COMPRESSION, Compression
from rocketmq_spark.sidecar import Cluster
from rocketmq_spark.sidecar.model import check_id
from rocketmq_spark.sidecar.txnlog import DEFAULT_LOG_TOPIC
from rocketmq_spark.spark import options as source_options
from rocketmq_spark.spark.options import OptionSpec
from rocketmq_spark.tls import TlsSettings

__all__ = ["SinkOptions", "parse", "SINK_OPTIONS", "DEFAULT_BATCH_SIZE", "MAX_BATCH_SIZE",
           "AT_LEAST_ONCE", "EXACTLY_ONCE"]

DEFAULT_BATCH_SIZE = 256     # messages per Send call to the sidecar
MAX_BATCH_SIZE = 8192
SINK_BROKER_UNAVAILABLE_MS = 60_000   # a keyed row waits this long for a broker that cannot be reached
AT_LEAST_ONCE, EXACTLY_ONCE = "at-least-once", "exactly-once"


@dataclass(frozen=True)
class SinkOptions:
    name_server: str
    topic: str | None                # None: every row names its topic (the `topic` column)
    producer_group: str | None       # None: the sidecar's default producer group
    sidecar: str
    batch_size: int
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    tls: TlsSettings | None = None
    delivery_guarantee: str = AT_LEAST_ONCE
    transactional_id: str | None = None
    transaction_log_topic: str = DEFAULT_LOG_TOPIC
    broker_unavailable_ms: int = SINK_BROKER_UNAVAILABLE_MS
    request_timeout_ms: int = source_options.REQUEST_TIMEOUT_MS
    compression: Compression = DEFAULT_COMPRESSION

    @property
    def exactly_once(self) -> bool:
        return self.delivery_guarantee == EXACTLY_ONCE

    @property
    def group(self) -> str:
        """The producer group sends name (the sidecar's default when none is set)."""
        return self.producer_group or DEFAULT_PRODUCER_GROUP

    @property
    def cluster(self) -> Cluster:
        return Cluster(self.name_server, self.access_key, self.secret_key, self.tls, self.request_timeout_ms)


def _one_topic(name: str, raw: str) -> str:
    topics = source_options.OPTIONS["topic"].parse(name, raw)
    if len(topics) != 1:
        raise ConfigError(f"option {name!r}: {raw!r} names {len(topics)} topics; the sink writes "
                          f"to one (give each row its own with a 'topic' column)")
    return topics[0]


def _batch_size(name: str, raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"option {name!r}: {raw!r} is not an integer") from None
    if not 1 <= value <= MAX_BATCH_SIZE:
        raise ConfigError(f"option {name!r}: {value} must be between 1 and {MAX_BATCH_SIZE}")
    return value


def _txn_id(name: str, raw: str) -> str:
    value = raw.strip()
    try:
        return check_id(f"option {name!r}:", value)
    except ConfigError as exc:
        raise ConfigError(str(exc)) from None


def _shared(name: str) -> Callable[[str, str], Any]:
    return source_options.OPTIONS[name.lower()].parse


SINK_OPTIONS: dict[str, OptionSpec] = {s.name.lower(): s for s in [
    OptionSpec("nameServer", _shared("nameServer"),
               "required: host:port of the NameServer(s), ';'-separated"),
    OptionSpec("topic", _one_topic, "the topic of rows whose 'topic' column is absent or null"),
    OptionSpec("producerGroup", source_options.OPTIONS["consumergroup"].parse,
               "producer group named in send requests (default: the sidecar's)"),
    OptionSpec("sidecar", _shared("sidecar"), "auto (default) | host:port | unix:/path"),
    OptionSpec("batchSize", _batch_size,
               f"messages per Send call to the sidecar (default {DEFAULT_BATCH_SIZE})"),
    OptionSpec("accessKey", _shared("accessKey"), "ACL access key"),
    OptionSpec("secretKey", _shared("secretKey"), "ACL secret key"),
    OptionSpec("deliveryGuarantee", source_options._choice(AT_LEAST_ONCE, EXACTLY_ONCE),
               f"{AT_LEAST_ONCE} (default) | {EXACTLY_ONCE}: transactional messages committed "
               "with Spark's batch"),
    OptionSpec("transactionalId", _txn_id,
               "exactly-once: the query's name in the transaction log (default: from its checkpointLocation)"),
    OptionSpec("brokerUnavailableTimeoutMs", source_options.OPTIONS["brokerunavailabletimeoutms"].parse,
               f"how long a keyed row (and every exactly-once row) waits for its queue's broker when it "
               f"cannot be reached (a master restarting) before the task fails (default "
               f"{SINK_BROKER_UNAVAILABLE_MS}; 0: at once); unkeyed rows go to another broker at once"),
    OptionSpec("requestTimeoutMs", source_options.OPTIONS["requesttimeoutms"].parse,
               source_options.OPTIONS["requesttimeoutms"].help),
    OptionSpec("compressionType", source_options._choice(*CODECS),
               "zlib (default) | lz4 | zstd | none: how bodies of compressBodyOverBytes or more "
               "are compressed (lz4 and zstd need 5.x brokers and consumers)"),
    OptionSpec("compressBodyOverBytes", source_options._int_range(0),
               f"bodies of this many bytes or more are compressed (default {COMPRESS_OVER_BYTES}, "
               "as the Java producer)"),
    OptionSpec("transactionLogTopic", _one_topic,
               f"exactly-once: the topic of the transaction log (default {DEFAULT_LOG_TOPIC})"),
    *source_options.TLS_OPTIONS,
]}

# Options Spark itself passes to a sink along with the user's.
_IGNORED = frozenset({"path", "checkpointlocation"})


def parse(options: Mapping[str, str]) -> SinkOptions:
    """Spark's options (any key case) -> :class:`SinkOptions`; ConfigError naming the option."""
    values = source_options.parse_table(options, SINK_OPTIONS, _IGNORED, "the rocketmq sink")

    if "nameserver" not in values:
        raise ConfigError(f"option 'nameServer' is required ({SINK_OPTIONS['nameserver'].help})")
    if ("accesskey" in values) != ("secretkey" in values):
        raise ConfigError("options 'accessKey' and 'secretKey' must be set together")
    guarantee = values.get("deliveryguarantee", AT_LEAST_ONCE)
    for name in ("transactionalId", "transactionLogTopic"):
        if name.lower() in values and guarantee != EXACTLY_ONCE:
            raise ConfigError(f"option {name!r} needs deliveryGuarantee={EXACTLY_ONCE}")
    return SinkOptions(
        name_server=values["nameserver"],
        topic=values.get("topic"),
        producer_group=values.get("producergroup"),
        sidecar=values.get("sidecar", "auto"),
        batch_size=values.get("batchsize", DEFAULT_BATCH_SIZE),
        access_key=values.get("accesskey"),
        secret_key=values.get("secretkey"),
        tls=source_options.tls_settings(values),
        delivery_guarantee=guarantee,
        transactional_id=values.get("transactionalid"),
        transaction_log_topic=values.get("transactionlogtopic", DEFAULT_LOG_TOPIC),
        broker_unavailable_ms=values.get("brokerunavailabletimeoutms", SINK_BROKER_UNAVAILABLE_MS),
        request_timeout_ms=values.get("requesttimeoutms", source_options.REQUEST_TIMEOUT_MS),
        compression=Compression(values.get("compressiontype", DEFAULT_COMPRESSION.codec),
                                values.get("compressbodyoverbytes", COMPRESS_OVER_BYTES)),
    )
