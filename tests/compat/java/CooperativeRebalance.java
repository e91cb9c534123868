import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * Two members of one group with the cooperative-sticky assignor on a 4-partition topic.
 * Usage: CooperativeRebalance BOOTSTRAP TOPIC GROUP
 * 40 records are produced, member "a" joins alone (gets all 4 partitions) and reads; member "b" joins (a cooperative
 * rebalance moves 2 partitions from a to b, a keeping the other 2 throughout); once both hold 2, 160 more records are
 * produced. Both commit synchronously after every poll and in onPartitionsRevoked. They stop when 200 distinct
 * records were consumed (or after 60 s).
 * Lines: {"event":"assigned"|"revoked"|"lost","member":m,"partitions":[...],"generation":g} from the rebalance
 * listeners, {"event":"record","member":m,"partition":p,"offset":o,"value":v}, {"event":"final","member":m,
 * "assignment":[...]} just before a member closes, {"event":"timeout",...} when a phase timed out.
 */
public class CooperativeRebalance {
    static final int FIRST = 40;
    static final int SECOND = 160;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        try (Admin admin = Admin.create(Out.props(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 4, (short) 1))).all().get();
        }
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(Out.producerProps(bootstrap))) {
            produce(producer, topic, 0, FIRST);
            Set<String> seen = ConcurrentHashMap.newKeySet();
            AtomicBoolean stop = new AtomicBoolean();
            Member a = new Member(bootstrap, topic, group, "a", seen, stop);
            a.start();
            if (!waitFor(() -> a.assignment.size() == 4, 30_000)) Out.emit("event", "timeout", "phase", "a-alone");
            Member b = new Member(bootstrap, topic, group, "b", seen, stop);
            b.start();
            if (!waitFor(() -> a.assignment.size() == 2 && b.assignment.size() == 2, 45_000)) {
                Out.emit("event", "timeout", "phase", "a-and-b", "a", Out.tps(a.assignment), "b", Out.tps(b.assignment));
            }
            produce(producer, topic, FIRST, SECOND);
            if (!waitFor(() -> seen.size() >= FIRST + SECOND, 45_000)) {
                Out.emit("event", "timeout", "phase", "consume", "seen", seen.size());
            }
            Thread.sleep(500);  // a duplicate delivery would show up here
            stop.set(true);
            a.join();
            b.join();
        }
    }

    static void produce(KafkaProducer<byte[], byte[]> producer, String topic, int from, int n) throws Exception {
        for (int i = from; i < from + n; i++) producer.send(new ProducerRecord<>(topic, i % 4, null, Out.utf8("r" + i)));
        producer.flush();
    }

    static boolean waitFor(java.util.function.BooleanSupplier cond, long ms) throws InterruptedException {
        long deadline = Out.now() + ms;
        while (Out.now() < deadline) {
            if (cond.getAsBoolean()) return true;
            Thread.sleep(50);
        }
        return cond.getAsBoolean();
    }

    static class Member extends Thread {
        final String bootstrap, topic, group, name;
        final Set<String> seen;
        final AtomicBoolean stop;
        volatile Set<TopicPartition> assignment = Set.of();

        Member(String bootstrap, String topic, String group, String name, Set<String> seen, AtomicBoolean stop) {
            this.bootstrap = bootstrap;
            this.topic = topic;
            this.group = group;
            this.name = name;
            this.seen = seen;
            this.stop = stop;
        }

        @Override
        public void run() {
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(Out.consumerProps(bootstrap,
                    "group.id", group, "client.id", "coop-" + name, "auto.offset.reset", "earliest",
                    "enable.auto.commit", false, "max.poll.records", 7,
                    "partition.assignment.strategy", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"))) {
                c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                        Map<TopicPartition, OffsetAndMetadata> offs = new HashMap<>();
                        for (TopicPartition tp : parts) offs.put(tp, new OffsetAndMetadata(c.position(tp)));
                        if (!offs.isEmpty()) c.commitSync(offs);
                        Out.emit("event", "revoked", "member", name, "partitions", Out.tps(parts),
                                "generation", c.groupMetadata().generationId());
                        assignment = Set.copyOf(c.assignment());
                    }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                        Out.emit("event", "assigned", "member", name, "partitions", Out.tps(parts),
                                "generation", c.groupMetadata().generationId());
                        assignment = Set.copyOf(c.assignment());
                    }

                    @Override
                    public void onPartitionsLost(Collection<TopicPartition> parts) {
                        Out.emit("event", "lost", "member", name, "partitions", Out.tps(parts));
                        assignment = Set.copyOf(c.assignment());
                    }
                });
                while (!stop.get()) {
                    ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(100));
                    for (ConsumerRecord<byte[], byte[]> r : rs) {
                        seen.add(r.partition() + ":" + r.offset());
                        Out.emit("event", "record", "member", name, "partition", r.partition(), "offset", r.offset(),
                                "value", Out.str(r.value()));
                    }
                    if (!rs.isEmpty()) c.commitSync();
                    assignment = Set.copyOf(c.assignment());
                }
                Out.emit("event", "final", "member", name, "assignment", Out.tps(c.assignment()));
            } catch (Exception e) {
                Out.emitError("member", e, "member", name);
            }
        }
    }
}
