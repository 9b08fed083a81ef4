"""Queue metadata (29-33), QUERY_MESSAGE (12) and admin requests (17, 21, 28, 202, 203, 204, 208), as 4.9.8 answers.

Bodies with non-string map keys are written the fastjson way (bare MessageQueue objects
as keys, section 4.2), because that is what the 4.9.8 broker sends.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

from rocketmq_spark.embedded.processors.base import BrokerContext, Call, Refuse
from rocketmq_spark.embedded.store.index import UNIQUE_QUERY_NUM
from rocketmq_spark.embedded.topics import MAX_QUEUE_NUMS, TopicConfig, is_system_topic, validate_topic
from rocketmq_spark.embedded.groups import SubscriptionGroupConfig
from rocketmq_spark.remoting.bodies import ConsumeStats, OffsetWrapper, dumps, loads_object
from rocketmq_spark.remoting.codes import SERVER_VERSION, ResponseCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import (CreateTopicRequestHeader, GetConsumeStatsRequestHeader,
                                             GetConsumerListRequestHeader, GetProducerConnectionListRequestHeader,
                                             QueryMessageRequestHeader, QueueRequestHeader,
                                             SearchOffsetRequestHeader, TopicRequestHeader, UNIQUE_KEY_QUERY,
                                             ViewMessageRequestHeader)
from rocketmq_spark.remoting.route import MessageQueue


# ---------------------------------------------------------------- queue metadata

def handle_max_offset(broker: BrokerContext, call: Call) -> RemotingCommand:
    h = QueueRequestHeader.from_ext(call.ext)
    return call.answer(ResponseCode.SUCCESS, ext={"offset": str(broker.store.max_offset(h.topic, h.queue_id))})


def handle_min_offset(broker: BrokerContext, call: Call) -> RemotingCommand:
    h = QueueRequestHeader.from_ext(call.ext)
    return call.answer(ResponseCode.SUCCESS, ext={"offset": str(broker.store.min_offset(h.topic, h.queue_id))})


def handle_search_offset(broker: BrokerContext, call: Call) -> RemotingCommand:
    h = SearchOffsetRequestHeader.from_ext(call.ext)
    offset = broker.store.search_offset(h.topic, h.queue_id, h.timestamp)
    return call.answer(ResponseCode.SUCCESS, ext={"offset": str(offset)})


def handle_earliest_time(broker: BrokerContext, call: Call) -> RemotingCommand:
    h = QueueRequestHeader.from_ext(call.ext)
    return call.answer(ResponseCode.SUCCESS, ext={"timestamp": str(broker.store.earliest_time(h.topic, h.queue_id))})


def handle_view_message(broker: BrokerContext, call: Call) -> RemotingCommand:
    h = ViewMessageRequestHeader.from_ext(call.ext)
    record = broker.store.message_at(h.offset)
    if record is None:
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}")
    return call.answer(ResponseCode.SUCCESS, body=record)


def handle_query_message(broker: BrokerContext, call: Call) -> RemotingCommand:
    """QUERY_MESSAGE as QueryMessageProcessor answers: the records concatenated, or
    QUERY_NOT_FOUND; both carry the index's last update (time and commit-log offset)."""
    h = QueryMessageRequestHeader.from_ext(call.ext)
    unique = (call.ext or {}).get(UNIQUE_KEY_QUERY) == "true"
    records = broker.store.query(h.topic, h.key, UNIQUE_QUERY_NUM if unique else h.max_num,
                                 h.begin_timestamp, h.end_timestamp)
    index = broker.store.index
    # a live 5.5.0 says 0 and 0 when it found nothing
    found = bool(records)
    ext = {"indexLastUpdateTimestamp": str(index.last_update_ms if found else 0),
           "indexLastUpdatePhyoffset": str(index.last_update_phys if found else 0)}
    if not found:
        return call.answer(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct",
                           ext=ext)
    return call.answer(ResponseCode.SUCCESS, ext=ext, body=b"".join(records))


# ---------------------------------------------------------------- topics

def handle_create_topic(broker: BrokerContext, call: Call) -> RemotingCommand:
    h = CreateTopicRequestHeader.from_ext(call.ext)
    reason = validate_topic(h.topic)
    if reason is not None:
        raise Refuse(ResponseCode.SYSTEM_ERROR, reason)
    if h.topic == broker.cluster:
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"the topic[{h.topic}] is conflict with system reserved words.")
    if is_system_topic(h.topic):
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"The topic[{h.topic}] is conflict with system topic.")
    for key, n in (("readQueueNums", h.read_queue_nums), ("writeQueueNums", h.write_queue_nums)):
        if not 0 <= n <= MAX_QUEUE_NUMS:
            raise Refuse(ResponseCode.SYSTEM_ERROR, f"{key} {n} is outside 0..{MAX_QUEUE_NUMS}")
    broker.topics.put(TopicConfig(h.topic, h.read_queue_nums, h.write_queue_nums, h.perm,
                                  h.topic_filter_type, h.topic_sys_flag or 0, h.order))
    return call.answer(ResponseCode.SUCCESS, remark="not set any response code")


def handle_create_subscription_group(broker: BrokerContext, call: Call) -> RemotingCommand:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: the body's config replaces the group's."""
    obj = loads_object(call.cmd.body, "subscription group config")
    name = str(obj.get("groupName") or "")
    if not name:
        raise Refuse(ResponseCode.SYSTEM_ERROR, "the subscription group config has no groupName")
    try:
        config = SubscriptionGroupConfig.from_json(obj)
    except (TypeError, ValueError) as exc:
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"bad subscription group config: {exc}") from None
    broker.groups.put(config)
    return call.answer(ResponseCode.SUCCESS)


def handle_all_topic_config(broker: BrokerContext, call: Call) -> RemotingCommand:
    return call.answer(ResponseCode.SUCCESS, ext={}, body=dumps(broker.topics.snapshot_json()))


def handle_all_consumer_offset(broker: BrokerContext, call: Call) -> RemotingCommand:
    return call.answer(ResponseCode.SUCCESS, ext={}, body=dumps(broker.offsets.snapshot_json()))


def handle_all_subscription_groups(broker: BrokerContext, call: Call) -> RemotingCommand:
    table = {name: broker.groups.get(name) for name in broker.groups.names()}
    return call.answer(ResponseCode.SUCCESS, ext={}, body=dumps(
        {"subscriptionGroupTable": {n: g.to_json() for n, g in table.items() if g is not None}}))


def _mq_key(mq: MessageQueue) -> str:
    return dumps(mq.to_json()).decode()


def handle_topic_stats(broker: BrokerContext, call: Call) -> RemotingCommand:
    h = TopicRequestHeader.from_ext(call.ext)
    config = broker.topics.get(h.topic)
    if config is None:
        raise Refuse(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
    parts = []
    for qid in range(config.write_queue_nums):
        top = broker.store.max_offset(h.topic, qid)
        last = broker.store.store_time(h.topic, qid, top - 1) if top > 0 else 0
        value = dumps({"lastUpdateTimestamp": max(last, 0), "maxOffset": top,
                       "minOffset": broker.store.min_offset(h.topic, qid)}).decode()
        parts.append(f"{_mq_key(MessageQueue(h.topic, broker.name, qid))}:{value}")
    return call.answer(ResponseCode.SUCCESS, body=('{"offsetTable":{%s}}' % ",".join(parts)).encode())


# ---------------------------------------------------------------- consumers

def handle_consumer_connections(broker: BrokerContext, call: Call) -> RemotingCommand:
    h = GetConsumerListRequestHeader.from_ext(call.ext)
    info = broker.clients.group(h.consumer_group)
    if info is None or not info.channels:
        raise Refuse(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{h.consumer_group}] not online")
    body: dict[str, Any] = {
        "connectionSet": [{"clientAddr": ch.conn.remote_addr, "clientId": ch.client_id,
                           "language": ch.language, "version": ch.version} for ch in info.channels.values()],
        "consumeFromWhere": info.consume_from_where, "consumeType": info.consume_type,
        "messageModel": info.message_model,
        "subscriptionTable": {t: s.to_json() for t, s in info.subscriptions.items()}}
    return call.answer(ResponseCode.SUCCESS, body=dumps(body))


def handle_producer_connections(broker: BrokerContext, call: Call) -> RemotingCommand:
    h = GetProducerConnectionListRequestHeader.from_ext(call.ext)
    channels = broker.clients.producer_channels(h.producer_group)
    if channels is None:
        raise Refuse(ResponseCode.SYSTEM_ERROR, f"the producer group[{h.producer_group}] not exist")
    body = {"connectionSet": [{"clientAddr": ch.conn.remote_addr, "clientId": ch.client_id,
                               "language": ch.language, "version": ch.version} for ch in channels]}
    return call.answer(ResponseCode.SUCCESS, body=dumps(body))


def handle_consume_stats(broker: BrokerContext, call: Call) -> RemotingCommand:
    h = GetConsumeStatsRequestHeader.from_ext(call.ext)
    group = h.consumer_group
    topics = [h.topic] if h.topic else sorted(broker.offsets.topics_of(group))
    info = broker.clients.group(group)
    table: dict[MessageQueue, OffsetWrapper] = {}
    tps = 0.0
    for topic in topics:
        config = broker.topics.get(topic)
        if config is None:
            continue
        if info is not None and info.subscriptions and topic not in info.subscriptions:
            continue
        for qid in range(config.read_queue_nums):
            consumer = max(broker.offsets.query(group, topic, qid), 0)
            last = broker.store.store_time(topic, qid, consumer - 1) if consumer > 0 else 0
            table[MessageQueue(topic, broker.name, qid)] = OffsetWrapper(
                max(broker.store.max_offset(topic, qid), 0), consumer, max(last, 0))
        tps += broker.stats.group_get_tps(group, topic)
    return call.answer(ResponseCode.SUCCESS, body=ConsumeStats(table, tps).encode())


# ---------------------------------------------------------------- runtime

def human_bytes(n: int) -> str:
    """Java's ``MixAll.humanReadableByteCount(n, false)``: ``"0 B"``, ``"252.0 GiB"``."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024 ** exp:.1f} {'KMGTPE'[exp - 1]}iB"


def disk_used_ratio(path: Path) -> float:
    """``UtilAll.getDiskPartitionSpaceUsedPercent``: used / (used + usable), rounded up to 1/100."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1.0
    used = usage.total - usage.free
    entire = used + usage.free
    if entire <= 0:
        return -1.0
    return (used * 100 // entire + (1 if used * 100 % entire else 0)) / 100


def runtime_table(broker: BrokerContext) -> dict[str, str]:
    store, stats = broker.store, broker.stats
    uptime = max(broker.clock.now_ms() - broker.boot_ms, 0) // 1000
    d, rem = divmod(uptime, 86400)
    hh, rem = divmod(rem, 3600)
    mm, ss = divmod(rem, 60)
    commitlog_dir = broker.root / "commitlog"
    try:
        disk = shutil.disk_usage(commitlog_dir)
        capacity = f"Total : {human_bytes(disk.total)}, Free : {human_bytes(disk.free)}."
    except OSError:
        capacity = "Total : 0 B, Free : 0 B."
    commitlog_ratio = str(disk_used_ratio(commitlog_dir))
    found, miss = stats.found_tps(), stats.miss_tps()
    table = {
        "brokerVersionDesc": "V4_9_8", "brokerVersion": str(SERVER_VERSION),
        "bootTimestamp": str(broker.boot_ms),
        "runtime": f"[ {d} days, {hh} hours, {mm} minutes, {ss} seconds ]",
        "msgPutTotalTodayNow": str(stats.put_total), "msgGetTotalTodayNow": str(stats.get_total),
        "msgPutTotalTodayMorning": "0", "msgGetTotalTodayMorning": "0",
        "msgPutTotalYesterdayMorning": "0", "msgGetTotalYesterdayMorning": "0",
        "putTps": f"{stats.put_tps()} ", "getTotalTps": f"{found + miss} ",
        "getFoundTps": f"{found} ", "getMissTps": f"{miss} ", "getTransferedTps": f"{stats.get_tps()} ",
        "putMessageTimesTotal": str(stats.put_total),
        "putMessageSizeTotal": str(stats.put_bytes),
        "putMessageAverageSize": str(stats.put_bytes / stats.put_total if stats.put_total else 0.0),
        "putMessageFailedTimes": str(stats.put_failed),
        "putMessageEntireTimeMax": str(stats.put_time_max_ms),
        "putMessageDistributeTime": stats.put_distribution_text(),
        "putLatency99": f"{stats.put_latency(0.99):.2f}", "putLatency999": f"{stats.put_latency(0.999):.2f}",
        "getMessageEntireTimeMax": str(stats.get_time_max_ms),
        "commitLogMinOffset": str(store.commitlog.min_offset),
        "commitLogMaxOffset": str(store.commitlog.max_offset),
        "commitLogDirCapacity": capacity,
        "commitLogDiskRatio": commitlog_ratio, f"commitLogDiskRatio_{commitlog_dir}": commitlog_ratio,
        "consumeQueueDiskRatio": str(disk_used_ratio(broker.root / "consumequeue")),
        "remainHowManyDataToFlush": human_bytes(max(store.commitlog.max_offset - store.commitlog.flushed_offset, 0)),
        "remainTransientStoreBufferNumbs": "2147483647",  # Integer.MAX_VALUE: no transient store pool
        "earliestMessageTimeStamp": "-1",
        "dispatchBehindBytes": str(store.commitlog.max_offset - store.dispatched_offset()), "dispatchMaxBuffer": "0",
        "pageCacheLockTimeMills": "0", "startAcceptSendRequestTimeStamp": "0",
        "sendThreadPoolQueueSize": "0", "sendThreadPoolQueueCapacity": "10000",
        "sendThreadPoolQueueHeadWaitTimeMills": "0",
        "pullThreadPoolQueueSize": "0", "pullThreadPoolQueueCapacity": "100000",
        "pullThreadPoolQueueHeadWaitTimeMills": "0",
        "queryThreadPoolQueueSize": "0", "queryThreadPoolQueueCapacity": "20000",
        "queryThreadPoolQueueHeadWaitTimeMills": "0",
        "EndTransactionQueueSize": "0", "EndTransactionThreadPoolQueueCapacity": "100000",
    }
    for level, (done, top) in broker.schedule.progress().items():
        table[f"scheduleMessageOffset_{level}"] = f"{done},{top}"
    timers = broker.timer
    if timers is not None:             # a 5.x timer store's keys: how clients tell it has one
        table.update({"timerReadBehind": str(timers.overdue()), "timerOffsetBehind": str(timers.pending()),
                      "timerCongestNum": "0", "timerEnqueueTps": "0.0", "timerDequeueTps": "0.0"})
    return table


def handle_runtime_info(broker: BrokerContext, call: Call) -> RemotingCommand:
    return call.answer(ResponseCode.SUCCESS, body=json.dumps({"table": runtime_table(broker)},
                                                             separators=(",", ":")).encode())
