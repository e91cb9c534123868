package kafkalog.lab.connect;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.sink.SinkConnector;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTask;

/**
 * The compatibility lab's sink connector: each task run appends every record it is given to a file of its own in
 * {@code dir} ({@code sink-<task>-<random>.txt}), one line per record: "topic partition offset key value", written
 * through at each put() so the test counts exactly what arrived.
 */
public class FileSink extends SinkConnector {
    static final ConfigDef CONFIG = new ConfigDef()
            .define("dir", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "the folder of the output files");

    private Map<String, String> props;

    @Override
    public String version() {
        return "1";
    }

    @Override
    public void start(Map<String, String> props) {
        CONFIG.parse(props);
        this.props = props;
    }

    @Override
    public Class<? extends Task> taskClass() {
        return FileTask.class;
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

    /** One task run, one file. */
    public static class FileTask extends SinkTask {
        private Writer out;

        @Override
        public String version() {
            return "1";
        }

        @Override
        public void start(Map<String, String> props) {
            Path file = Path.of(props.get("dir"), "sink-" + props.get("task.id") + "-" + UUID.randomUUID() + ".txt");
            try {
                out = Files.newBufferedWriter(file, StandardCharsets.UTF_8, StandardOpenOption.CREATE_NEW,
                        StandardOpenOption.WRITE);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        @Override
        public void put(Collection<SinkRecord> records) {
            try {
                for (SinkRecord r : records) {
                    out.write(r.topic() + " " + r.kafkaPartition() + " " + r.kafkaOffset() + " " + r.key() + " "
                            + r.value() + "\n");
                }
                out.flush();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        @Override
        public void flush(Map<TopicPartition, OffsetAndMetadata> currentOffsets) {
        }

        @Override
        public void stop() {
            try {
                out.close();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }
}
