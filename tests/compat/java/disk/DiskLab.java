import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.internal.FileLogInputStream;
import org.apache.kafka.common.record.internal.FileRecords;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.storage.internals.checkpoint.OffsetCheckpointFile;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;
import org.apache.kafka.server.storage.log.FetchIsolation;
import org.apache.kafka.server.util.KafkaScheduler;
import org.apache.kafka.storage.internals.log.FetchDataInfo;
import org.apache.kafka.storage.internals.log.LazyIndex;
import org.apache.kafka.storage.internals.log.LogConfig;
import org.apache.kafka.storage.internals.log.ProducerStateManagerConfig;
import org.apache.kafka.storage.internals.log.UnifiedLog;
import org.apache.kafka.storage.log.metrics.BrokerTopicStats;
import org.apache.kafka.storage.internals.log.LogSegment;
import org.apache.kafka.storage.internals.log.TimestampOffset;
import org.apache.kafka.storage.internals.log.TransactionIndex;

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.Future;

/**
 * Kafka's own code on both sides of kafkalog's disk format (tests/compat/test_disk_format.py).
 *
 * <pre>
 * records FILE.log ...            Kafka's FileRecords reads each segment: one JSON line per batch (its header fields,
 *                                 ensureValid's verdict, every record: offset, timestamp, key/value hex, headers)
 * segments REQUEST.json          Kafka's LogSegment over the files of each listed segment ({dir, base, offsets,
 *                                 timestamps, starting_offset}): sanityCheck, the time index's max, translateOffset
 *                                 per offset, findOffsetByTimestamp per timestamp (a JSON list)
 * checkpoint FILE ...             Kafka's OffsetCheckpointFile reads each checkpoint file (JSON)
 * load REQUEST.json              Kafka's UnifiedLog loads each listed partition dir ({dir, config, log_start,
 *                                 recovery_point, clean, timestamps}): recovery and index rebuild when not clean,
 *                                 then every record from the log start and fetchOffsetByTimestamp (a JSON list)
 * produce BOOTSTRAP PLAN.json     create topics, then produce each step's records (idempotent or transactional
 *                                 producers too), then DeleteRecords; prints every record's offset and timestamp
 *                                 and the low watermarks (JSON)
 * observe BOOTSTRAP REQUEST.json  commit group offsets (commits: group, topic, offset, metadata); then
 *                                 consume partitions from the beginning to the end (an isolation level each) and
 *                                 ask ListOffsets (earliest, latest, max timestamp, by timestamp) and the topic
 *                                 list, internal topics included (JSON)
 * </pre>
 * Keys, values and header values travel as lowercase hex, null as JSON null.
 */
public class DiskLab {
    static final ObjectMapper M = new ObjectMapper();
    static final JsonNodeFactory F = JsonNodeFactory.instance;
    static final HexFormat HEX = HexFormat.of();

    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "records" -> {
                for (int i = 1; i < a.length; i++) records(new File(a[i]));
            }
            case "segments" -> {
                ArrayNode out = F.arrayNode();
                for (JsonNode s : M.readTree(new File(a[1]))) {
                    out.add(segment(new File(s.get("dir").asText()), s.get("base").asLong(), s));
                }
                System.out.println(M.writeValueAsString(out));
            }
            case "checkpoint" -> {
                ObjectNode out = F.objectNode();
                for (int i = 1; i < a.length; i++) {
                    ObjectNode entries = out.putObject(a[i]);
                    new OffsetCheckpointFile(new File(a[i]), new LogDirFailureChannel(1)).read()
                        .forEach((tp, off) -> entries.put(tp.topic() + " " + tp.partition(), off));
                }
                System.out.println(M.writeValueAsString(out));
            }
            case "load" -> {
                KafkaScheduler scheduler = new KafkaScheduler(1);
                scheduler.startup();
                ArrayNode out = F.arrayNode();
                for (JsonNode r : M.readTree(new File(a[1]))) out.add(load(r, scheduler));
                System.out.println(M.writeValueAsString(out));
            }
            case "produce" -> System.out.println(produce(a[1], M.readTree(new File(a[2]))));
            case "observe" -> System.out.println(observe(a[1], M.readTree(new File(a[2]))));
            default -> throw new IllegalArgumentException("unknown command " + a[0]);
        }
        System.out.flush();
        System.exit(0);  // the clients' threads (and Kafka's index cleaners) must not keep the JVM alive
    }

    static String hex(ByteBuffer b) {
        if (b == null) return null;
        byte[] out = new byte[b.remaining()];
        b.duplicate().get(out);
        return HEX.formatHex(out);
    }

    static String hex(byte[] b) {
        return b == null ? null : HEX.formatHex(b);
    }

    static byte[] unhex(JsonNode n) {
        return n == null || n.isNull() ? null : HEX.parseHex(n.asText());
    }

    static ArrayNode headersJson(Header[] headers) {
        ArrayNode hs = F.arrayNode();
        for (Header h : headers) {
            ArrayNode pair = F.arrayNode();
            pair.add(h.key());
            pair.add(hex(h.value()));
            hs.add(pair);
        }
        return hs;
    }

    // ---------------------------------------------------------------------------------------------- reading files

    static void records(File file) throws Exception {
        try (FileRecords fr = FileRecords.open(file, false)) {
            long position = 0;
            for (FileLogInputStream.FileChannelRecordBatch batch : fr.batches()) {
                ObjectNode b = F.objectNode();
                b.put("file", file.getPath());
                b.put("position", position);
                b.put("size", batch.sizeInBytes());
                b.put("magic", batch.magic());
                b.put("base_offset", batch.baseOffset());
                b.put("last_offset", batch.lastOffset());
                b.put("count", batch.countOrNull());
                b.put("codec", batch.compressionType().name);
                b.put("timestamp_type", batch.timestampType().name);
                b.put("max_timestamp", batch.maxTimestamp());
                b.put("producer_id", batch.producerId());
                b.put("producer_epoch", batch.producerEpoch());
                b.put("base_sequence", batch.baseSequence());
                b.put("leader_epoch", batch.partitionLeaderEpoch());
                b.put("transactional", batch.isTransactional());
                b.put("control", batch.isControlBatch());
                String valid = "ok";
                try {
                    batch.ensureValid();
                } catch (Exception e) {
                    valid = e.toString();
                }
                b.put("valid", valid);
                ArrayNode rs = b.putArray("records");
                for (Record r : batch) {
                    r.ensureValid();
                    ObjectNode o = rs.addObject();
                    o.put("offset", r.offset());
                    o.put("timestamp", r.timestamp());
                    o.put("key", hex(r.key()));
                    o.put("value", hex(r.value()));
                    o.set("headers", headersJson(r.headers()));
                }
                System.out.println(M.writeValueAsString(b));
                position += batch.sizeInBytes();
            }
            if (position != fr.sizeInBytes()) {
                ObjectNode t = F.objectNode();
                t.put("file", file.getPath());
                t.put("trailing_bytes", fr.sizeInBytes() - position);
                System.out.println(M.writeValueAsString(t));
            }
        }
    }

    static ObjectNode segment(File dir, long base, JsonNode req) throws Exception {
        String stem = String.format("%020d", base);
        FileRecords fr = FileRecords.open(new File(dir, stem + ".log"), false);
        int maxIndexSize = 10 * 1024 * 1024;
        LogSegment seg = new LogSegment(fr,
            LazyIndex.forOffset(new File(dir, stem + ".index"), base, maxIndexSize),
            LazyIndex.forTime(new File(dir, stem + ".timeindex"), base, maxIndexSize),
            new TransactionIndex(base, new File(dir, stem + ".txnindex")),
            base, 4096, 0L, Time.SYSTEM);
        ObjectNode out = F.objectNode();
        out.put("dir", dir.getPath());
        out.put("base", base);
        try {
            seg.sanityCheck(false);
            out.put("sanity", "ok");
        } catch (Exception e) {
            out.put("sanity", e.toString());
        }
        TimestampOffset max = seg.readMaxTimestampAndOffsetSoFar();
        out.put("max_timestamp", max.timestamp());
        out.put("offset_of_max_timestamp", max.offset());
        ObjectNode tr = out.putObject("translate");
        for (JsonNode o : req.path("offsets")) {
            FileRecords.LogOffsetPosition p = seg.translateOffset(o.asLong());
            if (p == null) {
                tr.putNull(o.asText());
            } else {
                ArrayNode v = tr.putArray(o.asText());
                v.add(p.offset);
                v.add(p.position);
                v.add(p.size);
            }
        }
        ObjectNode ts = out.putObject("by_timestamp");
        long starting = req.path("starting_offset").asLong(base);
        for (JsonNode t : req.path("timestamps")) {
            Optional<FileRecords.TimestampAndOffset> found = seg.findOffsetByTimestamp(t.asLong(), starting, 65536);
            if (found.isEmpty()) {
                ts.putNull(t.asText());
            } else {
                ArrayNode v = ts.putArray(t.asText());
                v.add(found.get().timestamp);
                v.add(found.get().offset);
            }
        }
        return out;
    }

    /**
     * Kafka's UnifiedLog (its LogLoader: recovery, index rebuild, producer state) over one partition dir, given a log
     * start offset and recovery point (as our checkpoints say) and whether the shutdown was clean. Answers the log
     * start/end, every record a consumer would get reading from the log start (control batches skipped), and
     * fetchOffsetByTimestamp for each timestamp (-1 latest, -2 earliest, -3 max timestamp). Closes the log after.
     */
    static ObjectNode load(JsonNode req, KafkaScheduler scheduler) throws Exception {
        Map<String, Object> cfg = new HashMap<>();
        req.path("config").properties().forEach(e -> cfg.put(e.getKey(), e.getValue().asText()));
        File dir = new File(req.get("dir").asText());
        UnifiedLog log = UnifiedLog.create(dir, new LogConfig(cfg), req.get("log_start").asLong(),
            req.get("recovery_point").asLong(), scheduler, new BrokerTopicStats(), Time.SYSTEM, 900000,
            new ProducerStateManagerConfig(86400000, false), 600000, new LogDirFailureChannel(1),
            req.get("clean").asBoolean(), Optional.empty());
        ObjectNode out = F.objectNode();
        try {
            out.put("dir", dir.getPath());
            out.put("log_start", log.logStartOffset());
            out.put("log_end", log.logEndOffset());
            log.updateHighWatermark(log.logEndOffset());
            ArrayNode recs = out.putArray("records");
            long next = log.logStartOffset();
            while (next < log.logEndOffset()) {
                FetchDataInfo info = log.read(next, 1 << 20, FetchIsolation.HIGH_WATERMARK, true);
                long before = next;
                for (RecordBatch batch : info.records.batches()) {
                    for (Record r : batch) {
                        if (r.offset() < next || batch.isControlBatch()) continue;
                        ObjectNode o = recs.addObject();
                        o.put("offset", r.offset());
                        o.put("timestamp", r.timestamp());
                        o.put("timestamp_type", batch.timestampType().name);
                        o.put("key", hex(r.key()));
                        o.put("value", hex(r.value()));
                        o.set("headers", headersJson(r.headers()));
                    }
                    next = Math.max(next, batch.nextOffset());
                }
                if (next == before) throw new IllegalStateException(dir + ": read at " + next + " made no progress");
            }
            ObjectNode ts = out.putObject("by_timestamp");
            for (JsonNode t : req.path("timestamps")) {
                Optional<FileRecords.TimestampAndOffset> found =
                    log.fetchOffsetByTimestamp(t.asLong(), Optional.empty()).timestampAndOffsetOpt();
                if (found.isEmpty()) {
                    ts.putNull(t.asText());
                } else {
                    ArrayNode v = ts.putArray(t.asText());
                    v.add(found.get().timestamp);
                    v.add(found.get().offset);
                }
            }
        } finally {
            log.close();
        }
        return out;
    }

    // ---------------------------------------------------------------------------------------------- a real broker

    static Properties props(String bootstrap, JsonNode extra) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        if (extra != null) extra.properties().forEach(e -> p.put(e.getKey(), e.getValue().asText()));
        return p;
    }

    static ObjectNode produce(String bootstrap, JsonNode plan) throws Exception {
        try (Admin admin = Admin.create(props(bootstrap, null))) {
            List<NewTopic> topics = new ArrayList<>();
            for (JsonNode t : plan.path("create")) {
                Map<String, String> cfg = new HashMap<>();
                t.path("config").properties().forEach(e -> cfg.put(e.getKey(), e.getValue().asText()));
                topics.add(new NewTopic(t.get("name").asText(), t.path("partitions").asInt(1), (short) 1).configs(cfg));
            }
            if (!topics.isEmpty()) admin.createTopics(topics).all().get();
        }
        ObjectNode out = F.objectNode();
        ArrayNode steps = out.putArray("steps");
        for (JsonNode step : plan.path("steps")) {
            Properties p = props(bootstrap, step.path("producer"));
            p.put("key.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
            p.put("value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
            String topic = step.get("topic").asText();
            int partition = step.path("partition").asInt(0);
            boolean transactional = p.containsKey("transactional.id");
            ArrayNode results = steps.addArray();
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
                if (transactional) producer.initTransactions();
                for (JsonNode group : step.path("groups")) {
                    // a group: records sent together, then flushed; a transaction when the producer is transactional
                    long pause = group.path("pause_ms_before").asLong(0);
                    if (pause > 0) Thread.sleep(pause);
                    if (transactional) producer.beginTransaction();
                    List<Future<RecordMetadata>> sent = new ArrayList<>();
                    for (JsonNode r : group.path("records")) {
                        List<Header> headers = new ArrayList<>();
                        for (JsonNode h : r.path("headers")) {
                            headers.add(new RecordHeader(h.get(0).asText(), unhex(h.get(1))));
                        }
                        Long ts = r.path("timestamp").isNull() || r.path("timestamp").isMissingNode()
                            ? null : r.get("timestamp").asLong();
                        sent.add(producer.send(new ProducerRecord<>(topic, partition, ts, unhex(r.get("key")),
                            unhex(r.get("value")), headers)));
                    }
                    producer.flush();
                    boolean commit = group.path("commit").asBoolean(true);
                    if (transactional) {
                        if (commit) producer.commitTransaction();
                        else producer.abortTransaction();
                    }
                    for (Future<RecordMetadata> f : sent) {
                        RecordMetadata md = f.get();
                        ObjectNode o = results.addObject();
                        o.put("offset", md.offset());
                        o.put("timestamp", md.timestamp());
                        o.put("committed", !transactional || commit);
                    }
                }
            }
        }
        Map<TopicPartition, RecordsToDelete> deletes = new HashMap<>();
        for (JsonNode d : plan.path("delete_records")) {
            deletes.put(new TopicPartition(d.get("topic").asText(), d.path("partition").asInt(0)),
                RecordsToDelete.beforeOffset(d.get("before").asLong()));
        }
        if (!deletes.isEmpty()) {
            try (Admin admin = Admin.create(props(bootstrap, null))) {
                ObjectNode lows = out.putObject("low_watermarks");
                for (var e : admin.deleteRecords(deletes).lowWatermarks().entrySet()) {
                    lows.put(e.getKey().topic(), e.getValue().get().lowWatermark());
                }
            }
        }
        return out;
    }

    static IsolationLevel isolation(JsonNode n) {
        return "read_committed".equals(n.asText("read_uncommitted"))
            ? IsolationLevel.READ_COMMITTED : IsolationLevel.READ_UNCOMMITTED;
    }

    static ObjectNode observe(String bootstrap, JsonNode req) throws Exception {
        ObjectNode out = F.objectNode();
        for (JsonNode cm : req.path("commits")) {
            // a group's committed offset (OffsetCommit from an assign()ed consumer: Kafka's __consumer_offsets)
            Properties p = props(bootstrap, null);
            p.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
            p.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
            p.put("group.id", cm.get("group").asText());
            p.put("enable.auto.commit", "false");
            TopicPartition tp = new TopicPartition(cm.get("topic").asText(), cm.path("partition").asInt(0));
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
                c.assign(List.of(tp));
                OffsetAndMetadata om = new OffsetAndMetadata(cm.get("offset").asLong(), cm.path("metadata").asText(""));
                c.commitSync(Map.of(tp, om));
            }
        }
        ArrayNode reads = out.putArray("reads");
        for (JsonNode rd : req.path("reads")) {
            Properties p = props(bootstrap, null);
            p.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
            p.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
            p.put("isolation.level", isolation(rd.path("isolation")).toString());
            p.put("enable.auto.commit", "false");
            TopicPartition tp = new TopicPartition(rd.get("topic").asText(), rd.path("partition").asInt(0));
            ObjectNode r = reads.addObject();
            r.put("topic", tp.topic());
            r.put("isolation", isolation(rd.path("isolation")).toString());
            ArrayNode recs = r.putArray("records");
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
                c.assign(List.of(tp));
                c.seekToBeginning(List.of(tp));
                long end = c.endOffsets(List.of(tp)).get(tp);
                long deadline = System.currentTimeMillis() + 30000;
                while (c.position(tp) < end) {
                    if (System.currentTimeMillis() > deadline)
                        throw new IllegalStateException(tp + ": position " + c.position(tp) + " never reached " + end);
                    for (ConsumerRecord<byte[], byte[]> cr : c.poll(Duration.ofMillis(200))) {
                        ObjectNode o = recs.addObject();
                        o.put("offset", cr.offset());
                        o.put("timestamp", cr.timestamp());
                        o.put("timestamp_type", cr.timestampType().name);
                        o.put("key", hex(cr.key()));
                        o.put("value", hex(cr.value()));
                        o.set("headers", headersJson(cr.headers().toArray()));
                    }
                }
                r.put("end", end);
                r.put("position", c.position(tp));
            }
        }
        ArrayNode offsets = out.putArray("offsets");
        try (Admin admin = Admin.create(props(bootstrap, null))) {
            ArrayNode names = out.putArray("topics");
            admin.listTopics(new ListTopicsOptions().listInternal(true)).names().get().stream().sorted()
                .forEach(names::add);
            for (JsonNode q : req.path("offsets")) {
                TopicPartition tp = new TopicPartition(q.get("topic").asText(), q.path("partition").asInt(0));
                ListOffsetsOptions opts = new ListOffsetsOptions(isolation(q.path("isolation")));
                ObjectNode o = offsets.addObject();
                o.put("topic", tp.topic());
                o.put("isolation", opts.isolationLevel().toString());
                ObjectNode answers = o.putObject("answers");
                // one request per spec (a request names a partition once), all in flight together
                List<Map.Entry<String, Future<ListOffsetsResult.ListOffsetsResultInfo>>> pending = new ArrayList<>();
                for (JsonNode s : q.path("specs")) {
                    OffsetSpec spec = switch (s.asText()) {
                        case "earliest" -> OffsetSpec.earliest();
                        case "latest" -> OffsetSpec.latest();
                        case "max_timestamp" -> OffsetSpec.maxTimestamp();
                        default -> OffsetSpec.forTimestamp(s.asLong());
                    };
                    pending.add(Map.entry(s.asText(), admin.listOffsets(Map.of(tp, spec), opts).partitionResult(tp)));
                }
                for (var p : pending) {
                    ListOffsetsResult.ListOffsetsResultInfo info = p.getValue().get();
                    ArrayNode v = answers.putArray(p.getKey());
                    v.add(info.offset());
                    v.add(info.timestamp());
                }
            }
        }
        return out;
    }
}
