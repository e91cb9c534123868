import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Properties;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.Stores;

/**
 * A Kafka Streams 4.4 word count under {@code processing.guarantee=exactly_once_v2}, one instance per run (the test
 * runs two with the same application.id and kills one with SIGKILL).
 * Usage: StreamsWordCount BOOTSTRAP APPLICATION_ID STATE_DIR INPUT OUTPUT NAME [MAX_TICKS]
 * <p>
 * Topology: INPUT (lines of words) -> flatMapValues(split on ' ') -> groupBy(word) (a repartition topic) -> count()
 * (an in-memory store with a changelog, no record cache: one output record per input word) -> OUTPUT (word, count as
 * a long). commit.interval.ms=100, replication.factor=1, one stream thread, the classic group protocol with a 6 s
 * session, producer transaction.timeout.ms=5000.
 * <p>
 * Lines (JSON, stdout): {"event":"state","instance":NAME,"old":S,"new":S}, {"event":"tasks","instance":NAME,
 * "state":S,"active":[task ids]} each time the instance's active tasks or state change (looked at every 100 ms), and
 * {"event":"error","instance":NAME,"error":class,"message":...,"cause":class,"cause_message":...} for an uncaught
 * exception (the client then shuts down). The program closes itself after MAX_TICKS looks (default 3000) or on
 * SIGTERM, and prints {"event":"closed",...}.
 * <p>
 * Environment (tests/compat/test_streams_static.py): STREAMS_GROUP_INSTANCE_ID makes the instance a static member
 * (KIP-345), STREAMS_SESSION_TIMEOUT_MS replaces the 6 s session, STREAMS_PROCESSING_GUARANTEE the guarantee.
 */
public class StreamsWordCount {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], stateDir = args[2], input = args[3], output = args[4];
        String name = args[5];
        int maxTicks = args.length > 6 ? Integer.parseInt(args[6]) : 3000;

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.CLIENT_ID_CONFIG, appId + "-" + name);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        String session = System.getenv().getOrDefault("STREAMS_SESSION_TIMEOUT_MS", "6000");
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), Integer.parseInt(session));
        String instanceId = System.getenv("STREAMS_GROUP_INSTANCE_ID");  // KIP-345 static membership when set
        if (instanceId != null) props.put(StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG), instanceId);
        String guarantee = System.getenv("STREAMS_PROCESSING_GUARANTEE");
        if (guarantee != null) props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        props.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 5000);
        props.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 5);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.split(" ")))
            .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
            .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts"))
                .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((newState, oldState) ->
            Out.emit("event", "state", "instance", name, "old", oldState.name(), "new", newState.name()));
        streams.setUncaughtExceptionHandler(e -> {
            Throwable c = e.getCause();
            Out.emit("event", "error", "instance", name, "error", e.getClass().getName(), "message", e.getMessage(),
                "cause", c == null ? null : c.getClass().getName(), "cause_message", c == null ? null : c.getMessage());
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(20));
            Out.emit("event", "closed", "instance", name, "state", streams.state().name());
        }));
        streams.start();

        String last = "";
        for (int tick = 0; tick < maxTicks; tick++) {
            KafkaStreams.State state = streams.state();
            TreeSet<String> active = new TreeSet<>();
            try {
                for (ThreadMetadata t : streams.metadataForLocalThreads()) {
                    for (TaskMetadata task : t.activeTasks()) active.add(task.taskId().toString());
                }
            } catch (RuntimeException e) {
                // not queryable in this state
            }
            String now = state.name() + active;
            if (!now.equals(last)) {
                Out.emit("event", "tasks", "instance", name, "state", state.name(), "active", new ArrayList<>(active));
                last = now;
            }
            if (state == KafkaStreams.State.ERROR || state == KafkaStreams.State.NOT_RUNNING
                    || state == KafkaStreams.State.PENDING_ERROR) {
                break;
            }
            Thread.sleep(100);
        }
        System.exit(0);  // the shutdown hook closes the client
    }
}
