import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

/**
 * AdminClient operations, each reported on its own line: {"op": name, "ok": true, ...what it returned} or
 * {"op": name, "ok": false, "error": SimpleClassName, "message": ..., ...}. A failed operation does not stop the
 * program: later ones run (and may fail for want of what it should have made).
 * Usage: AdminOps BOOTSTRAP PREFIX plain|acl
 *   plain: cluster, topics (create / list / describe / createPartitions / delete), configs (describe /
 *          incrementalAlter), records (listOffsets / deleteRecords), groups (list / describe / offsets list, alter,
 *          delete / delete), SCRAM credentials, log dirs, and describeAcls on a broker without an authorizer.
 *   acl:   createAcls / describeAcls / deleteAcls (the broker has an authorizer and User:ANONYMOUS is a super user).
 * Names all start with PREFIX: topics PREFIX-a (3 partitions, then 5), PREFIX-b, group PREFIX-g, user PREFIX-alice.
 */
public class AdminOps {
    interface Op {
        Map<String, Object> run() throws Exception;
    }

    static void op(String name, Op op) {
        long start = Out.now();
        try {
            Map<String, Object> m = Out.map("op", name, "ok", true);
            Map<String, Object> r = op.run();
            if (r != null) m.putAll(r);
            m.put("elapsed_ms", Out.now() - start);
            Out.emit(flat(m));
        } catch (Exception e) {
            Out.emitError(name, e, "elapsed_ms", Out.now() - start);
        }
    }

    static Object[] flat(Map<String, Object> m) {
        List<Object> l = new ArrayList<>();
        m.forEach((k, v) -> { l.add(k); l.add(v); });
        return l.toArray();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String prefix = args[1];
        String mode = args[2];
        try (Admin admin = Admin.create(Out.props(bootstrap, "client.id", "admin-ops",
                "default.api.timeout.ms", 15_000, "request.timeout.ms", 10_000))) {
            if (mode.equals("acl")) acls(admin, prefix);
            else plain(admin, bootstrap, prefix);
        }
    }

    static Map<String, Object> configs(Config c, List<String> keys) {
        Map<String, Object> out = new TreeMap<>();
        for (String k : keys) {
            ConfigEntry e = c.get(k);
            out.put(k, e == null ? null : Out.map("value", e.value(), "source", e.source().name(),
                    "default", e.isDefault(), "read_only", e.isReadOnly(), "sensitive", e.isSensitive()));
        }
        return out;
    }

    static Map<String, Object> describeTopic(Admin admin, String topic) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        List<Object> parts = new ArrayList<>();
        for (TopicPartitionInfo p : d.partitions()) {
            List<Integer> replicas = new ArrayList<>(), isr = new ArrayList<>();
            for (Node n : p.replicas()) replicas.add(n.id());
            for (Node n : p.isr()) isr.add(n.id());
            parts.add(Out.map("partition", p.partition(), "leader", p.leader() == null ? null : p.leader().id(),
                    "replicas", replicas, "isr", isr));
        }
        return Out.map("name", d.name(), "internal", d.isInternal(), "topic_id", String.valueOf(d.topicId()),
                "partitions", parts);
    }

    static Map<String, Object> groupOffsets(Admin admin, String group) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> offs = admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get();
        Map<String, Object> out = new TreeMap<>();
        offs.forEach((tp, om) -> out.put(tp.topic() + "-" + tp.partition(),
                om == null ? null : Out.map("offset", om.offset(), "metadata", om.metadata())));
        return Out.map("offsets", out);
    }

    static Map<String, Object> describeGroup(Admin admin, String group) throws Exception {
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
        List<Object> members = new ArrayList<>();
        for (MemberDescription m : d.members()) {
            members.add(Out.map("client_id", m.clientId(), "member_id_set", !m.consumerId().isEmpty(),
                    "host", m.host(), "assignment", Out.tps(m.assignment().topicPartitions())));
        }
        return Out.map("group_id", d.groupId(), "state", d.groupState().name(), "type", String.valueOf(d.type()),
                "simple", d.isSimpleConsumerGroup(), "assignor", d.partitionAssignor(), "members", members,
                "coordinator", d.coordinator() == null ? null : d.coordinator().id());
    }

    static List<Object> groupListings(Collection<GroupListing> gs, String prefix) {
        List<Object> out = new ArrayList<>();
        for (GroupListing g : gs) {
            if (!g.groupId().startsWith(prefix)) continue;
            out.add(Out.map("group_id", g.groupId(), "type", g.type().map(Object::toString).orElse(null),
                    "protocol", g.protocol(), "state", g.groupState().map(Enum::name).orElse(null),
                    "simple", g.isSimpleConsumerGroup()));
        }
        return out;
    }

    @SuppressWarnings({"deprecation", "removal"})
    static List<Object> consumerGroupListings(Collection<ConsumerGroupListing> gs, String prefix) {
        List<Object> out = new ArrayList<>();
        for (ConsumerGroupListing g : gs) {
            if (!g.groupId().startsWith(prefix)) continue;
            out.add(Out.map("group_id", g.groupId(), "state", g.groupState().map(Enum::name).orElse(null),
                    "type", g.type().map(Object::toString).orElse(null), "simple", g.isSimpleConsumerGroup()));
        }
        return out;
    }

    @SuppressWarnings({"deprecation", "removal"})
    static void plain(Admin admin, String bootstrap, String prefix) throws Exception {
        String a = prefix + "-a", b = prefix + "-b", c = prefix + "-c", group = prefix + "-g";
        TopicPartition a0 = new TopicPartition(a, 0), a1 = new TopicPartition(a, 1), a2 = new TopicPartition(a, 2);
        int[] nodeId = {-1};

        op("describe_cluster", () -> {
            DescribeClusterResult r = admin.describeCluster();
            List<Object> nodes = new ArrayList<>();
            for (Node n : r.nodes().get()) {
                nodes.add(Out.map("id", n.id(), "host", n.host(), "port", n.port()));
                nodeId[0] = n.id();
            }
            Node ctl = r.controller().get();
            return Out.map("cluster_id", r.clusterId().get(), "nodes", nodes,
                    "controller", ctl == null ? null : ctl.id());
        });

        CreateTopicsResult[] created = {null};
        op("create_topics", () -> {
            created[0] = admin.createTopics(List.of(
                    new NewTopic(a, 3, (short) 1).configs(Map.of("retention.ms", "86400000", "cleanup.policy", "delete")),
                    new NewTopic(b, 1, (short) 1)));
            created[0].all().get();
            return null;
        });
        // what CreateTopics v5+ answers beside the outcome: the topic's partitions, replication factor, id, configs
        op("create_topics_result_details", () -> {
            CreateTopicsResult r = created[0];
            Config cfg = r.config(a).get();
            return Out.map("partitions", List.of(r.numPartitions(a).get(), r.numPartitions(b).get()),
                    "replication", List.of(r.replicationFactor(a).get(), r.replicationFactor(b).get()),
                    "topic_id", String.valueOf(r.topicId(a).get()),
                    "configs", configs(cfg, List.of("retention.ms", "cleanup.policy")));
        });
        op("create_topics_exists", () -> {
            admin.createTopics(List.of(new NewTopic(a, 3, (short) 1))).all().get();
            return null;
        });
        op("create_topics_validate_only", () -> {
            admin.createTopics(List.of(new NewTopic(c, 2, (short) 1)), new CreateTopicsOptions().validateOnly(true)).all().get();
            return Out.map("listed_after", admin.listTopics().names().get().contains(c));
        });
        op("create_topics_invalid_name", () -> {
            admin.createTopics(List.of(new NewTopic(prefix + "-bad/name", 1, (short) 1))).all().get();
            return null;
        });
        op("create_topics_invalid_partitions", () -> {
            admin.createTopics(List.of(new NewTopic(prefix + "-zero", 0, (short) 1))).all().get();
            return null;
        });
        op("list_topics", () -> {
            List<String> names = new ArrayList<>();
            for (String n : admin.listTopics().names().get()) if (n.startsWith(prefix)) names.add(n);
            names.sort(null);
            return Out.map("names", names);
        });
        op("describe_topics", () -> describeTopic(admin, a));
        op("describe_topics_missing", () -> describeTopic(admin, prefix + "-missing"));

        op("create_partitions", () -> {
            admin.createPartitions(Map.of(a, NewPartitions.increaseTo(5))).all().get();
            long deadline = Out.now() + 10_000;
            Map<String, Object> d = describeTopic(admin, a);
            while (((List<?>) d.get("partitions")).size() != 5 && Out.now() < deadline) {
                Thread.sleep(100);
                d = describeTopic(admin, a);
            }
            return Out.map("described_partitions", ((List<?>) d.get("partitions")).size());
        });
        op("create_partitions_decrease", () -> {
            admin.createPartitions(Map.of(a, NewPartitions.increaseTo(2))).all().get();
            return null;
        });

        List<String> topicKeys = List.of("retention.ms", "cleanup.policy", "segment.bytes", "max.message.bytes",
                "compression.type", "message.timestamp.type");
        ConfigResource ra = new ConfigResource(ConfigResource.Type.TOPIC, a);
        op("describe_configs_topic", () -> {
            Config cfg = admin.describeConfigs(List.of(ra)).all().get().get(ra);
            List<String> names = new ArrayList<>();
            for (ConfigEntry e : cfg.entries()) names.add(e.name());
            names.sort(null);
            return Out.map("configs", configs(cfg, topicKeys), "names", names);
        });
        op("incremental_alter_configs", () -> {
            admin.incrementalAlterConfigs(Map.of(ra, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", ""), AlterConfigOp.OpType.DELETE)))).all().get();
            // Kafka applies the change through its metadata log: a describe right after may not see it yet
            long deadline = Out.now() + 10_000;
            Config cfg = admin.describeConfigs(List.of(ra)).all().get().get(ra);
            while (cfg.get("retention.ms") != null && !"3600000".equals(cfg.get("retention.ms").value())
                    && Out.now() < deadline) {
                Thread.sleep(100);
                cfg = admin.describeConfigs(List.of(ra)).all().get().get(ra);
            }
            return Out.map("configs", configs(cfg, topicKeys));
        });
        op("incremental_alter_configs_bad_value", () -> {
            admin.incrementalAlterConfigs(Map.of(ra, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "not-a-number"), AlterConfigOp.OpType.SET))))
                    .all().get();
            return null;
        });
        op("incremental_alter_configs_unknown_key", () -> {
            admin.incrementalAlterConfigs(Map.of(ra, List.of(
                    new AlterConfigOp(new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET)))).all().get();
            return null;
        });
        op("describe_configs_broker", () -> {
            ConfigResource rb = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(nodeId[0]));
            Config cfg = admin.describeConfigs(List.of(rb)).all().get().get(rb);
            return Out.map("configs", configs(cfg, List.of("log.segment.bytes", "message.max.bytes",
                    "log.retention.hours", "num.partitions", "auto.create.topics.enable")),
                    "count", cfg.entries().size());
        });

        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(Out.producerProps(bootstrap))) {
            long base = Out.now() - 10_000;  // record 6 has the largest timestamp (ListOffsets MAX_TIMESTAMP)
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>(a, 0, i == 6 ? base + 5_000 : base + i, null, Out.utf8("r" + i)));
            }
            producer.flush();
        }
        for (Map.Entry<String, OffsetSpec> spec : List.of(Map.entry("earliest", OffsetSpec.earliest()),
                Map.entry("latest", OffsetSpec.latest()), Map.entry("max_timestamp", OffsetSpec.maxTimestamp()))) {
            op("list_offsets_" + spec.getKey(), () -> {
                ListOffsetsResult.ListOffsetsResultInfo i = admin.listOffsets(Map.of(a0, spec.getValue())).partitionResult(a0).get();
                return Out.map("offset", i.offset());
            });
        }
        op("delete_records", () -> {
            long low = admin.deleteRecords(Map.of(a0, RecordsToDelete.beforeOffset(4))).lowWatermarks().get(a0).get().lowWatermark();
            return Out.map("low_watermark", low);
        });
        op("list_offsets_earliest_after_delete", () -> Out.map("offset",
                admin.listOffsets(Map.of(a0, OffsetSpec.earliest())).partitionResult(a0).get().offset()));
        op("delete_records_out_of_range", () -> {
            admin.deleteRecords(Map.of(a0, RecordsToDelete.beforeOffset(100))).all().get();
            return null;
        });

        // a live member of group PREFIX-g (classic protocol), then the same group once it has left
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(Out.consumerProps(bootstrap,
                "group.id", group, "client.id", "admin-ops-member", "enable.auto.commit", false,
                "auto.offset.reset", "earliest"))) {
            consumer.subscribe(List.of(a));
            long deadline = Out.now() + 20_000;
            while (consumer.assignment().isEmpty() && Out.now() < deadline) consumer.poll(Duration.ofMillis(100));
            consumer.commitSync(Map.of(a0, new OffsetAndMetadata(7, "seven"), a1, new OffsetAndMetadata(0)));
            op("list_groups_active", () -> Out.map("groups", groupListings(admin.listGroups().all().get(), prefix)));
            op("list_consumer_groups_active", () -> Out.map("groups",
                    consumerGroupListings(admin.listConsumerGroups().all().get(), prefix)));
            op("describe_consumer_groups_active", () -> describeGroup(admin, group));
            op("list_consumer_group_offsets", () -> groupOffsets(admin, group));
            op("alter_consumer_group_offsets_active", () -> {
                admin.alterConsumerGroupOffsets(group, Map.of(a0, new OffsetAndMetadata(1))).all().get();
                return null;
            });
        }
        op("list_groups_empty", () -> Out.map("groups", groupListings(admin.listGroups().all().get(), prefix)));
        op("describe_consumer_groups_empty", () -> describeGroup(admin, group));
        op("alter_consumer_group_offsets", () -> {
            admin.alterConsumerGroupOffsets(group, Map.of(a0, new OffsetAndMetadata(3, "three"),
                    a2, new OffsetAndMetadata(5))).all().get();
            return groupOffsets(admin, group);
        });
        op("delete_consumer_group_offsets", () -> {
            admin.deleteConsumerGroupOffsets(group, Set.of(a1)).all().get();
            return groupOffsets(admin, group);
        });
        op("delete_consumer_groups", () -> {
            admin.deleteConsumerGroups(List.of(group)).all().get();
            return Out.map("groups_after", groupListings(admin.listGroups().all().get(), prefix));
        });
        op("describe_consumer_groups_deleted", () -> describeGroup(admin, group));
        op("delete_consumer_groups_missing", () -> {
            admin.deleteConsumerGroups(List.of(prefix + "-no-such-group")).all().get();
            return null;
        });

        op("delete_topics", () -> {
            admin.deleteTopics(List.of(b)).all().get();
            long deadline = Out.now() + 10_000;
            boolean listed = true;
            while (listed && Out.now() < deadline) {
                listed = admin.listTopics().names().get().contains(b);
                if (listed) Thread.sleep(100);
            }
            return Out.map("listed_after", listed);
        });
        op("delete_topics_missing", () -> {
            admin.deleteTopics(List.of(prefix + "-missing")).all().get();
            return null;
        });

        String user = prefix + "-alice";
        op("describe_user_scram_credentials_all", () -> {
            List<String> users = new ArrayList<>();
            for (UserScramCredentialsDescription d : admin.describeUserScramCredentials().all().get().values()) {
                users.add(d.name());
            }
            return Out.map("has_user", users.contains(user));
        });
        op("alter_user_scram_credentials_upsert", () -> {
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(user,
                    new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "alice-secret"))).all().get();
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(user,
                    new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), "alice-secret"))).all().get();
            return Out.map("described", scram(admin, user, 2));
        });
        String other = prefix + "-carol";  // a user of its own: a broker that wrongly accepts this changes nothing else
        op("alter_user_scram_credentials_twice_in_one_request", () -> {
            admin.alterUserScramCredentials(List.of(
                    new UserScramCredentialUpsertion(other, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "x"),
                    new UserScramCredentialUpsertion(other, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), "x")))
                    .all().get();
            return null;
        });
        op("alter_user_scram_credentials_delete", () -> {
            admin.alterUserScramCredentials(List.of(new UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)))
                    .all().get();
            return Out.map("described", scram(admin, user, 1));
        });
        op("describe_user_scram_credentials_missing", () -> Out.map("described", scram(admin, prefix + "-nobody", 0)));

        op("describe_log_dirs", () -> {
            Map<Integer, Map<String, LogDirDescription>> dirs = admin.describeLogDirs(List.of(nodeId[0])).allDescriptions().get();
            Map<String, LogDirDescription> mine = dirs.get(nodeId[0]);
            long size = -1;
            int replicas = 0;
            for (LogDirDescription d : mine.values()) {
                for (Map.Entry<TopicPartition, ReplicaInfo> e : d.replicaInfos().entrySet()) {
                    replicas++;
                    if (e.getKey().equals(a0)) size = e.getValue().size();
                }
            }
            return Out.map("dirs", mine.size(), "replicas_seen", replicas > 0, "a0_size", size);
        });
        op("describe_acls_no_authorizer", () -> {
            admin.describeAcls(AclBindingFilter.ANY).values().get();
            return null;
        });
    }

    /** The user's credentials [mechanism, iterations], asked again for up to 10 s until there are ``expect`` of them
     * (Kafka applies credential changes through its metadata log: a describe right after may not see them yet). */
    static List<Object> scram(Admin admin, String user, int expect) throws Exception {
        long deadline = Out.now() + 10_000;
        List<Object> out = scramOnce(admin, user);
        while (out.size() != expect && Out.now() < deadline) {
            Thread.sleep(100);
            out = scramOnce(admin, user);
        }
        return out;
    }

    static List<Object> scramOnce(Admin admin, String user) throws Exception {
        UserScramCredentialsDescription d = admin.describeUserScramCredentials(List.of(user)).description(user).get();
        List<Object> out = new ArrayList<>();
        for (ScramCredentialInfo i : d.credentialInfos()) out.add(List.of(i.mechanism().mechanismName(), i.iterations()));
        out.sort((x, y) -> x.toString().compareTo(y.toString()));
        return out;
    }

    static List<Object> bindings(Collection<AclBinding> bs, String prefix) {
        List<Object> out = new ArrayList<>();
        for (AclBinding b : bs) {
            if (!b.pattern().name().startsWith(prefix) && !b.pattern().name().equals("kafka-cluster")) continue;
            out.add(List.of(b.pattern().resourceType().name(), b.pattern().name(), b.pattern().patternType().name(),
                    b.entry().principal(), b.entry().host(), b.entry().operation().name(),
                    b.entry().permissionType().name()));
        }
        out.sort((x, y) -> x.toString().compareTo(y.toString()));
        return out;
    }

    /** describeAcls(filter), asked again for up to 10 s until it lists ``expect`` of this run's bindings (Kafka's
     * authorizer applies ACL changes through its metadata log). */
    static List<Object> describeUntil(Admin admin, AclBindingFilter filter, String prefix, int expect) throws Exception {
        long deadline = Out.now() + 10_000;
        List<Object> out = bindings(admin.describeAcls(filter).values().get(), prefix);
        while (out.size() != expect && Out.now() < deadline) {
            Thread.sleep(100);
            out = bindings(admin.describeAcls(filter).values().get(), prefix);
        }
        return out;
    }

    static void acls(Admin admin, String prefix) throws Exception {
        String topic = prefix + "-t";
        List<AclBinding> wanted = List.of(
                new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                        new AccessControlEntry("User:bob", "*", AclOperation.READ, AclPermissionType.ALLOW)),
                new AclBinding(new ResourcePattern(ResourceType.GROUP, prefix + "-", PatternType.PREFIXED),
                        new AccessControlEntry("User:bob", "*", AclOperation.READ, AclPermissionType.ALLOW)),
                new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                        new AccessControlEntry("User:eve", "*", AclOperation.WRITE, AclPermissionType.DENY)),
                new AclBinding(new ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                        new AccessControlEntry("User:" + prefix + "-ops", "127.0.0.1", AclOperation.DESCRIBE_CONFIGS,
                                AclPermissionType.ALLOW)));
        op("create_acls", () -> {
            admin.createAcls(wanted).all().get();
            return null;
        });
        op("describe_acls_all", () -> Out.map("bindings", describeUntil(admin, AclBindingFilter.ANY, prefix, 4)));
        op("describe_acls_by_principal", () -> Out.map("bindings", bindings(admin.describeAcls(new AclBindingFilter(
                ResourcePatternFilter.ANY, new AccessControlEntryFilter("User:bob", null, AclOperation.ANY,
                AclPermissionType.ANY))).values().get(), prefix)));
        op("describe_acls_match_topic", () -> Out.map("bindings", bindings(admin.describeAcls(new AclBindingFilter(
                new ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.MATCH), AccessControlEntryFilter.ANY))
                .values().get(), prefix)));
        op("create_acls_invalid", () -> {
            admin.createAcls(List.of(new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                    new AccessControlEntry("bob-without-type", "*", AclOperation.READ, AclPermissionType.ALLOW)))).all().get();
            return null;
        });
        op("delete_acls", () -> {
            Collection<AclBinding> deleted = admin.deleteAcls(List.of(new AclBindingFilter(ResourcePatternFilter.ANY,
                    new AccessControlEntryFilter("User:eve", null, AclOperation.ANY, AclPermissionType.ANY)))).all().get();
            return Out.map("deleted", bindings(deleted, prefix),
                    "remaining", describeUntil(admin, AclBindingFilter.ANY, prefix, 3));
        });
        op("delete_acls_rest", () -> {
            List<AclBindingFilter> filters = new ArrayList<>();
            for (AclBinding b : wanted) filters.add(b.toFilter());
            Collection<AclBinding> deleted = admin.deleteAcls(filters).all().get();
            return Out.map("deleted", bindings(deleted, prefix),
                    "remaining", describeUntil(admin, AclBindingFilter.ANY, prefix, 0));
        });
    }
}
