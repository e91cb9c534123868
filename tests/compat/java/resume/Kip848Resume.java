import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

/**
 * A long-lived consumer with group.protocol=consumer (KIP-848) for the broker-restart test.
 * Usage: Kip848Resume BOOTSTRAP TOPIC GROUP [INSTANCE_ID]   (an instance id: a static member)
 * Polls until its stdin closes; prints one line per event on stdout:
 *   assigned P,P..  |  revoked P,P..  |  record PARTITION OFFSET VALUE  |  error CLASS MESSAGE
 * each prefixed by the wall clock in ms. Its client log (log4j2, -Dkafkalog.lab.log) shows the heartbeats.
 */
public class Kip848Resume {
    static synchronized void out(String s) {
        System.out.println(System.currentTimeMillis() + " " + s);
        System.out.flush();
    }

    static String parts(Collection<TopicPartition> c) {
        StringBuilder sb = new StringBuilder();
        for (TopicPartition tp : c) sb.append(sb.length() > 0 ? "," : "").append(tp.partition());
        return sb.toString();
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("group.id", args[2]);
        p.put("group.protocol", "consumer");
        p.put("auto.offset.reset", "earliest");
        p.put("client.id", "resume");
        if (args.length > 3) p.put("group.instance.id", args[3]);
        p.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        p.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        AtomicBoolean done = new AtomicBoolean();
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in))) {
                while (r.readLine() != null) { }
            } catch (Exception e) { }
            done.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(args[1]), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> ps) { out("revoked " + parts(ps)); }
                public void onPartitionsAssigned(Collection<TopicPartition> ps) { out("assigned " + parts(ps)); }
                public void onPartitionsLost(Collection<TopicPartition> ps) { out("lost " + parts(ps)); }
            });
            while (!done.get()) {
                try {
                    for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                        out("record " + r.partition() + " " + r.offset() + " " + new String(r.value(), "UTF-8"));
                    }
                } catch (Exception e) {
                    out("error " + e.getClass().getName() + " " + String.valueOf(e.getMessage()).replace('\n', ' '));
                    Thread.sleep(100);
                }
            }
        }
    }
}
