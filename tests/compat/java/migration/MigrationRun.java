import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * KIP-848's online migration driven by real Java 4.4 consumers. Usage: MigrationRun BOOTSTRAP TOPIC GROUP
 * 1. a classic consumer C (group.protocol=classic, the default assignors) reads the first 40 records of TOPIC (4
 *    partitions), committing after each poll;
 * 2. a consumer K with group.protocol=consumer joins the group (the broker upgrades it): both read the next 40;
 * 3. K closes (the last consumer-protocol member leaves: the broker downgrades the group): C reads the last 40.
 * Each phase ends once its records were read (or after 60 s: a failure). One JSON line per phase:
 * {"phase":n,"read":{"C":x,"K":y},"missing":m,"again":d,"assigned":{"C":[...],"K":[...]},"ms":t}, where "again"
 * counts records read more than once (allowed across a rebalance: uncommitted positions are read again by the new
 * owner) and "missing" the phase's records never read.
 */
public class MigrationRun {
    static final int PER_PHASE = 40;

    static final class Member implements Runnable {
        final String name;
        final Properties props;
        final String topic;
        final Map<String, Integer> seen;
        final AtomicBoolean stop = new AtomicBoolean();
        final AtomicReference<Set<Integer>> assigned = new AtomicReference<>(new TreeSet<>());
        final List<String> errors = new CopyOnWriteArrayList<>();
        Thread thread;

        Member(String name, Properties props, String topic, Map<String, Integer> seen) {
            this.name = name;
            this.props = props;
            this.topic = topic;
            this.seen = seen;
        }

        public void run() {
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
                c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    public void onPartitionsRevoked(Collection<TopicPartition> ps) {
                        c.commitSync();
                        update(c);
                    }
                    public void onPartitionsAssigned(Collection<TopicPartition> ps) {
                        update(c);
                    }
                    public void onPartitionsLost(Collection<TopicPartition> ps) {
                        update(c);
                    }
                });
                while (!stop.get()) {
                    var records = c.poll(Duration.ofMillis(100));
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        seen.merge(new String(r.value()), 1, Integer::sum);
                    }
                    if (!records.isEmpty()) c.commitSync();
                    update(c);
                }
            } catch (Exception e) {
                errors.add(e.toString());
            }
        }

        void update(KafkaConsumer<byte[], byte[]> c) {
            Set<Integer> s = new TreeSet<>();
            for (TopicPartition tp : c.assignment()) s.add(tp.partition());
            assigned.set(s);
        }

        void start() {
            thread = new Thread(this, name);
            thread.start();
        }

        void close() throws InterruptedException {
            stop.set(true);
            thread.join(60_000);
        }
    }

    static Properties consumer(String bootstrap, String group, String protocol, String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("group.protocol", protocol);
        p.put("client.id", clientId);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        p.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        return p;
    }

    static String json(Object o) {
        if (o instanceof String s) return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
        if (o instanceof Map<?, ?> m) {
            List<String> parts = new ArrayList<>();
            for (var e : m.entrySet()) parts.add(json(String.valueOf(e.getKey())) + ":" + json(e.getValue()));
            return "{" + String.join(",", parts) + "}";
        }
        if (o instanceof Collection<?> c) {
            List<String> parts = new ArrayList<>();
            for (Object x : c) parts.add(json(x));
            return "[" + String.join(",", parts) + "]";
        }
        return String.valueOf(o);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic(topic, 4, (short) 1))).all().get();
        }
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("key.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
        pp.put("value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
        Map<String, Integer> byC = new ConcurrentHashMap<>(), byK = new ConcurrentHashMap<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
            Member c = new Member("C", consumer(bootstrap, group, "classic", "classic-c"), topic, byC);
            Member k = new Member("K", consumer(bootstrap, group, "consumer", "kip848-k"), topic, byK);
            c.start();
            for (int phase = 1; phase <= 3; phase++) {
                if (phase == 2) {
                    k.start();
                    long until = System.currentTimeMillis() + 60_000;  // both hold partitions: the upgrade is done
                    while ((c.assigned.get().isEmpty() || k.assigned.get().isEmpty())
                            && System.currentTimeMillis() < until) Thread.sleep(50);
                }
                if (phase == 3) {
                    k.close();
                    long until = System.currentTimeMillis() + 60_000;  // C alone holds the topic: downgraded
                    while (c.assigned.get().size() < 4 && System.currentTimeMillis() < until) Thread.sleep(50);
                }
                long start = System.currentTimeMillis();
                List<String> values = new ArrayList<>();
                for (int i = 0; i < PER_PHASE; i++) {
                    String v = "p" + phase + "-" + i;
                    values.add(v);
                    producer.send(new ProducerRecord<>(topic, i % 4, null, v.getBytes()));
                }
                producer.flush();
                int missing = PER_PHASE;
                while (System.currentTimeMillis() - start < 60_000) {
                    missing = 0;
                    for (String v : values) if (!byC.containsKey(v) && !byK.containsKey(v)) missing++;
                    if (missing == 0) break;
                    Thread.sleep(50);
                }
                int readC = 0, readK = 0, again = 0;
                for (String v : values) {
                    int nc = byC.getOrDefault(v, 0), nk = byK.getOrDefault(v, 0);
                    readC += nc > 0 ? 1 : 0;
                    readK += nk > 0 ? 1 : 0;
                    if (nc + nk > 1) again++;
                }
                Map<String, Object> line = new java.util.LinkedHashMap<>();
                line.put("phase", phase);
                line.put("read", Map.of("C", readC, "K", readK));
                line.put("missing", missing);
                line.put("again", again);
                line.put("assigned", Map.of("C", new ArrayList<>(c.assigned.get()),
                        "K", phase == 3 ? List.of() : new ArrayList<>(k.assigned.get())));
                line.put("ms", System.currentTimeMillis() - start);
                line.put("errors", new ArrayList<>(c.errors));
                System.out.println(json(line));
                System.out.flush();
            }
            c.close();
            if (!k.errors.isEmpty()) System.out.println(json(Map.of("k_errors", new ArrayList<>(k.errors))));
        }
    }
}
