import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * Consumer positioning and group offsets.
 * Usage: ConsumerOffsets BOOTSTRAP TOPIC GROUP T0_MS
 * Topic TOPIC (2 partitions) gets 20 records per partition: partition 0 at timestamps T0 + 1000 i, partition 1 at
 * T0 + 1000 i + 500 (i = 0..19). Then, each as one line {"step": ...}:
 *   offsets         beginningOffsets / endOffsets
 *   for_times       offsetsForTimes for a set of query timestamps per partition (null when none is later)
 *   position        assign + position with auto.offset.reset latest and earliest, after seek, seekToEnd,
 *                   seekToBeginning, and the first record a poll returns after each seek
 *   group_a         a group member (subscribe, max.poll.records=3) that reads >= 10 records, commitSync()s, and
 *                   reports what it read and committed()
 *   group_b         a second member, started after the first closed: what it read (it must resume at the commit)
 *   commit_meta     commitSync with metadata, read back with committed()
 *   group_c         a third member after that: its positions once assigned (the committed ends)
 */
public class ConsumerOffsets {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        long t0 = Long.parseLong(args[3]);
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        List<TopicPartition> parts = List.of(p0, p1);

        try (Admin admin = Admin.create(Out.props(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
        }
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(Out.producerProps(bootstrap, "linger.ms", 5))) {
            for (int i = 0; i < 20; i++) {
                producer.send(new ProducerRecord<>(topic, 0, t0 + 1000L * i, Out.utf8("k" + i), Out.utf8("p0-" + i)));
                producer.send(new ProducerRecord<>(topic, 1, t0 + 1000L * i + 500, Out.utf8("k" + i), Out.utf8("p1-" + i)));
            }
            producer.flush();
        }

        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(Out.consumerProps(bootstrap,
                "auto.offset.reset", "latest", "client.id", "positions"))) {
            Map<TopicPartition, Long> b = c.beginningOffsets(parts);
            Map<TopicPartition, Long> e = c.endOffsets(parts);
            Out.emit("step", "offsets", "beginning", List.of(b.get(p0), b.get(p1)), "end", List.of(e.get(p0), e.get(p1)));

            long[] queries = {t0 - 1, t0, t0 + 500, t0 + 5500, t0 + 6000, t0 + 19_000, t0 + 19_001, t0 + 19_500,
                              t0 + 19_501, t0 + 100_000};
            for (long q : queries) {
                Map<TopicPartition, Long> req = new HashMap<>();
                req.put(p0, q);
                req.put(p1, q);
                Map<TopicPartition, OffsetAndTimestamp> res = c.offsetsForTimes(req);
                List<Object> row = new ArrayList<>();
                for (TopicPartition tp : parts) {
                    OffsetAndTimestamp ot = res.get(tp);
                    row.add(ot == null ? null : List.of(ot.offset(), ot.timestamp()));
                }
                Out.emit("step", "for_times", "query", q - t0, "result", row);
            }

            c.assign(parts);
            Out.emit("step", "position", "what", "reset_latest", "p0", c.position(p0), "p1", c.position(p1));
            c.seek(p0, 7);
            Out.emit("step", "position", "what", "seek_7", "p0", c.position(p0), "first", firstRecord(c, p0));
            c.seekToEnd(List.of(p0));
            Out.emit("step", "position", "what", "seek_to_end", "p0", c.position(p0));
            c.seekToBeginning(List.of(p0));
            Out.emit("step", "position", "what", "seek_to_beginning", "p0", c.position(p0), "first", firstRecord(c, p0));
            OffsetAndTimestamp ot = c.offsetsForTimes(Map.of(p1, t0 + 12_345)).get(p1);
            c.seek(p1, ot.offset());
            Out.emit("step", "position", "what", "seek_for_time", "p1", c.position(p1), "first", firstRecord(c, p1));
        }
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(Out.consumerProps(bootstrap,
                "auto.offset.reset", "earliest", "client.id", "positions-earliest"))) {
            c.assign(parts);
            Out.emit("step", "position", "what", "reset_earliest", "p0", c.position(p0), "p1", c.position(p1));
        }

        Set<String> seen = new HashSet<>();
        // member A: reads at least 10 records, commits what it consumed, leaves
        try (KafkaConsumer<byte[], byte[]> a = groupConsumer(bootstrap, group, "member-a")) {
            a.subscribe(List.of(topic));
            List<Object> read = new ArrayList<>();
            long deadline = Out.now() + 30_000;
            while (read.size() < 10 && Out.now() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : a.poll(Duration.ofMillis(200))) {
                    read.add(List.of(r.partition(), r.offset()));
                    seen.add(r.partition() + ":" + r.offset());
                }
            }
            a.commitSync();
            Map<TopicPartition, OffsetAndMetadata> committed = a.committed(new HashSet<>(parts));
            Out.emit("step", "group_a", "read", read, "assignment", Out.tps(a.assignment()),
                    "positions", List.of(a.position(p0), a.position(p1)),
                    "committed", List.of(off(committed.get(p0)), off(committed.get(p1))));
        }
        // member B: a new member of the same group resumes from the commit
        try (KafkaConsumer<byte[], byte[]> b = groupConsumer(bootstrap, group, "member-b")) {
            b.subscribe(List.of(topic));
            List<Object> read = new ArrayList<>();
            long deadline = Out.now() + 30_000;
            while (seen.size() < 40 && Out.now() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : b.poll(Duration.ofMillis(200))) {
                    read.add(List.of(r.partition(), r.offset()));
                    seen.add(r.partition() + ":" + r.offset());
                }
            }
            Out.emit("step", "group_b", "read", read, "assignment", Out.tps(b.assignment()));
            b.commitSync();
            b.commitSync(Map.of(p0, new OffsetAndMetadata(20, "done-by-b")));
            Map<TopicPartition, OffsetAndMetadata> committed = b.committed(new HashSet<>(parts));
            Out.emit("step", "commit_meta", "p0", off(committed.get(p0)), "p0_metadata", committed.get(p0).metadata(),
                    "p1", off(committed.get(p1)));
        }
        // member C: starts at the committed ends, reads nothing
        try (KafkaConsumer<byte[], byte[]> c = groupConsumer(bootstrap, group, "member-c")) {
            c.subscribe(List.of(topic));
            List<Object> read = new ArrayList<>();
            long deadline = Out.now() + 30_000;
            while (c.assignment().size() < 2 && Out.now() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) read.add(List.of(r.partition(), r.offset()));
            }
            for (int i = 0; i < 3; i++) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) read.add(List.of(r.partition(), r.offset()));
            }
            Out.emit("step", "group_c", "read", read, "assignment", Out.tps(c.assignment()),
                    "positions", List.of(c.position(p0), c.position(p1)));
        }
    }

    static Long off(OffsetAndMetadata m) {
        return m == null ? null : m.offset();
    }

    static KafkaConsumer<byte[], byte[]> groupConsumer(String bootstrap, String group, String clientId) {
        return new KafkaConsumer<>(Out.consumerProps(bootstrap, "group.id", group, "client.id", clientId,
                "auto.offset.reset", "earliest", "enable.auto.commit", false, "max.poll.records", 3));
    }

    /** [offset, timestamp] of the first record poll returns for tp after a seek (polls up to 10 s). */
    static List<Long> firstRecord(KafkaConsumer<byte[], byte[]> c, TopicPartition tp) {
        long pos = c.position(tp);
        long deadline = Out.now() + 10_000;
        while (Out.now() < deadline) {
            ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(200));
            List<ConsumerRecord<byte[], byte[]>> l = rs.records(tp);
            if (!l.isEmpty()) {
                ConsumerRecord<byte[], byte[]> r = l.get(0);
                c.seek(tp, pos);  // leave the position where the caller put it
                return List.of(r.offset(), r.timestamp());
            }
        }
        return null;
    }
}
