"""Send failed rows back to RocketMQ from ``foreachBatch`` (concurrent mode's RECONSUME_LATER).

    def process(batch_df, batch_id):
        failed = batch_df.where(...)            # rows the job could not handle
        send_back(failed, options=source_options, delay_level=3)

Each row goes back through the sidecar's SendBack (CONSUMER_SEND_MSG_BACK): the broker
stores it in ``%RETRY%<consumerGroup>`` with ``reconsume_times + 1`` and, after the delay,
the stream (``consumeMode=concurrent``, which reads that retry topic) sees it again with
its original topic. After ``max_reconsume_times`` it goes to ``%DLQ%<consumerGroup>``.

Rows need the source's ``topic``, ``broker``, ``msg_id`` and ``offset_msg_id`` columns (the
offset message id locates the stored message). A DataFrame is sent from the executors
(``foreachPartition``, each through its host's sidecar); a list of rows from the caller.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping

from rocketmq_spark.errors import ConfigError
from rocketmq_spark.remoting.codes import DELAY_LEVELS_MS
from rocketmq_spark.sidecar import Cluster, SendBackItem
from rocketmq_spark.spark import link
from rocketmq_spark.spark import options as source_options

__all__ = ["send_back", "RetrySettings", "REQUIRED_COLUMNS"]

REQUIRED_COLUMNS = ("topic", "broker", "msg_id", "offset_msg_id")
_CHUNK = 256          # items per SendBack call


class RetrySettings:
    """Where and how to send back: cluster, group, sidecar, delay, max reconsume times."""

    def __init__(self, opts: Mapping[str, str], *, delay_level: int,
                 max_reconsume_times: int) -> None:
        if isinstance(delay_level, bool) or not isinstance(delay_level, int) \
                or not -1 <= delay_level <= len(DELAY_LEVELS_MS):
            raise ConfigError(f"delay_level: {delay_level!r} is not one of -1 (straight to the DLQ), "
                              f"0 (the broker chooses: 3 + reconsume times) or 1..{len(DELAY_LEVELS_MS)}")
        if isinstance(max_reconsume_times, bool) or not isinstance(max_reconsume_times, int) \
                or max_reconsume_times < 1:
            raise ConfigError(f"max_reconsume_times: {max_reconsume_times!r} must be an integer >= 1")
        lowered = {str(k).lower(): v for k, v in opts.items()}
        if "topic" in lowered:   # the source's own options: parse them all the same way
            parsed = source_options.parse(opts, "stream")
            self.name_server, self.group = parsed.name_server, parsed.consumer_group
            self.sidecar = parsed.sidecar
            self.access_key, self.secret_key = parsed.access_key, parsed.secret_key
            self.tls = parsed.tls
        else:
            spec = source_options.OPTIONS

            def get(name: str, default: Any = None) -> Any:
                raw = lowered.get(name.lower())
                if raw is None:
                    if default is None and name in ("nameServer", "consumerGroup"):
                        raise ConfigError(f"option {name!r} is required to send rows back")
                    return default
                return spec[name.lower()].parse(name, str(raw))

            tls_names = {t.name.lower() for t in source_options.TLS_OPTIONS}
            unknown = sorted(set(lowered) - {"nameserver", "consumergroup", "sidecar",
                                              "accesskey", "secretkey"} - tls_names)
            if unknown:
                raise ConfigError(f"unknown option {unknown[0]!r} for send_back; give nameServer, "
                                  f"consumerGroup, sidecar, accessKey, secretKey, the tls options "
                                  f"(or the source's options)")
            self.tls = source_options.tls_settings(
                {n: get(t.name) for t in source_options.TLS_OPTIONS
                 if (n := t.name.lower()) in lowered})
            self.name_server, self.group = get("nameServer"), get("consumerGroup")
            self.sidecar = get("sidecar", "auto")
            self.access_key, self.secret_key = get("accessKey"), get("secretKey")
            if (self.access_key is None) != (self.secret_key is None):
                raise ConfigError("options 'accessKey' and 'secretKey' must be set together")
        self.delay_level = delay_level
        self.max_reconsume_times = max_reconsume_times

    @property
    def cluster(self) -> Cluster:
        return Cluster(self.name_server, self.access_key, self.secret_key, self.tls)

    def __repr__(self) -> str:   # no secrets
        return (f"RetrySettings(name_server={self.name_server!r}, group={self.group!r}, "
                f"delay_level={self.delay_level}, max_reconsume_times={self.max_reconsume_times})")


def _item(row: Any, s: RetrySettings) -> SendBackItem:
    data = row if isinstance(row, Mapping) else row.asDict() if hasattr(row, "asDict") else {}
    missing = [c for c in REQUIRED_COLUMNS if c not in data]
    if missing:
        raise ConfigError(f"send_back: each row needs the columns {', '.join(REQUIRED_COLUMNS)} "
                          f"of the rocketmq source; missing {', '.join(missing)}")
    values = {c: data[c] for c in REQUIRED_COLUMNS}
    if not values["offset_msg_id"]:
        raise ConfigError("send_back: a row has an empty offset_msg_id")
    return SendBackItem(offset_msg_id=str(values["offset_msg_id"]),
                        broker_name=str(values["broker"] or ""),
                        origin_msg_id=str(values["msg_id"] or ""),
                        origin_topic=str(values["topic"] or ""),
                        delay_level=s.delay_level,
                        max_reconsume_times=s.max_reconsume_times)


def _send(rows: Iterable[Any], s: RetrySettings) -> int:
    sent = 0
    chunk: list[SendBackItem] = []
    cluster = s.cluster

    def flush() -> None:
        items = list(chunk)
        link.call(s.sidecar, lambda c: c.send_back(cluster, s.group, items))
        chunk.clear()

    for row in rows:
        chunk.append(_item(row, s))
        sent += 1
        if len(chunk) >= _CHUNK:
            flush()
    if chunk:
        flush()
    return sent


def send_back(rows: Any, *, options: Mapping[str, str] | None = None, delay_level: int = 0,
              max_reconsume_times: int = 16, **more_options: str) -> int:
    """Send ``rows`` (a DataFrame, or an iterable of Rows/dicts) back for redelivery.

    ``options``/``more_options``: the source's options, or at least ``nameServer`` and
    ``consumerGroup`` (plus ``sidecar``, ``accessKey``/``secretKey`` when used).
    ``delay_level``: 0 lets the broker choose (3 + reconsume times), 1..18 picks one of
    RocketMQ's delay levels (1 s ... 2 h), -1 sends straight to ``%DLQ%<group>``.
    Returns the number of rows sent back.
    """
    s = RetrySettings({**(options or {}), **more_options}, delay_level=delay_level,
                      max_reconsume_times=max_reconsume_times)
    from pyspark.sql import DataFrame

    if isinstance(rows, DataFrame):
        missing = [c for c in REQUIRED_COLUMNS if c not in rows.columns]
        if missing:
            raise ConfigError(f"send_back: the DataFrame lacks column(s) {', '.join(missing)} "
                              f"of the rocketmq source")
        counter = rows.sparkSession.sparkContext.accumulator(0)

        def each(part: Iterator[Any]) -> None:
            counter.add(_send(part, s))

        rows.select(*REQUIRED_COLUMNS).foreachPartition(each)
        return int(counter.value)
    return _send(rows, s)
