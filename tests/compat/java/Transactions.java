import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * A transactional producer (transactional.id set).
 * Usage: Transactions BOOTSTRAP TOPIC TRANSACTIONAL_ID
 * initTransactions(); a committed transaction of 3 records; an aborted one of 2; a committed one of 1. Then two
 * consumers read TOPIC from the beginning, isolation.level read_committed and read_uncommitted.
 * Lines: {"step":"init"|"commit1"|"abort"|"commit2","ok":..., "elapsed_ms":t, error fields when not ok} (the
 * program stops at the first failed step), {"step":"read","isolation":...,"values":[...],"offsets":[...],
 * "end_offset":n}.
 */
public class Transactions {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String txnId = args[2];
        try (Admin admin = Admin.create(Out.props(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
        }
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(Out.producerProps(bootstrap,
                "transactional.id", txnId, "max.block.ms", 10_000, "client.id", "txn-producer"))) {
            if (!step("init", p::initTransactions)) return;
            if (!step("commit1", () -> {
                p.beginTransaction();
                for (int i = 0; i < 3; i++) p.send(new ProducerRecord<>(topic, 0, null, Out.utf8("c1-" + i)));
                p.commitTransaction();
            })) return;
            if (!step("abort", () -> {
                p.beginTransaction();
                for (int i = 0; i < 2; i++) p.send(new ProducerRecord<>(topic, 0, null, Out.utf8("a-" + i)));
                p.flush();
                p.abortTransaction();
            })) return;
            if (!step("commit2", () -> {
                p.beginTransaction();
                p.send(new ProducerRecord<>(topic, 0, null, Out.utf8("c2-0")));
                p.commitTransaction();
            })) return;
        }
        TopicPartition tp = new TopicPartition(topic, 0);
        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(Out.consumerProps(bootstrap,
                    "isolation.level", isolation, "client.id", "txn-" + isolation))) {
                c.assign(List.of(tp));
                c.seekToBeginning(List.of(tp));
                long end = c.endOffsets(List.of(tp)).get(tp);
                List<String> values = new ArrayList<>();
                List<Long> offsets = new ArrayList<>();
                long deadline = Out.now() + 15_000;
                while (c.position(tp) < end && Out.now() < deadline) {
                    for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                        values.add(Out.str(r.value()));
                        offsets.add(r.offset());
                    }
                }
                Out.emit("step", "read", "isolation", isolation, "values", values, "offsets", offsets, "end_offset", end,
                        "position", c.position(tp));
            }
        }
    }

    interface Step {
        void run() throws Exception;
    }

    static boolean step(String name, Step s) {
        long start = Out.now();
        try {
            s.run();
            Out.emit("step", name, "ok", true, "elapsed_ms", Out.now() - start);
            return true;
        } catch (Exception e) {
            var m = Out.map("step", name, "ok", false, "elapsed_ms", Out.now() - start);
            m.putAll(Out.error(e));
            Out.emit(m.entrySet().stream().flatMap(x -> java.util.stream.Stream.of(x.getKey(), x.getValue())).toArray());
            return false;
        }
    }
}
