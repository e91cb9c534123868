import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;

/**
 * Transactional scenarios of the Java client (kafka-clients 4.4, the pre-KIP-890-part-2 paths when the broker does
 * not finalize {@code transaction.version}), one per run.
 * Usage: TxnScenarios BOOTSTRAP PREFIX SCENARIO, SCENARIO one of
 * <ul>
 * <li>{@code fencing}: producer A opens a transaction (2 records), producer B with the same transactional.id
 *   initTransactions (fences A and aborts its open transaction); A's next send and its commit fail; B commits 2.
 *   Then C opens one (1 record) and D with C's id fences it: C's commit (no send first) fails; D commits 1.</li>
 * <li>{@code ctp}: consume-transform-produce: a read_committed consumer in a group reads 5 input records, a
 *   transactional producer writes them transformed, sendOffsetsToTransaction(offsets, groupMetadata()) and commits;
 *   then 3 more, aborted: the group's committed offset stays 5.</li>
 * <li>{@code open}: a committed transaction (2), then an open one (3) and a plain record after it: end offsets and
 *   reads per isolation level (the LSO), then the commit and the same reads again.</li>
 * <li>{@code timeout}: transaction.timeout.ms=3000, a transaction left open until the coordinator aborts it (at most
 *   60 looks, 500 ms apart); the producer's commit then fails; a new producer with the same id commits 1.</li>
 * <li>{@code stable}: a transaction holding sendOffsetsToTransaction offsets for a group stays open while a
 *   read_committed consumer of the group asks committed()/position() (OffsetFetch RequireStable) and a
 *   read_uncommitted one and the Admin ask too; then the commit, and the same questions again.</li>
 * </ul>
 * Lines: {"scenario":S,"step":name,"ok":bool,"elapsed_ms":t, step fields..., error fields (Out.error) and
 * "cause" (the simple class name of the error's cause) when not ok}. A scenario stops at the first failed step it
 * needs. Every wait is a bounded number of polls; every client call has a timeout of at most 15 s.
 */
public class TxnScenarios {
    static String bootstrap;
    static String prefix;
    static String scenario;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        prefix = args[1];
        scenario = args[2];
        try (Admin admin = Admin.create(Out.props(bootstrap, "default.api.timeout.ms", 15_000,
                "request.timeout.ms", 10_000, "client.id", "txn-admin"))) {
            switch (scenario) {
                case "fencing" -> fencing(admin);
                case "ctp" -> consumeTransformProduce(admin);
                case "open" -> openTransaction(admin);
                case "timeout" -> timeoutAbort(admin);
                case "stable" -> requireStable(admin);
                default -> throw new IllegalArgumentException("unknown scenario " + scenario);
            }
        }
        Out.emit("scenario", scenario, "step", "done", "ok", true);
    }

    // -- (a) fencing ------------------------------------------------------------------------------------------

    static void fencing(Admin admin) throws Exception {
        String topic = prefix + "-fence";
        String txnId = prefix + "-fence-txn";
        TopicPartition tp = new TopicPartition(topic, 0);
        if (!step("create", () -> createTopics(admin, topic))) return;
        KafkaProducer<byte[], byte[]> a = producer(txnId, "fence-a");
        KafkaProducer<byte[], byte[]> b = null;
        try {
            if (!step("a_init", () -> { a.initTransactions(); return null; })) return;
            if (!step("a_open", () -> {
                a.beginTransaction();
                return Out.map("offsets", List.of(send(a, topic, "a-0"), send(a, topic, "a-1")));
            })) return;
            b = producer(txnId, "fence-b");
            KafkaProducer<byte[], byte[]> bb = b;
            if (!step("b_init", () -> { bb.initTransactions(); return null; })) return;
            step("a_send", () -> Out.map("offset", send(a, topic, "a-2")));
            step("a_commit", () -> { a.commitTransaction(); return null; });
            if (!step("b_commit", () -> {
                bb.beginTransaction();
                List<Long> offsets = List.of(send(bb, topic, "b-0"), send(bb, topic, "b-1"));
                bb.commitTransaction();
                return Out.map("offsets", offsets);
            })) return;
        } finally {
            a.close(Duration.ofSeconds(5));
            if (b != null) b.close(Duration.ofSeconds(5));
        }
        // the same once more, but the fenced producer's next call is the commit itself (EndTxn, no Produce first)
        String txnId2 = prefix + "-fence-txn2";
        try (KafkaProducer<byte[], byte[]> c = producer(txnId2, "fence-c");
             KafkaProducer<byte[], byte[]> d = producer(txnId2, "fence-d")) {
            if (!step("c_open", () -> {
                c.initTransactions();
                c.beginTransaction();
                return Out.map("offset", send(c, topic, "c-0"));
            })) return;
            if (!step("d_init", () -> { d.initTransactions(); return null; })) return;
            step("c_commit", () -> { c.commitTransaction(); return null; });
            if (!step("d_commit", () -> {
                d.beginTransaction();
                long offset = send(d, topic, "d-0");
                d.commitTransaction();
                return Out.map("offset", offset);
            })) return;
        }
        settleAndRead("final", admin, tp);
    }

    // -- (b) consume-transform-produce ------------------------------------------------------------------------

    static void consumeTransformProduce(Admin admin) throws Exception {
        String in = prefix + "-ctp-in";
        String out = prefix + "-ctp-out";
        String group = prefix + "-ctp-g";
        String txnId = prefix + "-ctp-txn";
        TopicPartition inTp = new TopicPartition(in, 0);
        TopicPartition outTp = new TopicPartition(out, 0);
        if (!step("create", () -> createTopics(admin, in, out))) return;
        if (!step("input1", () -> Out.map("offsets", plainSend(in, "in-", 0, 5)))) return;
        try (KafkaConsumer<byte[], byte[]> c = consumer("read_committed", group, "ctp-consumer");
             KafkaProducer<byte[], byte[]> p = producer(txnId, "ctp-producer")) {
            c.subscribe(List.of(in));
            List<ConsumerRecord<byte[], byte[]>> batch1 = new ArrayList<>();
            if (!step("consume1", () -> pollRecords(c, batch1, 5))) return;
            if (!step("init", () -> { p.initTransactions(); return null; })) return;
            if (!step("commit1", () -> {
                ConsumerGroupMetadata meta = c.groupMetadata();
                p.beginTransaction();
                for (ConsumerRecord<byte[], byte[]> r : batch1) send(p, out, "OUT-" + Out.str(r.value()));
                p.sendOffsetsToTransaction(Map.of(inTp, new OffsetAndMetadata(5)), meta);
                p.commitTransaction();
                return Out.map("group_generation_positive", meta.generationId() > 0,
                        "member_id_set", !meta.memberId().isEmpty());
            })) return;
            if (!step("offsets1", () -> groupOffsets(admin, c, group, inTp))) return;
            if (!step("input2", () -> Out.map("offsets", plainSend(in, "in-", 5, 3)))) return;
            List<ConsumerRecord<byte[], byte[]>> batch2 = new ArrayList<>();
            if (!step("consume2", () -> pollRecords(c, batch2, 3))) return;
            if (!step("abort2", () -> {
                p.beginTransaction();
                for (ConsumerRecord<byte[], byte[]> r : batch2) send(p, out, "OUT-" + Out.str(r.value()));
                p.sendOffsetsToTransaction(Map.of(inTp, new OffsetAndMetadata(8)), c.groupMetadata());
                p.flush();
                p.abortTransaction();
                return null;
            })) return;
            if (!step("offsets2", () -> groupOffsets(admin, c, group, inTp))) return;
        }
        settleAndRead("out", admin, outTp);
    }

    /** The group's committed offset of tp: by the read_committed member itself (RequireStable: waits until no
     * transactional offset commit is pending), then by the Admin (no RequireStable). */
    static Map<String, Object> groupOffsets(Admin admin, KafkaConsumer<byte[], byte[]> c, String group,
                                            TopicPartition tp) throws Exception {
        OffsetAndMetadata mine = c.committed(Set.of(tp), Duration.ofSeconds(15)).get(tp);
        return Out.map("consumer_committed", mine == null ? null : mine.offset(),
                "admin", adminOffsets(admin, group, false));
    }

    // -- (c) an open transaction: LSO ------------------------------------------------------------------------

    static void openTransaction(Admin admin) throws Exception {
        String topic = prefix + "-open";
        String txnId = prefix + "-open-txn";
        TopicPartition tp = new TopicPartition(topic, 0);
        if (!step("create", () -> createTopics(admin, topic))) return;
        try (KafkaProducer<byte[], byte[]> p = producer(txnId, "open-producer")) {
            if (!step("init", () -> { p.initTransactions(); return null; })) return;
            if (!step("commit1", () -> {
                p.beginTransaction();
                List<Long> offsets = List.of(send(p, topic, "c-0"), send(p, topic, "c-1"));
                p.commitTransaction();
                return Out.map("offsets", offsets);
            })) return;
            if (!step("settle1", () -> settle(admin, tp))) return;
            if (!step("open", () -> {
                p.beginTransaction();
                List<Long> offsets = new ArrayList<>();
                for (int i = 0; i < 3; i++) offsets.add(send(p, topic, "o-" + i));
                p.flush();
                return Out.map("offsets", offsets);
            })) return;
            if (!step("plain", () -> Out.map("offsets", plainSend(topic, "p-", 0, 1)))) return;
            if (!step("ends_open", () -> ends(admin, tp))) return;
            for (String iso : List.of("read_committed", "read_uncommitted")) {
                step("read_open", () -> read(tp, iso));
            }
            if (!step("commit2", () -> { p.commitTransaction(); return null; })) return;
        }
        if (!step("settle2", () -> settle(admin, tp))) return;
        step("ends_committed", () -> ends(admin, tp));
        for (String iso : List.of("read_committed", "read_uncommitted")) {
            step("read_committed_txn", () -> read(tp, iso));
        }
    }

    /** End offsets per isolation level, from a consumer's endOffsets and from the Admin's ListOffsets. */
    static Map<String, Object> ends(Admin admin, TopicPartition tp) throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        for (String iso : List.of("read_committed", "read_uncommitted")) {
            try (KafkaConsumer<byte[], byte[]> c = consumer(iso, null, "ends-" + iso)) {
                m.put("consumer_end_" + iso, c.endOffsets(List.of(tp), Duration.ofSeconds(10)).get(tp));
                m.put("consumer_beginning_" + iso, c.beginningOffsets(List.of(tp), Duration.ofSeconds(10)).get(tp));
            }
        }
        m.put("admin_latest_read_committed", latest(admin, tp, IsolationLevel.READ_COMMITTED));
        m.put("admin_latest_read_uncommitted", latest(admin, tp, IsolationLevel.READ_UNCOMMITTED));
        return m;
    }

    // -- (d) the coordinator aborts a timed-out transaction --------------------------------------------------

    static void timeoutAbort(Admin admin) throws Exception {
        String topic = prefix + "-timeout";
        String txnId = prefix + "-timeout-txn";
        TopicPartition tp = new TopicPartition(topic, 0);
        if (!step("create", () -> createTopics(admin, topic))) return;
        try (KafkaProducer<byte[], byte[]> p = producer(txnId, "timeout-producer", "transaction.timeout.ms", 3000)) {
            if (!step("init", () -> { p.initTransactions(); return null; })) return;
            if (!step("open", () -> {
                p.beginTransaction();
                List<Long> offsets = List.of(send(p, topic, "t-0"), send(p, topic, "t-1"));
                p.flush();
                return Out.map("offsets", offsets);
            })) return;
            step("ends_open", () -> Out.map(
                    "read_committed", latest(admin, tp, IsolationLevel.READ_COMMITTED),
                    "read_uncommitted", latest(admin, tp, IsolationLevel.READ_UNCOMMITTED)));
            // the producer does nothing now; the broker's timeout scan must abort the transaction (a marker: the
            // log end moves past the two records and the LSO catches up with it)
            step("wait_abort", () -> {
                long lso = -1, end = -1;
                boolean aborted = false;
                for (int i = 0; i < 60 && !aborted; i++) {
                    lso = latest(admin, tp, IsolationLevel.READ_COMMITTED);
                    end = latest(admin, tp, IsolationLevel.READ_UNCOMMITTED);
                    aborted = end > 2 && lso == end;
                    if (!aborted) Thread.sleep(500);
                }
                return Out.map("aborted", aborted, "read_committed", lso, "read_uncommitted", end);
            });
            step("read_after_abort", () -> read(tp, "read_committed"));
            step("commit", () -> { p.commitTransaction(); return null; });
        }
        try (KafkaProducer<byte[], byte[]> q = producer(txnId, "timeout-producer-2")) {
            if (!step("reinit_commit", () -> {
                q.initTransactions();
                q.beginTransaction();
                long offset = send(q, topic, "t-after");
                q.commitTransaction();
                return Out.map("offset", offset);
            })) return;
        }
        settleAndRead("final", admin, tp);
    }

    // -- (e) OffsetFetch RequireStable ----------------------------------------------------------------------

    static void requireStable(Admin admin) throws Exception {
        String topic = prefix + "-stable";
        String group = prefix + "-stable-g";
        String txnId = prefix + "-stable-txn";
        TopicPartition tp = new TopicPartition(topic, 0);
        if (!step("create", () -> createTopics(admin, topic))) return;
        if (!step("input", () -> Out.map("offsets", plainSend(topic, "s-", 0, 3)))) return;
        if (!step("commit_plain", () -> {
            try (KafkaConsumer<byte[], byte[]> c = consumer("read_uncommitted", group, "stable-committer")) {
                c.assign(List.of(tp));
                c.commitSync(Map.of(tp, new OffsetAndMetadata(1)), Duration.ofSeconds(10));
            }
            return null;
        })) return;
        try (KafkaProducer<byte[], byte[]> p = producer(txnId, "stable-producer");
             KafkaConsumer<byte[], byte[]> source = consumer("read_committed", group, "stable-source")) {
            source.assign(List.of(tp));  // not a member: generation -1, no member id (a "simple" consumer group)
            if (!step("init", () -> { p.initTransactions(); return null; })) return;
            if (!step("open", () -> {
                p.beginTransaction();
                p.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(3)), source.groupMetadata());
                return null;
            })) return;
            questions("pending", admin, group, tp, 3000);
            if (!step("commit", () -> { p.commitTransaction(); return null; })) return;
        }
        questions("after_commit", admin, group, tp, 15_000);
    }

    /** What the group's members and the Admin see of the group's offset of tp; the read_committed consumer's
     * calls get ``waitMs`` each. */
    static void questions(String when, Admin admin, String group, TopicPartition tp, long waitMs) {
        for (String iso : List.of("read_committed", "read_uncommitted")) {
            step(when + "_committed_" + iso, () -> {
                try (KafkaConsumer<byte[], byte[]> c = consumer(iso, group, "stable-" + iso)) {
                    OffsetAndMetadata o = c.committed(Set.of(tp), Duration.ofMillis(waitMs)).get(tp);
                    return Out.map("offset", o == null ? null : o.offset());
                }
            });
            step(when + "_position_" + iso, () -> {
                try (KafkaConsumer<byte[], byte[]> c = consumer(iso, group, "stable-pos-" + iso)) {
                    c.assign(List.of(tp));
                    return Out.map("position", c.position(tp, Duration.ofMillis(waitMs)));
                }
            });
        }
        step(when + "_admin", () -> Out.map("offsets", adminOffsets(admin, group, false)));
        step(when + "_admin_require_stable", () -> Out.map("offsets", adminOffsets(admin, group, true)));
    }

    // -- helpers --------------------------------------------------------------------------------------------

    interface Body {
        Map<String, Object> run() throws Exception;
    }

    /** Runs one step and prints its line; false when it failed. */
    static boolean step(String name, Body body) {
        long start = Out.now();
        Map<String, Object> m = Out.map("scenario", scenario, "step", name);
        try {
            Map<String, Object> fields = body.run();
            m.put("ok", true);
            m.put("elapsed_ms", Out.now() - start);
            if (fields != null) m.putAll(fields);
            emit(m);
            return true;
        } catch (Exception e) {
            m.put("ok", false);
            m.put("elapsed_ms", Out.now() - start);
            m.putAll(Out.error(e));
            Throwable cause = Out.unwrap(e).getCause();
            m.put("cause", cause == null ? null : cause.getClass().getSimpleName());
            emit(m);
            return false;
        }
    }

    static void emit(Map<String, Object> m) {
        Out.emit(m.entrySet().stream().flatMap(x -> java.util.stream.Stream.of(x.getKey(), x.getValue())).toArray());
    }

    static Map<String, Object> createTopics(Admin admin, String... names) throws Exception {
        List<NewTopic> topics = new ArrayList<>();
        for (String n : names) topics.add(new NewTopic(n, 1, (short) 1));
        admin.createTopics(topics).all().get(15, TimeUnit.SECONDS);
        return null;
    }

    static KafkaProducer<byte[], byte[]> producer(String txnId, String clientId, Object... extra) {
        java.util.Properties props = Out.producerProps(bootstrap, "transactional.id", txnId, "client.id", clientId,
                "max.block.ms", 10_000, "request.timeout.ms", 10_000, "delivery.timeout.ms", 20_000,
                "linger.ms", 0);
        for (int i = 0; i < extra.length; i += 2) props.put(String.valueOf(extra[i]), String.valueOf(extra[i + 1]));
        return new KafkaProducer<>(props);
    }

    static KafkaConsumer<byte[], byte[]> consumer(String isolation, String group, String clientId) {
        java.util.Properties props = Out.consumerProps(bootstrap, "isolation.level", isolation, "client.id", clientId,
                "enable.auto.commit", "false", "auto.offset.reset", "earliest", "default.api.timeout.ms", 15_000,
                "request.timeout.ms", 10_000, "session.timeout.ms", 10_000, "heartbeat.interval.ms", 1000);
        if (group != null) props.put("group.id", group);
        return new KafkaConsumer<>(props);
    }

    /** One transactional record to partition 0, waited for: its offset. */
    static long send(KafkaProducer<byte[], byte[]> p, String topic, String value) throws Exception {
        RecordMetadata md = p.send(new ProducerRecord<>(topic, 0, null, Out.utf8(value))).get(20, TimeUnit.SECONDS);
        return md.offset();
    }

    /** n records ``tag + (first + i)`` by a plain (idempotent, non-transactional) producer: their offsets. */
    static List<Long> plainSend(String topic, String tag, int first, int n) throws Exception {
        List<Long> offsets = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(Out.producerProps(bootstrap, "acks", "all",
                "client.id", "plain-producer", "max.block.ms", 10_000, "request.timeout.ms", 10_000,
                "delivery.timeout.ms", 20_000, "linger.ms", 0))) {
            for (int i = 0; i < n; i++) {
                offsets.add(p.send(new ProducerRecord<>(topic, 0, null, Out.utf8(tag + (first + i))))
                        .get(20, TimeUnit.SECONDS).offset());
            }
        }
        return offsets;
    }

    /** Polls (at most 75 times, 200 ms each) until ``want`` records arrived; fails with what came otherwise. */
    static Map<String, Object> pollRecords(KafkaConsumer<byte[], byte[]> c, List<ConsumerRecord<byte[], byte[]>> got,
                                           int want) {
        for (int i = 0; i < 75 && got.size() < want; i++) {
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) got.add(r);
        }
        List<String> values = new ArrayList<>();
        List<Long> offsets = new ArrayList<>();
        for (ConsumerRecord<byte[], byte[]> r : got) {
            values.add(Out.str(r.value()));
            offsets.add(r.offset());
        }
        if (got.size() != want) {
            throw new IllegalStateException("wanted " + want + " records, got " + got.size() + ": " + values);
        }
        return Out.map("values", values, "offsets", offsets);
    }

    static long latest(Admin admin, TopicPartition tp, IsolationLevel iso) throws Exception {
        return admin.listOffsets(Map.of(tp, OffsetSpec.latest()), new ListOffsetsOptions(iso)).partitionResult(tp)
                .get(15, TimeUnit.SECONDS).offset();
    }

    /** Until no transaction is open on tp (LSO == log end), at most 50 looks 100 ms apart. */
    static Map<String, Object> settle(Admin admin, TopicPartition tp) throws Exception {
        long lso = -1, end = -2;
        for (int i = 0; i < 50; i++) {
            lso = latest(admin, tp, IsolationLevel.READ_COMMITTED);
            end = latest(admin, tp, IsolationLevel.READ_UNCOMMITTED);
            if (lso == end) break;
            Thread.sleep(100);
        }
        return Out.map("settled", lso == end, "end", end);
    }

    static void settleAndRead(String name, Admin admin, TopicPartition tp) {
        step("settle_" + name, () -> settle(admin, tp));
        for (String iso : List.of("read_committed", "read_uncommitted")) {
            step("read_" + name, () -> read(tp, iso));
        }
    }

    /** tp from its beginning up to the consumer's end offset for ``isolation`` (at most 75 polls of 200 ms). */
    static Map<String, Object> read(TopicPartition tp, String isolation) {
        try (KafkaConsumer<byte[], byte[]> c = consumer(isolation, null, "read-" + isolation)) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long end = c.endOffsets(List.of(tp)).get(tp);
            List<String> values = new ArrayList<>();
            List<Long> offsets = new ArrayList<>();
            for (int i = 0; i < 75 && c.position(tp) < end; i++) {
                ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : rs) {
                    values.add(Out.str(r.value()));
                    offsets.add(r.offset());
                }
            }
            return Out.map("isolation", isolation, "values", values, "offsets", offsets, "end_offset", end,
                    "position", c.position(tp));
        }
    }

    /** The group's committed offsets from the Admin, "topic-partition" -> offset (sorted). */
    static Map<String, Object> adminOffsets(Admin admin, String group, boolean requireStable) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> got = admin.listConsumerGroupOffsets(group,
                        new ListConsumerGroupOffsetsOptions().requireStable(requireStable))
                .partitionsToOffsetAndMetadata().get(15, TimeUnit.SECONDS);
        Map<String, Object> m = new TreeMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : got.entrySet()) {
            m.put(e.getKey().topic() + "-" + e.getKey().partition(), e.getValue() == null ? null : e.getValue().offset());
        }
        return m;
    }
}
