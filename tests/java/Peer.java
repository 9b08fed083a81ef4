// RocketMQ's own Java client (remoting, 4.9.x and 5.x) as a peer of the tests: producers,
// consumers and admin calls driven by tests/java/peer.py, one JSON object a line on stdout.
// Compiled at test time against the Maven classpath of the client release under test; `var`
// keeps one source for both releases where 5.x moved a type to another package.
//
//   produce  NAMESRV TOPIC MODE COUNT [BODY_SIZE [COMPRESS]]   MODE: sync async oneway batch orderly transaction
//   consume  NAMESRV TOPIC GROUP KIND EXPECTED TIMEOUT_S       KIND: push-concurrent push-orderly pull
//   member   NAMESRV TOPIC GROUP                               an orderly push consumer until stdin closes
//   admin    NAMESRV WHAT ARG...                               WHAT: stats GROUP | connections GROUP | route TOPIC
//
// Message i of a produce run: body "MODE-i" (padded with '.' to BODY_SIZE), keys "k-i", tags
// "T(i%3)", user properties seq=i and mode=MODE; orderly and batch runs key by order "o-(i%5)".

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public final class Peer {
    private Peer() {
    }

    // ------------------------------------------------------------------ JSON out

    private static String str(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }

    private static String map(Map<String, String> m) {
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<String, String> e : new TreeMap<>(m).entrySet()) {
            if (b.length() > 1) {
                b.append(',');
            }
            b.append(str(e.getKey())).append(':').append(str(e.getValue()));
        }
        return b.append('}').toString();
    }

    private static String queue(MessageQueue q) {
        return "{\"topic\":" + str(q.getTopic()) + ",\"broker\":" + str(q.getBrokerName())
            + ",\"queue_id\":" + q.getQueueId() + "}";
    }

    private static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static String message(String kind, MessageExt m) {
        return "{\"event\":" + str(kind) + ",\"topic\":" + str(m.getTopic()) + ",\"broker\":" + str(m.getBrokerName())
            + ",\"queue_id\":" + m.getQueueId() + ",\"queue_offset\":" + m.getQueueOffset()
            + ",\"msg_id\":" + str(m.getMsgId()) + ",\"keys\":" + str(m.getKeys()) + ",\"tags\":" + str(m.getTags())
            + ",\"body\":" + str(Base64.getEncoder().encodeToString(m.getBody()))
            + ",\"reconsume_times\":" + m.getReconsumeTimes() + ",\"properties\":" + map(m.getProperties())
            + ",\"thread\":" + str(Thread.currentThread().getName()) + "}";
    }

    // ------------------------------------------------------------------ produce

    private static Message build(String topic, String mode, int i, int bodySize) {
        StringBuilder body = new StringBuilder(mode + "-" + i);
        while (body.length() < bodySize) {
            body.append('.');
        }
        Message m = new Message(topic, "T" + (i % 3), "k-" + i, body.toString().getBytes(StandardCharsets.UTF_8));
        m.putUserProperty("seq", Integer.toString(i));
        m.putUserProperty("mode", mode);
        if (mode.equals("orderly") || mode.equals("batch")) {
            m.putUserProperty("order", "o-" + (i % 5));
        }
        return m;
    }

    private static void sent(int i, SendResult r) {
        emit("{\"event\":\"sent\",\"seq\":" + i + ",\"status\":" + str(String.valueOf(r.getSendStatus()))
            + ",\"msg_id\":" + str(r.getMsgId()) + ",\"queue\":" + queue(r.getMessageQueue())
            + ",\"queue_offset\":" + r.getQueueOffset() + "}");
    }

    private static void compress(DefaultMQProducer p, String kind) throws Exception {
        if (kind == null || kind.equals("default")) {
            return;
        }
        // 5.x only: the enum does not exist in 4.x, where every body is zlib'd
        Class<?> type = Class.forName("org.apache.rocketmq.common.compression.CompressionType");
        Object value = type.getMethod("valueOf", String.class).invoke(null, kind.toUpperCase());
        p.getClass().getMethod("setCompressType", type).invoke(p, value);
    }

    private static void produce(String namesrv, String topic, String mode, int count, int bodySize,
                                String compressKind) throws Exception {
        if (mode.equals("transaction")) {
            transaction(namesrv, topic, count, bodySize);
            return;
        }
        DefaultMQProducer p = new DefaultMQProducer("java_peer_producer_" + mode);
        p.setNamesrvAddr(namesrv);
        p.setSendMsgTimeout(10000);
        p.setRetryTimesWhenSendFailed(4);
        compress(p, compressKind);
        p.start();
        try {
            switch (mode) {
                case "sync":
                    for (int i = 0; i < count; i++) {
                        sent(i, p.send(build(topic, mode, i, bodySize)));
                    }
                    break;
                case "async": {
                    CountDownLatch done = new CountDownLatch(count);
                    AtomicInteger failed = new AtomicInteger();
                    for (int i = 0; i < count; i++) {
                        final int seq = i;
                        p.send(build(topic, mode, i, bodySize), new SendCallback() {
                            @Override
                            public void onSuccess(SendResult r) {
                                sent(seq, r);
                                done.countDown();
                            }

                            @Override
                            public void onException(Throwable e) {
                                failed.incrementAndGet();
                                emit("{\"event\":\"error\",\"seq\":" + seq + ",\"error\":" + str(e.toString()) + "}");
                                done.countDown();
                            }
                        });
                    }
                    if (!done.await(120, TimeUnit.SECONDS) || failed.get() > 0) {
                        throw new IllegalStateException("async sends: " + failed.get() + " failed");
                    }
                    break;
                }
                case "oneway": {
                    MessageQueue only = p.fetchPublishMessageQueues(topic).get(0);
                    for (int i = 0; i < count; i++) {
                        p.sendOneway(build(topic, mode, i, bodySize), only);
                        emit("{\"event\":\"sent\",\"seq\":" + i + ",\"queue\":" + queue(only) + "}");
                    }
                    break;
                }
                case "batch": {
                    List<Message> batch = new ArrayList<>();
                    for (int i = 0; i < count; i++) {
                        batch.add(build(topic, mode, i, bodySize));
                        if (batch.size() == 10 || i == count - 1) {
                            SendResult r = p.send(batch);
                            emit("{\"event\":\"sent_batch\",\"size\":" + batch.size() + ",\"status\":"
                                + str(String.valueOf(r.getSendStatus())) + ",\"queue\":" + queue(r.getMessageQueue())
                                + ",\"queue_offset\":" + r.getQueueOffset() + "}");
                            batch.clear();
                        }
                    }
                    break;
                }
                case "orderly":
                    for (int i = 0; i < count; i++) {
                        String key = "o-" + (i % 5);
                        sent(i, p.send(build(topic, mode, i, bodySize),
                            (mqs, msg, arg) -> mqs.get(Math.floorMod(arg.hashCode(), mqs.size())), key));
                    }
                    break;
                default:
                    throw new IllegalArgumentException("produce mode " + mode);
            }
        } finally {
            p.shutdown();
        }
        emit("{\"event\":\"done\"}");
    }

    /** Message i: committed at once (i % 3 == 0), rolled back (i % 3 == 1), or left UNKNOW
     *  and committed when the broker checks back (i % 3 == 2). */
    private static void transaction(String namesrv, String topic, int count, int bodySize) throws Exception {
        Set<String> pending = ConcurrentHashMap.newKeySet();
        TransactionMQProducer p = new TransactionMQProducer("java_peer_txn_producer");
        p.setNamesrvAddr(namesrv);
        p.setSendMsgTimeout(10000);
        p.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                int i = Integer.parseInt(msg.getUserProperty("seq"));
                switch (i % 3) {
                    case 0: return LocalTransactionState.COMMIT_MESSAGE;
                    case 1: return LocalTransactionState.ROLLBACK_MESSAGE;
                    default:
                        pending.add(msg.getUserProperty("seq"));
                        return LocalTransactionState.UNKNOW;
                }
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String seq = msg.getUserProperty("seq");
                emit("{\"event\":\"check\",\"seq\":" + seq + "}");
                pending.remove(seq);
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        p.start();
        try {
            for (int i = 0; i < count; i++) {
                var r = p.sendMessageInTransaction(build(topic, "transaction", i, bodySize), null);
                emit("{\"event\":\"sent\",\"seq\":" + i + ",\"status\":" + str(String.valueOf(r.getSendStatus()))
                    + ",\"local\":" + str(String.valueOf(r.getLocalTransactionState())) + "}");
            }
            long deadline = System.currentTimeMillis() + 180_000;
            while (!pending.isEmpty() && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
            if (!pending.isEmpty()) {
                throw new IllegalStateException("no check-back for " + pending);
            }
        } finally {
            p.shutdown();
        }
        emit("{\"event\":\"done\"}");
    }

    // ------------------------------------------------------------------ consume

    private static void consume(String namesrv, String topic, String group, String kind, int expected,
                                int timeoutS) throws Exception {
        AtomicInteger got = new AtomicInteger();
        CountDownLatch enough = new CountDownLatch(1);
        Runnable seen = () -> {
            if (got.incrementAndGet() >= expected) {
                enough.countDown();
            }
        };
        if (kind.equals("pull")) {
            pull(namesrv, topic, group, expected, timeoutS);
            return;
        }
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(namesrv);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        if (kind.equals("push-orderly")) {
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    emit(message("msg", m));
                    seen.run();
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else if (kind.equals("push-concurrent")) {
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    emit(message("msg", m));
                    seen.run();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        } else {
            throw new IllegalArgumentException("consume kind " + kind);
        }
        c.start();
        try {
            if (!enough.await(timeoutS, TimeUnit.SECONDS)) {
                emit("{\"event\":\"timeout\",\"got\":" + got.get() + "}");
                return;
            }
            Thread.sleep(2000);     // anything delivered twice would show up now
        } finally {
            c.shutdown();
        }
        emit("{\"event\":\"done\",\"got\":" + got.get() + "}");
    }

    /** Every queue of the topic from its min offset to its max, as DefaultMQPullConsumer pulls. */
    private static void pull(String namesrv, String topic, String group, int expected, int timeoutS) throws Exception {
        DefaultMQPullConsumer c = new DefaultMQPullConsumer(group);
        c.setNamesrvAddr(namesrv);
        c.start();
        int got = 0;
        try {
            long deadline = System.currentTimeMillis() + timeoutS * 1000L;
            Map<MessageQueue, Long> next = new TreeMap<>();
            for (MessageQueue q : c.fetchSubscribeMessageQueues(topic)) {
                next.put(q, c.minOffset(q));
            }
            while (got < expected && System.currentTimeMillis() < deadline) {
                boolean any = false;
                for (Map.Entry<MessageQueue, Long> e : next.entrySet()) {
                    PullResult r = c.pull(e.getKey(), "*", e.getValue(), 32);
                    if (r.getPullStatus() == PullStatus.FOUND) {
                        for (MessageExt m : r.getMsgFoundList()) {
                            emit(message("msg", m));
                            got++;
                        }
                        any = true;
                    }
                    e.setValue(r.getNextBeginOffset());
                }
                if (!any) {
                    Thread.sleep(100);
                }
            }
        } finally {
            c.shutdown();
        }
        emit("{\"event\":\"" + (got >= expected ? "done" : "timeout") + "\",\"got\":" + got + "}");
    }

    /** An orderly push consumer of GROUP until stdin closes: every message, and every second
     *  the queues it holds locked. */
    private static void member(String namesrv, String topic, String group) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(namesrv);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                emit(message("msg", m));
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        c.start();
        emit("{\"event\":\"started\",\"client_id\":" + str(c.buildMQClientId()) + "}");
        Thread watcher = new Thread(() -> {
            try {
                while (true) {
                    var table = c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable();
                    Set<String> held = new TreeSet<>();
                    for (var e : table.entrySet()) {
                        if (e.getValue().isLocked() && !e.getValue().isDropped()) {
                            held.add(queue(e.getKey()));
                        }
                    }
                    emit("{\"event\":\"held\",\"queues\":[" + String.join(",", held) + "]}");
                    Thread.sleep(500);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "held-reporter");
        watcher.setDaemon(true);
        watcher.start();
        while (System.in.read() != -1) {
            // until the test closes our stdin
        }
        c.shutdown();
        emit("{\"event\":\"stopped\"}");
    }

    // ------------------------------------------------------------------ admin

    private static void admin(String namesrv, String what, String arg) throws Exception {
        DefaultMQAdminExt a = new DefaultMQAdminExt();
        a.setNamesrvAddr(namesrv);
        a.setInstanceName("java_peer_admin_" + System.nanoTime());
        a.start();
        try {
            switch (what) {
                case "stats": {
                    var stats = a.examineConsumeStats(arg);
                    StringBuilder b = new StringBuilder();
                    for (var e : stats.getOffsetTable().entrySet()) {
                        if (b.length() > 0) {
                            b.append(',');
                        }
                        b.append("{\"queue\":").append(queue(e.getKey())).append(",\"broker_offset\":")
                            .append(e.getValue().getBrokerOffset()).append(",\"consumer_offset\":")
                            .append(e.getValue().getConsumerOffset()).append('}');
                    }
                    emit("{\"event\":\"stats\",\"offsets\":[" + b + "]}");
                    break;
                }
                case "connections": {
                    var info = a.examineConsumerConnectionInfo(arg);
                    StringBuilder b = new StringBuilder();
                    for (var conn : info.getConnectionSet()) {
                        if (b.length() > 0) {
                            b.append(',');
                        }
                        b.append("{\"client_id\":").append(str(conn.getClientId())).append(",\"language\":")
                            .append(str(String.valueOf(conn.getLanguage()))).append(",\"version\":")
                            .append(conn.getVersion()).append('}');
                    }
                    StringBuilder subs = new StringBuilder();
                    for (var e : info.getSubscriptionTable().entrySet()) {
                        if (subs.length() > 0) {
                            subs.append(',');
                        }
                        subs.append(str(e.getKey())).append(':').append(str(e.getValue().getSubString()));
                    }
                    emit("{\"event\":\"connections\",\"connections\":[" + b + "],\"consume_type\":"
                        + str(String.valueOf(info.getConsumeType())) + ",\"message_model\":"
                        + str(String.valueOf(info.getMessageModel())) + ",\"subscriptions\":{" + subs + "}}");
                    break;
                }
                case "route": {
                    var route = a.examineTopicRouteInfo(arg);
                    StringBuilder b = new StringBuilder();
                    for (var bd : route.getBrokerDatas()) {
                        for (var e : bd.getBrokerAddrs().entrySet()) {
                            if (b.length() > 0) {
                                b.append(',');
                            }
                            b.append("{\"broker\":").append(str(bd.getBrokerName())).append(",\"id\":")
                                .append(e.getKey()).append(",\"addr\":").append(str(e.getValue())).append('}');
                        }
                    }
                    StringBuilder q = new StringBuilder();
                    for (var qd : route.getQueueDatas()) {
                        if (q.length() > 0) {
                            q.append(',');
                        }
                        q.append("{\"broker\":").append(str(qd.getBrokerName())).append(",\"read\":")
                            .append(qd.getReadQueueNums()).append(",\"write\":").append(qd.getWriteQueueNums())
                            .append(",\"perm\":").append(qd.getPerm()).append('}');
                    }
                    emit("{\"event\":\"route\",\"brokers\":[" + b + "],\"queues\":[" + q + "]}");
                    break;
                }
                default:
                    throw new IllegalArgumentException("admin " + what);
            }
        } finally {
            a.shutdown();
        }
    }

    public static void main(String[] args) throws Exception {
        try {
            switch (args[0]) {
                case "produce":
                    produce(args[1], args[2], args[3], Integer.parseInt(args[4]),
                        args.length > 5 ? Integer.parseInt(args[5]) : 0, args.length > 6 ? args[6] : null);
                    break;
                case "consume":
                    consume(args[1], args[2], args[3], args[4], Integer.parseInt(args[5]), Integer.parseInt(args[6]));
                    break;
                case "member":
                    member(args[1], args[2], args[3]);
                    break;
                case "admin":
                    admin(args[1], args[2], args[3]);
                    break;
                default:
                    throw new IllegalArgumentException("command " + args[0]);
            }
        } catch (Throwable e) {
            emit("{\"event\":\"failed\",\"error\":" + str(e.toString()) + "}");
            e.printStackTrace();
            System.exit(2);
        }
        System.exit(0);
    }
}
