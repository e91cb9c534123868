package kafkalog.lab.connect;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.source.ExactlyOnceSupport;
import org.apache.kafka.connect.source.SourceConnector;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.source.SourceTask;

/**
 * The compatibility lab's source connector: each task emits the numbers 0, 1, 2 ... up to {@code records.per.task}
 * (exclusive) to partition {@code task id} of {@code topic}, {@code batch.size} a poll, {@code poll.interval.ms}
 * apart. Its position is a Connect source offset: source partition {"task": id}, offset {"n": the last number
 * emitted, "run": the run that emitted it}; a task that starts reads it from the offsets topic and goes on from the
 * next number.
 *
 * A record: key the task id, value "n start run" (start: the number this task run started from; run: a random id of
 * this task run), so the test can tell every run of a task apart and check where each one resumed.
 */
public class NumberSource extends SourceConnector {
    static final ConfigDef CONFIG = new ConfigDef()
            .define("topic", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "the topic to write to")
            .define("records.per.task", ConfigDef.Type.LONG, Long.MAX_VALUE, ConfigDef.Importance.HIGH,
                    "how many numbers each task emits in all")
            .define("batch.size", ConfigDef.Type.INT, 100, ConfigDef.Importance.LOW, "records per poll")
            .define("poll.interval.ms", ConfigDef.Type.LONG, 0L, ConfigDef.Importance.LOW,
                    "pause between two polls that return records");

    private Map<String, String> props;

    @Override
    public String version() {
        return "1";
    }

    @Override
    public void start(Map<String, String> props) {
        CONFIG.parse(props);  // a bad config fails the connector here, as real connectors do
        this.props = props;
    }

    @Override
    public Class<? extends Task> taskClass() {
        return NumberTask.class;
    }

    @Override
    public List<Map<String, String>> taskConfigs(int maxTasks) {
        List<Map<String, String>> out = new ArrayList<>();
        for (int i = 0; i < maxTasks; i++) {
            Map<String, String> c = new HashMap<>(props);
            c.put("task.id", Integer.toString(i));
            out.add(c);
        }
        return out;
    }

    @Override
    public void stop() {
    }

    @Override
    public ConfigDef config() {
        return CONFIG;
    }

    /** Every record carries its own position: a worker with exactly-once source support may run it (KIP-618). */
    @Override
    public ExactlyOnceSupport exactlyOnceSupport(Map<String, String> props) {
        return ExactlyOnceSupport.SUPPORTED;
    }

    /** One task: its own source partition, its own topic partition. */
    public static class NumberTask extends SourceTask {
        private int task;
        private String topic;
        private long limit;
        private int batch;
        private long pollMs;
        private Map<String, Object> sourcePartition;
        private long next;
        private String run;
        private String tail;
        private boolean polled;

        @Override
        public String version() {
            return "1";
        }

        @Override
        public void start(Map<String, String> props) {
            Map<String, Object> c = CONFIG.parse(props);
            task = Integer.parseInt(props.get("task.id"));
            topic = (String) c.get("topic");
            limit = (Long) c.get("records.per.task");
            batch = (Integer) c.get("batch.size");
            pollMs = (Long) c.get("poll.interval.ms");
            sourcePartition = Map.of("task", task);
            Map<String, Object> offset = context.offsetStorageReader().offset(sourcePartition);
            next = offset == null ? 0 : ((Number) offset.get("n")).longValue() + 1;
            run = UUID.randomUUID().toString();
            tail = " " + next + " " + run;
        }

        @Override
        public List<SourceRecord> poll() throws InterruptedException {
            if (next >= limit) {
                Thread.sleep(100);  // done: Connect calls poll() again at once, so idle a little
                return null;
            }
            if (polled && pollMs > 0) {
                Thread.sleep(pollMs);
            }
            polled = true;
            List<SourceRecord> out = new ArrayList<>();
            String key = Integer.toString(task);
            for (int i = 0; i < batch && next < limit; i++, next++) {
                out.add(new SourceRecord(sourcePartition, Map.of("n", next, "run", run), topic, task, Schema.STRING_SCHEMA, key,
                        Schema.STRING_SCHEMA, next + tail));
            }
            return out;
        }

        @Override
        public void stop() {
        }
    }
}
