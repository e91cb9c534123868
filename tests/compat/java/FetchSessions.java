import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * A consumer fetching from a multi-partition topic while a producer trickles records into some of its partitions: the
 * workload behind the wire checks of KIP-227 incremental fetch sessions (the test's proxy decodes the fetches).
 * Usage: FetchSessions BOOTSTRAP TOPIC PARTITIONS RECORDS CONSUMERS
 * The topic is created with PARTITIONS partitions; CONSUMERS consumers (client ids sessions-0, sessions-1, ...; no
 * group: assign + seekToBeginning, fetch.max.wait.ms=100) each read everything. After 1.5 s of idle fetching the
 * producer sends RECORDS records, 200 ms apart: record i to partition 0, every 4th to partition PARTITIONS-1. Each
 * consumer stops 1.5 s after it has all RECORDS records (more idle fetches) or after 40 s.
 * Lines: {"event":"record","consumer":c,"partition":p,"offset":o,"value":v} per record consumed,
 * {"event":"done","consumer":c,"count":n}, {"event":"produced","count":n}, {"op":...,"ok":false,...} on a failure.
 */
public class FetchSessions {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        int records = Integer.parseInt(args[3]);
        int consumers = Integer.parseInt(args[4]);
        try (Admin admin = Admin.create(Out.props(bootstrap, "client.id", "sessions-admin"))) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
        }
        List<TopicPartition> parts = new ArrayList<>();
        for (int p = 0; p < partitions; p++) parts.add(new TopicPartition(topic, p));

        AtomicBoolean failed = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        for (int c = 0; c < consumers; c++) {
            final int id = c;
            Thread t = new Thread(() -> {
                try {
                    consume(bootstrap, parts, records, id);
                } catch (Exception e) {
                    failed.set(true);
                    Out.emitError("consume", e, "consumer", id);
                }
            });
            t.start();
            threads.add(t);
        }
        Thread.sleep(1500);
        int produced = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(Out.producerProps(bootstrap,
                "client.id", "sessions-producer"))) {
            for (int i = 0; i < records; i++) {
                int p = i % 4 == 3 ? partitions - 1 : 0;
                producer.send(new ProducerRecord<>(topic, p, null, Out.utf8("r" + i))).get();
                produced++;
                Thread.sleep(200);
            }
        } catch (Exception e) {
            Out.emitError("produce", e);
        }
        Out.emit("event", "produced", "count", produced);
        for (Thread t : threads) t.join();
        System.exit(failed.get() ? 1 : 0);
    }

    static void consume(String bootstrap, List<TopicPartition> parts, int records, int id) {
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(Out.consumerProps(bootstrap,
                "client.id", "sessions-" + id, "fetch.max.wait.ms", 100, "auto.offset.reset", "earliest"))) {
            c.assign(parts);
            c.seekToBeginning(parts);
            int n = 0;
            long deadline = Out.now() + 40_000;
            long stopAt = Long.MAX_VALUE;
            while (Out.now() < Math.min(deadline, stopAt)) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                    n++;
                    Out.emit("event", "record", "consumer", id, "partition", r.partition(), "offset", r.offset(),
                            "value", Out.str(r.value()));
                }
                if (n >= records && stopAt == Long.MAX_VALUE) stopAt = Out.now() + 1500;
            }
            Out.emit("event", "done", "consumer", id, "count", n);
        }
    }
}
