import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * One Java KafkaShareConsumer (KIP-932) of a share group, for the share-group differential tests.
 * Usage: ShareWorker BOOTSTRAP TOPIC GROUP MODE STOP_AFTER IDLE_MS MAX_POLL_RECORDS [LOCK_MS [FIRST_WAIT_MS]]
 *   MODE implicit: every record is accepted by the next poll (share.acknowledgement.mode=implicit), the last
 *     poll's by commitSync before close.
 *   MODE explicit: a record whose value starts with "rel" is RELEASEd at its first delivery and accepted at its next;
 *     "rej" is REJECTed; anything else is ACCEPTed; commitSync after each poll's acknowledgements.
 *   MODE hold: prints what its first non-empty poll gets, then polls no more and never acknowledges (the test kills
 *     it with SIGKILL).
 * STOP_AFTER: the worker ends after it has seen this many records, or FIRST_WAIT_MS (default 30 s) without a record before
 * the first one,
 * IDLE_MS after the last one.
 * First the group's configs are set (share.auto.offset.reset=earliest, share.record.lock.duration.ms=LOCK_MS when
 * given) where the broker takes group configs; a broker without them answers an error, printed, and goes on.
 * Lines (JSON): {"event":"config","ok":bool}, {"event":"record","p":p,"o":offset,"v":value,"dc":deliveryCount,
 * "ack":"ACCEPT"|...}, {"event":"commit","errors":n}, {"event":"result","seen":n}.
 */
public class ShareWorker {
    static void emit(String s) {
        System.out.println(s);
        System.out.flush();
    }

    static String q(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2], mode = args[3];
        int stopAfter = Integer.parseInt(args[4]);
        long idleMs = Long.parseLong(args[5]);
        String maxPoll = args[6];
        String lockMs = args.length > 7 ? args[7] : null;
        long firstWaitMs = args.length > 8 ? Long.parseLong(args[8]) : 30_000;
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(ap)) {
            ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
            List<AlterConfigOp> ops = new java.util.ArrayList<>();
            ops.add(new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET));
            if (lockMs != null) {
                ops.add(new AlterConfigOp(new ConfigEntry("share.record.lock.duration.ms", lockMs),
                        AlterConfigOp.OpType.SET));
            }
            // a broker without group configs refuses at once (INVALID_REQUEST): said, and the worker goes on; a
            // timeout (a busy machine) is tried again, up to 5 times, before the worker goes on without the config
            for (int attempt = 1; ; attempt++) {
                try {
                    admin.incrementalAlterConfigs(Map.of(res, ops)).all().get();
                    // Kafka applies an answered alteration a moment later (its metadata record): a share-partition
                    // initialized before that starts at the old share.auto.offset.reset (latest) and delivers none
                    // of the records produced before. Wait, by polls (at most 100), until the describe shows it.
                    boolean shown = false;
                    for (int poll = 0; poll < 100 && !shown; poll++) {
                        org.apache.kafka.clients.admin.Config c = admin.describeConfigs(List.of(res)).all().get()
                                .get(res);
                        ConfigEntry reset = c.get("share.auto.offset.reset");
                        ConfigEntry lock = c.get("share.record.lock.duration.ms");
                        shown = reset != null && "earliest".equals(reset.value())
                                && (lockMs == null || (lock != null && lockMs.equals(lock.value())));
                        if (!shown) {
                            Thread.sleep(100);
                        }
                    }
                    emit("{\"event\":\"config\",\"ok\":" + shown + "}");
                    break;
                } catch (java.util.concurrent.ExecutionException e) {
                    boolean refused = e.getCause() instanceof org.apache.kafka.common.errors.InvalidRequestException
                            || e.getCause() instanceof org.apache.kafka.common.errors.InvalidConfigurationException;
                    if (refused || attempt >= 5) {
                        emit("{\"event\":\"config\",\"ok\":false,\"attempts\":" + attempt + ",\"error\":"
                                + q(String.valueOf(e.getCause())) + "}");
                        break;
                    }
                    Thread.sleep(1000);
                }
            }
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("client.id", "share-" + mode);
        p.put("max.poll.records", maxPoll);
        p.put("share.acknowledgement.mode", mode.equals("implicit") ? "implicit" : "explicit");
        int seen = 0;
        long last = System.currentTimeMillis();
        try (KafkaShareConsumer<byte[], byte[]> c = new KafkaShareConsumer<>(p, new ByteArrayDeserializer(),
                new ByteArrayDeserializer())) {
            c.subscribe(List.of(topic));
            while (seen < stopAfter && System.currentTimeMillis() - last < (seen == 0 ? firstWaitMs : idleMs)) {
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    seen++;
                    last = System.currentTimeMillis();
                    String v = new String(r.value(), StandardCharsets.UTF_8);
                    int dc = r.deliveryCount().map(Short::intValue).orElse(-1);
                    String ack = "ACCEPT";
                    if (mode.equals("hold")) {
                        ack = "NONE";
                    } else if (mode.equals("explicit")) {
                        AcknowledgeType t = AcknowledgeType.ACCEPT;
                        if (v.startsWith("rel") && dc == 1) t = AcknowledgeType.RELEASE;
                        else if (v.startsWith("rej")) t = AcknowledgeType.REJECT;
                        c.acknowledge(r, t);
                        ack = t.name();
                    }
                    emit("{\"event\":\"record\",\"p\":" + r.partition() + ",\"o\":" + r.offset() + ",\"v\":" + q(v)
                            + ",\"dc\":" + dc + ",\"ack\":" + q(ack) + "}");
                }
                if (mode.equals("hold") && !recs.isEmpty()) break;
                if (mode.equals("explicit") && !recs.isEmpty()) {
                    Map<TopicIdPartition, Optional<org.apache.kafka.common.KafkaException>> res = c.commitSync();
                    long errors = res.values().stream().filter(Optional::isPresent).count();
                    emit("{\"event\":\"commit\",\"errors\":" + errors + "}");
                }
            }
            if (mode.equals("implicit")) {
                long errors = c.commitSync().values().stream().filter(Optional::isPresent).count();
                emit("{\"event\":\"commit\",\"errors\":" + errors + "}");
            }
            if (mode.equals("hold")) {
                emit("{\"event\":\"holding\",\"seen\":" + seen + "}");
                Thread.sleep(600_000);
            }
        }
        emit("{\"event\":\"result\",\"seen\":" + seen + "}");
    }
}
