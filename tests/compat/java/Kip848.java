import java.time.Duration;
import java.util.List;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * A consumer with group.protocol=consumer (KIP-848: ConsumerGroupHeartbeat instead of JoinGroup/SyncGroup).
 * Usage: Kip848 BOOTSTRAP TOPIC GROUP
 * 5 records are produced to TOPIC (2 partitions); the consumer subscribes and polls for up to 20 s.
 * Lines: {"event":"record",...} per record, then {"event":"result","ok":true,"count":n,"assignment":[...],
 * "elapsed_ms":t} or {"event":"result","ok":false,"count":n, error fields, "elapsed_ms":t} (the first exception
 * poll threw).
 */
public class Kip848 {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        try (Admin admin = Admin.create(Out.props(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
        }
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(Out.producerProps(bootstrap))) {
            for (int i = 0; i < 5; i++) producer.send(new ProducerRecord<>(topic, i % 2, null, Out.utf8("r" + i)));
            producer.flush();
        }
        long start = Out.now();
        int count = 0;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(Out.consumerProps(bootstrap,
                "group.id", group, "group.protocol", "consumer", "auto.offset.reset", "earliest",
                "client.id", "kip848"))) {
            c.subscribe(List.of(topic));
            try {
                while (count < 5 && Out.now() - start < 20_000) {
                    for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                        count++;
                        Out.emit("event", "record", "partition", r.partition(), "offset", r.offset(),
                                "value", Out.str(r.value()));
                    }
                }
                c.commitSync();
                Out.emit("event", "result", "ok", count == 5, "count", count, "assignment", Out.tps(c.assignment()),
                        "elapsed_ms", Out.now() - start);
            } catch (Exception e) {
                var m = Out.map("event", "result", "ok", false, "count", count);
                m.putAll(Out.error(e));
                m.put("elapsed_ms", Out.now() - start);
                Out.emit(m.entrySet().stream().flatMap(x -> java.util.stream.Stream.of(x.getKey(), x.getValue())).toArray());
            }
        }
    }
}
