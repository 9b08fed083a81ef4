"""The source's options: every one parsed and validated here, once, into a frozen value.

Spark hands a data source its options as a case-insensitive dict of strings. ``parse``
looks each option up in :data:`OPTIONS` (name -> parser, default, help), so a bad value
raises :class:`ConfigError` naming the option and what it accepts, and an unknown option
(a typo such as ``startingOffset``) is an error rather than silently ignored.

Secrets (``accessKey``, ``secretKey``, ``tlsKeyPassword``) never appear in ``repr``, in
errors or in logs; Spark's own redaction hides them in plans and the UI (their names match
its ``spark.redaction.regex``).

Defaults and derived values, chosen to match what a RocketMQ consumer does:

* ``consumeMode=orderly`` (MessageListenerOrderly: locks, one partition per queue).
* ``messageModel=clustering``; ``startingOffsets=group`` for streams in clustering mode
  (RocketMQ's CONSUME_FROM_LAST_OFFSET), ``latest`` in broadcasting mode (there are no
  broker offsets to resume from), ``earliest`` for batch reads.
* ``consumerGroup``: ``spark-`` + the first 16 hex digits of the SHA-256 of the sorted,
  comma-joined topic list. Set it explicitly in production: two queries on the same
  topics would otherwise share a group (and its broker offsets and queue locks).
* ``lockOwner`` (orderly mode's lock owner on the broker): ``spark-`` + a hash of the
  consumer group, the topics and the subscription. Spark does not tell a Python source
  its checkpoint location or query name, so the owner is derived from what identifies the
  query; it is the same across restarts, so a restarted query takes its locks back at once
  instead of waiting for the broker to expire them (60 s). Two queries running at once with
  the same group and topics must set different ``lockOwner`` values (or groups).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping

from rocketmq_spark.errors import ConfigError
from rocketmq_spark.tls import TlsSettings, Verify
from rocketmq_spark.spark.offsets import (
    EarliestStart, EndSpec, GroupStart, LatestEnd, LatestStart, SpecificOffsets, StartSpec,
    TimestampEnd, TimestampStart, parse_user_json)

if TYPE_CHECKING:
    from rocketmq_spark.remoting.bodies import ConsumerData

__all__ = ["SourceOptions", "parse", "OPTIONS", "ReadKind", "ORDERLY", "CONCURRENT",
           "CLUSTERING", "BROADCASTING"]

ReadKind = Literal["stream", "batch"]

ORDERLY, CONCURRENT = "orderly", "concurrent"
CLUSTERING, BROADCASTING = "clustering", "broadcasting"

# RocketMQ's own rules (Validators.java): letters, digits, % | - _ ; topic <= 127 chars.
_NAME_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_TOPIC_MAX, _GROUP_MAX = 127, 255
_HOSTPORT_RE = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")

# A broker that does not answer may be restarting (an Apache broker takes tens of seconds)
# or dead (a NameServer drops its route after 120 s): its queues wait this long.
BROKER_UNAVAILABLE_MS = 300_000
REQUEST_TIMEOUT_MS = 3_000   # a request's answer (sidecar.model.DEFAULT_REQUEST_TIMEOUT_MS), as RocketMQ's sendMsgTimeout
ARROW_BATCH_ROWS = 4096          # rows per Arrow record batch the sidecar sends back


@dataclass(frozen=True)
class SourceOptions:
    name_server: str
    topics: tuple[str, ...]
    consumer_group: str
    consume_mode: str                      # ORDERLY | CONCURRENT
    message_model: str                     # CLUSTERING | BROADCASTING
    sub_expression: str
    sub_expression_type: str               # TAG | SQL92 (RocketMQ's ExpressionType)
    starting: StartSpec
    ending: EndSpec                        # batch reads only (LatestEnd for streams)
    fail_on_data_loss: bool
    max_messages_per_trigger: int | None
    min_partitions: int | None
    pull_batch_size: int
    sidecar: str
    commit_offsets_to_broker: bool
    lock_owner: str
    queue_refresh_ms: int
    broker_unavailable_ms: int = BROKER_UNAVAILABLE_MS
    request_timeout_ms: int = REQUEST_TIMEOUT_MS
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    arrow_batch_rows: int = ARROW_BATCH_ROWS
    tls: TlsSettings | None = None

    @property
    def orderly(self) -> bool:
        return self.consume_mode == ORDERLY

    @property
    def clustering(self) -> bool:
        return self.message_model == CLUSTERING

    @property
    def uses_locks(self) -> bool:
        """Orderly clustering consumers lock their queues; broadcasting ones do not."""
        return self.orderly and self.clustering

    @property
    def reads_retry_topic(self) -> bool:
        """Concurrent clustering consumers also read ``%RETRY%<group>``."""
        return not self.orderly and self.clustering

    @property
    def commits_to_broker(self) -> bool:
        return self.clustering and self.commit_offsets_to_broker

    @property
    def retry_topic(self) -> str:
        from rocketmq_spark.remoting.codes import retry_topic

        return retry_topic(self.consumer_group)

    @property
    def subscribed_topics(self) -> tuple[str, ...]:
        return self.topics + ((self.retry_topic,) if self.reads_retry_topic else ())


# ------------------------------------------------------------------ value parsers

def _str(name: str, raw: str) -> str:
    value = raw.strip()
    if not value:
        raise ConfigError(f"option {name!r} must not be empty")
    return value


def _choice(*allowed: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        value = raw.strip().lower()
        if value not in allowed:
            raise ConfigError(f"option {name!r}: {raw!r} is not one of {', '.join(allowed)}")
        return value
    return parse


def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"option {name!r}: {raw!r} is not one of true, false")
    return value == "true"


def _int_range(lo: int, hi: int | None = None) -> Callable[[str, str], int]:
    def parse(name: str, raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ConfigError(f"option {name!r}: {raw!r} is not an integer") from None
        if value < lo or (hi is not None and value > hi):
            span = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
            raise ConfigError(f"option {name!r}: {value} must be {span}")
        return value
    return parse


def _name_server(name: str, raw: str) -> str:
    parts = [p.strip() for p in raw.replace(",", ";").split(";") if p.strip()]
    if not parts:
        raise ConfigError(f"option {name!r} must not be empty: give host:port (several separated by ';')")
    for part in parts:
        m = _HOSTPORT_RE.match(part)
        if m is None or not 0 < int(m.group(2)) < 65536:
            raise ConfigError(f"option {name!r}: {part!r} is not host:port")
    return ";".join(parts)


def _check_name(option: str, kind: str, value: str, limit: int) -> str:
    if not _NAME_RE.match(value):
        raise ConfigError(f"option {option!r}: {kind} {value!r} may only contain letters, digits, "
                          f"'%', '|', '-' and '_'")
    if len(value) > limit:
        raise ConfigError(f"option {option!r}: {kind} {value[:40]!r}... is longer than {limit} characters")
    return value


def _topics(name: str, raw: str) -> tuple[str, ...]:
    topics = [t.strip() for t in raw.split(",")]
    if not any(topics):
        raise ConfigError(f"option {name!r} must name at least one topic (several separated by ',')")
    if not all(topics):
        raise ConfigError(f"option {name!r}: {raw!r} has an empty topic name")
    for t in topics:
        _check_name(name, "topic", t, _TOPIC_MAX)
    if len(set(topics)) != len(topics):
        raise ConfigError(f"option {name!r}: {raw!r} names a topic twice")
    return tuple(topics)


def _group(name: str, raw: str) -> str:
    return _check_name(name, "group", _str(name, raw), _GROUP_MAX)


def _owner(name: str, raw: str) -> str:
    value = _str(name, raw)
    if any(ch.isspace() or not ch.isprintable() for ch in value) or len(value) > _GROUP_MAX:
        raise ConfigError(f"option {name!r}: {raw!r} must be printable, without spaces, at most "
                          f"{_GROUP_MAX} characters (RocketMQ client ids look like ip@pid#name)")
    return value


def _expression_type(name: str, raw: str) -> str:
    from rocketmq_spark.remoting.bodies import EXPRESSION_TYPES

    value = raw.strip().upper()
    if value not in EXPRESSION_TYPES:
        raise ConfigError(f"option {name!r}: {raw!r} is not one of {', '.join(EXPRESSION_TYPES)}")
    return value


def _sql92(name: str, raw: str) -> str:
    """A selector is the brokers' to parse (their refusal carries its code and remark);
    only what cannot be one is refused here."""
    expr = raw.strip()
    if expr in ("", "*"):
        raise ConfigError(f"option {name!r}: subExpressionType=SQL92 needs a selector such as "
                          f"\"a > 5 AND TAGS IN ('TagA')\", not {raw!r}")
    return expr


def _sub_expression(name: str, raw: str) -> str:
    expr = raw.strip()
    if expr in ("", "*"):
        return "*"
    tags = [t.strip() for t in expr.split("||")]
    if not all(tags):
        raise ConfigError(f"option {name!r}: {raw!r} has an empty tag; write '*' or 'TagA || TagB'")
    if any(t == "*" for t in tags):
        raise ConfigError(f"option {name!r}: {raw!r} mixes '*' with tags; write '*' alone")
    return " || ".join(tags)


def _sidecar(name: str, raw: str) -> str:
    value = raw.strip()
    if value.lower() == "auto":
        return "auto"
    if value.startswith("unix:") and len(value) > len("unix:"):
        return value
    if _HOSTPORT_RE.match(value) and 0 < int(value.rsplit(":", 1)[1]) < 65536:
        return value
    raise ConfigError(f"option {name!r}: {raw!r} is not one of auto, host:port, unix:/path/to/socket")


def _secret(name: str, raw: str) -> str:
    if not raw.strip():
        raise ConfigError(f"option {name!r} must not be empty")
    return raw.strip()


def _raw(name: str, raw: str) -> str:
    return raw.strip()


def _verify(name: str, raw: str) -> Verify:
    try:
        return Verify(raw.strip().lower())
    except ValueError:
        raise ConfigError(f"option {name!r}: {raw!r} is not one of "
                          f"{', '.join(v.value for v in Verify)}") from None


@dataclass(frozen=True)
class OptionSpec:
    name: str                                  # canonical spelling, used in errors
    parse: Callable[[str, str], Any]
    help: str


OPTIONS: dict[str, OptionSpec] = {s.name.lower(): s for s in [
    OptionSpec("nameServer", _name_server, "required: host:port of the NameServer(s), ';'-separated"),
    OptionSpec("topic", _topics, "required: one topic or a comma-separated list"),
    OptionSpec("consumerGroup", _group, "default: spark-<hash of the topics>"),
    OptionSpec("consumeMode", _choice(ORDERLY, CONCURRENT), "orderly (default) | concurrent"),
    OptionSpec("messageModel", _choice(CLUSTERING, BROADCASTING), "clustering (default) | broadcasting"),
    OptionSpec("subExpression", _raw, "'*' (default) or 'TagA || TagB'; a SQL92 selector with subExpressionType=SQL92"),
    OptionSpec("subExpressionType", _expression_type, "TAG (default) | SQL92: how the brokers read subExpression"),
    OptionSpec("startingOffsets", _raw, "group | earliest | latest | JSON offsets"),
    OptionSpec("startingTimestamp", _int_range(0), "ms since the epoch: first message stored at or after it"),
    OptionSpec("endingOffsets", _raw, "batch reads: latest (default) | JSON offsets"),
    OptionSpec("endingTimestamp", _int_range(0), "batch reads, ms since the epoch: end before the first message stored at or after it"),
    OptionSpec("failOnDataLoss", _bool, "true (default) | false"),
    OptionSpec("maxMessagesPerTrigger", _int_range(1), "messages per micro-batch, over all queues"),
    OptionSpec("minPartitions", _int_range(1), "concurrent mode: split queue ranges into at least this many partitions"),
    OptionSpec("pullBatchSize", _int_range(1, 1024), "messages per broker pull (default 32)"),
    OptionSpec("sidecar", _sidecar, "auto (default) | host:port | unix:/path"),
    OptionSpec("commitOffsetsToBroker", _bool, "true (default) | false: commit each batch's end to the group"),
    OptionSpec("lockOwner", _owner, "orderly mode's lock owner id (default derived, stable across restarts)"),
    OptionSpec("queueRefreshIntervalMs", _int_range(0), "how often the queue list is re-read (default 5000)"),
    OptionSpec("requestTimeoutMs", _int_range(100, 600_000),
               f"how long a request to a NameServer or broker waits for its answer, long polls "
               f"excepted (default {REQUEST_TIMEOUT_MS}, as RocketMQ's sendMsgTimeout)"),
    OptionSpec("brokerUnavailableTimeoutMs", _int_range(0),
               "how long a broker may not answer before a stream fails (default 300000)"),
    OptionSpec("accessKey", _secret, "ACL access key"),
    OptionSpec("secretKey", _secret, "ACL secret key"),
]}

# How to reach the cluster, for the source, the sink and send_back alike.
TLS_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("tls", _bool, "false (default) | true: every connection to the cluster over TLS"),
    OptionSpec("tlsTrustCertPath", _str, "PEM file of the CAs to trust (default: the system's)"),
    OptionSpec("tlsVerify", _verify, "full (default: chain and host) | ca (chain only) | none (tests only)"),
    OptionSpec("tlsCertPath", _str, "client certificate (PEM), for clusters that require one"),
    OptionSpec("tlsKeyPath", _str, "the client certificate's private key (PEM)"),
    OptionSpec("tlsKeyPassword", _secret, "the private key's password"),
)
OPTIONS.update({s.name.lower(): s for s in TLS_OPTIONS})


def tls_settings(values: Mapping[str, Any]) -> TlsSettings | None:
    """The TLS options among parsed ``values`` (lower-case keys) as TlsSettings, None
    without ``tls=true``; ConfigError for a TLS option given without it."""
    if not values.get("tls", False):
        given = [s.name for s in TLS_OPTIONS[1:] if s.name.lower() in values]
        if given:
            raise ConfigError(f"option {given[0]!r} needs option 'tls' set to true")
        return None
    return TlsSettings(ca_file=values.get("tlstrustcertpath"), cert_file=values.get("tlscertpath"),
                       key_file=values.get("tlskeypath"), key_password=values.get("tlskeypassword"),
                       verify=values.get("tlsverify", Verify.FULL))

# Options Spark itself may pass along with the user's.
_IGNORED = frozenset({"path"})


def _hash(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:16]


def derived_group(topics: tuple[str, ...]) -> str:
    return "spark-" + _hash(",".join(sorted(topics)))


def derived_lock_owner(group: str, topics: tuple[str, ...], sub_expression: str) -> str:
    return "spark-" + _hash(group, ",".join(sorted(topics)), sub_expression)


def _parse_start(values: Mapping[str, Any], kind: ReadKind, message_model: str) -> StartSpec:
    raw = values.get("startingoffsets")
    ts = values.get("startingtimestamp")
    if raw is not None and ts is not None:
        raise ConfigError("options 'startingOffsets' and 'startingTimestamp' are exclusive: set one")
    if ts is not None:
        return TimestampStart(ts)
    if raw is None:
        if kind == "batch":
            return EarliestStart()
        return GroupStart() if message_model == CLUSTERING else LatestStart()
    word = raw.lower()
    allowed = ("group", "earliest") if kind == "batch" else ("group", "earliest", "latest")
    if raw.startswith("{"):
        return SpecificOffsets(parse_user_json("startingOffsets", raw, allow_latest=kind == "stream"))
    if word not in allowed:
        raise ConfigError(f"option 'startingOffsets': {raw!r} is not one of {', '.join(allowed)}, "
                          f"or JSON offsets {{\"topic\": {{\"broker\": {{\"0\": 42}}}}}}")
    if word == "group" and message_model == BROADCASTING:
        raise ConfigError("option 'startingOffsets': group needs messageModel=clustering "
                          "(broadcasting consumers keep no offsets on the broker)")
    return {"group": GroupStart(), "earliest": EarliestStart(), "latest": LatestStart()}[word]


def _parse_end(values: Mapping[str, Any], kind: ReadKind) -> EndSpec:
    raw = values.get("endingoffsets")
    ts = values.get("endingtimestamp")
    for name, value in (("endingOffsets", raw), ("endingTimestamp", ts)):
        if value is not None and kind == "stream":
            raise ConfigError(f"option {name!r} applies to batch reads only (spark.read), "
                              "not to streams")
    if raw is not None and ts is not None:
        raise ConfigError("options 'endingOffsets' and 'endingTimestamp' are exclusive: set one")
    if ts is not None:
        return TimestampEnd(ts)
    if raw is None:
        return LatestEnd()
    if raw.lower() == "latest":
        return LatestEnd()
    if raw.startswith("{"):
        offsets = parse_user_json("endingOffsets", raw)
        if any(o == -2 for o in offsets.values()):
            raise ConfigError("option 'endingOffsets': -2 (earliest) is not allowed as an end")
        return SpecificOffsets(offsets)
    raise ConfigError(f"option 'endingOffsets': {raw!r} is not one of latest, or JSON offsets")


def parse_table(options: Mapping[str, str], table: Mapping[str, OptionSpec], ignored: frozenset[str],
                what: str) -> dict[str, Any]:
    """Each option (any key case) parsed by its spec in ``table``, keyed by lower-case name;
    ``ignored`` keys (what Spark adds itself) are skipped; ConfigError naming the option."""
    values: dict[str, Any] = {}
    for key, raw in options.items():
        lowered = str(key).lower()
        if lowered in ignored:
            continue
        spec = table.get(lowered)
        if spec is None:
            raise ConfigError(f"unknown option {key!r} for {what}; known options: "
                              f"{', '.join(s.name for s in table.values())}")
        if raw is None:
            raise ConfigError(f"option {spec.name!r} has no value")
        values[lowered] = spec.parse(spec.name, str(raw))
    return values


def parse(options: Mapping[str, str], kind: ReadKind = "stream") -> SourceOptions:
    """Spark's options (any key case) -> :class:`SourceOptions`; ConfigError naming the option."""
    values = parse_table(options, OPTIONS, _IGNORED, "format 'rocketmq'")

    for required in ("nameServer", "topic"):
        if required.lower() not in values:
            raise ConfigError(f"option {required!r} is required ({OPTIONS[required.lower()].help})")
    if ("accesskey" in values) != ("secretkey" in values):
        raise ConfigError("options 'accessKey' and 'secretKey' must be set together")

    topics: tuple[str, ...] = values["topic"]
    group = values.get("consumergroup") or derived_group(topics)
    mode = values.get("consumemode", ORDERLY)
    model = values.get("messagemodel", CLUSTERING)
    expression_type = values.get("subexpressiontype", "TAG")
    parse_sub = _sub_expression if expression_type == "TAG" else _sql92
    sub = parse_sub("subExpression", values.get("subexpression", "*"))

    if mode == ORDERLY and "minpartitions" in values:
        raise ConfigError("option 'minPartitions' applies to consumeMode=concurrent only: orderly "
                          "mode reads each queue in exactly one partition, in offset order")
    if model == BROADCASTING and values.get("commitoffsetstobroker") is True:
        raise ConfigError("option 'commitOffsetsToBroker': true needs messageModel=clustering "
                          "(broadcasting consumers keep no offsets on the broker)")
    from rocketmq_spark.remoting.codes import RETRY_PREFIX

    if mode == CONCURRENT and model == CLUSTERING and RETRY_PREFIX + group in topics:
        raise ConfigError(f"option 'topic': {RETRY_PREFIX + group!r} is read automatically in "
                          f"consumeMode=concurrent; do not list it")

    starting, ending = _parse_start(values, kind, model), _parse_end(values, kind)
    if (isinstance(starting, TimestampStart) and isinstance(ending, TimestampEnd)
            and starting.timestamp_ms > ending.timestamp_ms):
        raise ConfigError(f"option 'startingTimestamp': {starting.timestamp_ms} is after "
                          f"'endingTimestamp' {ending.timestamp_ms}: the window is empty")

    return SourceOptions(
        name_server=values["nameserver"],
        topics=topics,
        consumer_group=group,
        consume_mode=mode,
        message_model=model,
        sub_expression=sub,
        sub_expression_type=expression_type,
        starting=starting,
        ending=ending,
        fail_on_data_loss=values.get("failondataloss", True),
        max_messages_per_trigger=values.get("maxmessagespertrigger"),
        min_partitions=values.get("minpartitions"),
        pull_batch_size=values.get("pullbatchsize", 32),
        sidecar=values.get("sidecar", "auto"),
        commit_offsets_to_broker=values.get("commitoffsetstobroker", True),
        lock_owner=values.get("lockowner") or derived_lock_owner(group, topics, sub),
        queue_refresh_ms=values.get("queuerefreshintervalms", 5000),
        broker_unavailable_ms=values.get("brokerunavailabletimeoutms", BROKER_UNAVAILABLE_MS),
        request_timeout_ms=values.get("requesttimeoutms", REQUEST_TIMEOUT_MS),
        access_key=values.get("accesskey"),
        secret_key=values.get("secretkey"),
        tls=tls_settings(values),
    )


_FROM_WHERE = {EarliestStart: "CONSUME_FROM_FIRST_OFFSET", TimestampStart: "CONSUME_FROM_TIMESTAMP"}


def consumer_data(opts: SourceOptions) -> "ConsumerData":
    """The query as a consumer of its group, as it registers with the brokers: it pulls
    (CONSUME_ACTIVELY), subscribes to its topics with ``subExpression`` (and, in concurrent
    clustering mode, to ``%RETRY%<group>`` with ``*``, as Java's push consumers do), and
    says where a new group starts (RocketMQ's consumeFromWhere). The wire types are
    imported here: parsing options (Spark's planning process) needs none of them."""
    from rocketmq_spark.remoting.bodies import ConsumerData, SubscriptionData

    subs = tuple(SubscriptionData(t, opts.sub_expression, expression_type=opts.sub_expression_type)
                 for t in opts.topics)
    if opts.reads_retry_topic:
        subs += (SubscriptionData(opts.retry_topic, "*"),)
    return ConsumerData(opts.consumer_group, "CONSUME_ACTIVELY", opts.message_model.upper(),
                        _FROM_WHERE.get(type(opts.starting), "CONSUME_FROM_LAST_OFFSET"), subs)
