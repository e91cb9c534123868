import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * bench/share_groups.py's consumers: C Java KafkaShareConsumers (KIP-932, implicit acknowledgement), one thread each,
 * in one share group, reading TOTAL records of TOPIC that are already there.
 * Usage: ShareBench BOOTSTRAP TOPIC GROUP CONSUMERS TOTAL MAX_POLL_RECORDS DEADLINE_MS
 * The group's share.auto.offset.reset is set to earliest first (a broker without group configs answers an error,
 * printed; its own default must then be earliest). The clock starts at the first record any consumer gets and stops
 * when the last of TOTAL distinct records was delivered; each consumer then acknowledges what it holds (commitSync)
 * and closes. One JSON line: {"records": distinct, "deliveries": n, "seconds": s, "per_consumer": [..],
 * "config_error": "..."|null, "timed_out": bool}.
 */
public class ShareBench {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int consumers = Integer.parseInt(args[3]);
        long total = Long.parseLong(args[4]);
        String maxPoll = args[5];
        long deadline = System.currentTimeMillis() + Long.parseLong(args[6]);
        String configError = null;
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(ap)) {
            ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
            List<AlterConfigOp> ops = List.of(new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"),
                    AlterConfigOp.OpType.SET));
            admin.incrementalAlterConfigs(Map.of(res, ops)).all().get();
        } catch (Exception e) {
            configError = e.toString().replace("\"", "'");
        }
        ConcurrentHashMap<Long, Boolean> seen = new ConcurrentHashMap<>();
        AtomicLong deliveries = new AtomicLong(), first = new AtomicLong(0), last = new AtomicLong(0);
        long[] perConsumer = new long[consumers];
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < consumers; i++) {
            final int me = i;
            Thread t = new Thread(() -> {
                Properties p = new Properties();
                p.put("bootstrap.servers", bootstrap);
                p.put("group.id", group);
                p.put("client.id", group + "-" + me);
                p.put("share.acknowledgement.mode", "implicit");
                p.put("max.poll.records", maxPoll);
                p.put("key.deserializer", ByteArrayDeserializer.class.getName());
                p.put("value.deserializer", ByteArrayDeserializer.class.getName());
                try (KafkaShareConsumer<byte[], byte[]> c = new KafkaShareConsumer<>(p)) {
                    c.subscribe(List.of(topic));
                    while (seen.size() < total && System.currentTimeMillis() < deadline) {
                        ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(100));
                        for (ConsumerRecord<byte[], byte[]> r : recs) {
                            first.compareAndSet(0, System.nanoTime());
                            deliveries.incrementAndGet();
                            perConsumer[me]++;
                            if (seen.putIfAbsent(((long) r.partition() << 40) | r.offset(), Boolean.TRUE) == null
                                    && seen.size() >= total) {
                                last.compareAndSet(0, System.nanoTime());
                            }
                        }
                    }
                    c.commitSync(Duration.ofSeconds(30));
                }
            });
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        double seconds = last.get() > 0 ? (last.get() - first.get()) / 1e9 : -1;
        StringBuilder per = new StringBuilder();
        for (int i = 0; i < consumers; i++) {
            per.append(i == 0 ? "" : ",").append(perConsumer[i]);
        }
        System.out.println("{\"records\": " + seen.size() + ", \"deliveries\": " + deliveries.get() + ", \"seconds\": "
                + seconds + ", \"per_consumer\": [" + per + "], \"config_error\": "
                + (configError == null ? "null" : "\"" + configError + "\"") + ", \"timed_out\": "
                + (last.get() == 0) + "}");
    }
}
