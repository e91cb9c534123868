import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;

/**
 * The idempotent producer (kafka-clients' default: enable.idempotence=true, acks=all) with one codec per topic.
 * Usage: ProducerCodecs BOOTSTRAP TOPIC_PREFIX CODEC[,CODEC...] [T0_MS]
 * Per codec, topic PREFIX-CODEC (2 partitions), producer client.id codecs-CODEC: 60 records sent asynchronously
 * (linger.ms=50 collects them into multi-record batches), then 6 sent one at a time; record i goes to partition i % 2
 * with the explicit timestamp T0_MS + i (default T0: 30 s ago) when i is even, the producer's clock when odd; a null
 * key on every 3rd, headers on some, a 20 KB compressible value on every 10th. Then everything is read back with
 * assign + seekToBeginning.
 * Lines: {"event":"sent",...} per record (its RecordMetadata), {"event":"read",...} per record read,
 * {"event":"offsets",...} per codec (beginning/end offsets), {"op":"codec","ok":false,...error} on a failure.
 */
public class ProducerCodecs {
    static final int ASYNC = 60;
    static final int SYNC = 6;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String prefix = args[1];
        long t0 = args.length > 3 ? Long.parseLong(args[3]) : Out.now() - 30_000;
        for (String codec : args[2].split(",")) {
            String topic = prefix + "-" + codec;
            try {
                run(bootstrap, topic, codec, t0);
            } catch (Exception e) {
                Out.emitError("codec", e, "codec", codec);
            }
        }
    }

    static byte[] value(String codec, int i) {
        if (i % 10 == 0) {
            return Out.utf8(("compressible " + codec + " value " + i + " ").repeat(800));
        }
        return Out.utf8("v-" + codec + "-" + i);
    }

    static RecordHeaders headers(int i) {
        RecordHeaders h = new RecordHeaders();
        if (i % 4 == 0) h.add("h" + i, new byte[] {(byte) i, 0, (byte) 255});
        if (i % 7 == 0) h.add("empty", null);
        return h;
    }

    static List<Object> headerList(Iterable<Header> hs) {
        List<Object> l = new ArrayList<>();
        for (Header h : hs) l.add(List.of(h.key(), h.value() == null ? "null" : HexFormat.of().formatHex(h.value())));
        return l;
    }

    static void run(String bootstrap, String topic, String codec, long t0) throws Exception {
        try (Admin admin = Admin.create(Out.props(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
        }
        Map<Integer, RecordMetadata> meta = new ConcurrentHashMap<>();
        List<ProducerRecord<byte[], byte[]>> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(Out.producerProps(bootstrap,
                "compression.type", codec, "linger.ms", 50, "client.id", "codecs-" + codec))) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < ASYNC + SYNC; i++) {
                Long ts = i % 2 == 0 ? Long.valueOf(t0 + i) : null;
                byte[] key = i % 3 == 0 ? null : Out.utf8("k" + i);
                ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, i % 2, ts, key, value(codec, i), headers(i));
                sent.add(r);
                final int idx = i;
                Future<RecordMetadata> f = producer.send(r, (m, e) -> { if (m != null) meta.put(idx, m); });
                if (i >= ASYNC) f.get(); else futures.add(f);
                if (i == ASYNC - 1) {
                    producer.flush();
                    for (Future<RecordMetadata> x : futures) x.get();
                }
            }
        }
        for (int i = 0; i < sent.size(); i++) {
            ProducerRecord<byte[], byte[]> r = sent.get(i);
            RecordMetadata m = meta.get(i);
            Out.emit("event", "sent", "codec", codec, "i", i, "partition", m.partition(), "offset", m.offset(),
                    "timestamp", m.timestamp(), "explicit_timestamp", r.timestamp(), "key", Out.str(r.key()),
                    "value_len", r.value().length, "value_sha", Out.sha256(r.value()),
                    "headers", headerList(r.headers()));
        }
        List<TopicPartition> parts = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(Out.consumerProps(bootstrap,
                "client.id", "codecs-read-" + codec))) {
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            Map<TopicPartition, Long> end = consumer.endOffsets(parts);
            Map<TopicPartition, Long> begin = consumer.beginningOffsets(parts);
            Out.emit("event", "offsets", "codec", codec,
                    "beginning", List.of(begin.get(parts.get(0)), begin.get(parts.get(1))),
                    "end", List.of(end.get(parts.get(0)), end.get(parts.get(1))));
            long deadline = Out.now() + 30_000;
            Set<TopicPartition> done = ConcurrentHashMap.newKeySet();
            while (done.size() < parts.size() && Out.now() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    Out.emit("event", "read", "codec", codec, "partition", r.partition(), "offset", r.offset(),
                            "timestamp", r.timestamp(), "timestamp_type", r.timestampType().name,
                            "key", Out.str(r.key()), "value_len", r.value() == null ? -1 : r.value().length,
                            "value_sha", Out.sha256(r.value()), "headers", headerList(r.headers()));
                }
                for (TopicPartition tp : parts) if (consumer.position(tp) >= end.get(tp)) done.add(tp);
            }
        }
    }
}
