"""Kafka message tables for the broker codec (one table per API, all versions in one table).

Follows Apache Kafka's message specs ``clients/src/main/resources/common/message/*.json`` (the copies kafka-python
bundles), cut down to the versions kafkalog speaks. Each message is a tuple of fields:

    (name, type, versions, opts)              a scalar, string, bytes, records or array of scalars ("[]int32")
    (name, type, versions, opts, fields)      an array of structs ("[]Topic") or a struct, with its own fields

``name`` is the JSON name in snake_case, ``versions`` / ``opts["nullable"]`` / ``opts["tagged"]`` use the JSON's
version notation ("3+", "0-12", "5"), ``opts["default"]`` is the JSON default (else 0 / "" / False / [] / None when
nullable), ``opts["tag"]`` marks a tagged field (decoded in responses when present, written only when not at its
default, as Kafka).
An API table: ``{"key", "name", "versions": (min, max) this codec speaks, "flexible": first flexible version or None,
"request", "response"}``. Extend a table (and its ``versions``) to speak more; the codec is generic.
"""

PRODUCE = {
    "key": 0, "name": "Produce", "versions": (3, 13), "flexible": 9,
    "request": (
        ("transactional_id", "string", "3+", {"nullable": "3+", "default": None}),
        ("acks", "int16", "0+", {}),
        ("timeout_ms", "int32", "0+", {}),
        ("topic_data", "[]TopicProduceData", "0+", {}, (
            ("name", "string", "0-12", {}),
            ("topic_id", "uuid", "13+", {}),  # KIP-516: topics by id from v13
            ("partition_data", "[]PartitionProduceData", "0+", {}, (
                ("index", "int32", "0+", {}),
                ("records", "records", "0+", {"nullable": "0+"}),
            )),
        )),
    ),
    "response": (
        ("responses", "[]TopicProduceResponse", "0+", {}, (
            ("name", "string", "0-12", {}),
            ("topic_id", "uuid", "13+", {}),
            ("partition_responses", "[]PartitionProduceResponse", "0+", {}, (
                ("index", "int32", "0+", {}),
                ("error_code", "int16", "0+", {}),
                ("base_offset", "int64", "0+", {}),
                ("log_append_time_ms", "int64", "2+", {"default": -1}),
                ("log_start_offset", "int64", "5+", {"default": -1}),
                # KIP-467: which records of an INVALID_RECORD batch made it be dropped
                ("record_errors", "[]BatchIndexAndErrorMessage", "8+", {}, (
                    ("batch_index", "int32", "8+", {}),
                    ("batch_index_error_message", "string", "8+", {"nullable": "8+", "default": None}),
                )),
                ("error_message", "string", "8+", {"nullable": "8+", "default": None}),
                # KIP-951: only with NOT_LEADER_OR_FOLLOWER, which a single node never answers
                ("current_leader", "LeaderIdAndEpoch", "10+", {"tag": 0, "tagged": "10+"}, (
                    ("leader_id", "int32", "10+", {"default": -1}),
                    ("leader_epoch", "int32", "10+", {"default": -1}),
                )),
            )),
        )),
        ("throttle_time_ms", "int32", "1+", {"default": 0}),
        ("node_endpoints", "[]NodeEndpoint", "10+", {"tag": 0, "tagged": "10+"}, (
            ("node_id", "int32", "10+", {}),
            ("host", "string", "10+", {}),
            ("port", "int32", "10+", {}),
            ("rack", "string", "10+", {"nullable": "10+", "default": None}),
        )),
    ),
}

FETCH = {
    "key": 1, "name": "Fetch", "versions": (4, 18), "flexible": 12,
    "request": (
        ("cluster_id", "string", "12+", {"tag": 0, "tagged": "12+", "nullable": "12+", "default": None}),
        ("replica_id", "int32", "0-14", {"default": -1}),
        # KIP-903: a follower's id and broker epoch (consumers leave it out: a tagged field)
        ("replica_state", "ReplicaState", "15+", {"tag": 1, "tagged": "15+"}, (
            ("replica_id", "int32", "15+", {"default": -1}),
            ("replica_epoch", "int64", "15+", {"default": -1}),
        )),
        ("max_wait_ms", "int32", "0+", {}),
        ("min_bytes", "int32", "0+", {}),
        ("max_bytes", "int32", "3+", {"default": 2147483647}),
        ("isolation_level", "int8", "4+", {"default": 0}),
        ("session_id", "int32", "7+", {"default": 0}),
        ("session_epoch", "int32", "7+", {"default": -1}),
        ("topics", "[]FetchTopic", "0+", {}, (
            ("topic", "string", "0-12", {}),
            ("topic_id", "uuid", "13+", {}),
            ("partitions", "[]FetchPartition", "0+", {}, (
                ("partition", "int32", "0+", {}),
                ("current_leader_epoch", "int32", "9+", {"default": -1}),
                ("fetch_offset", "int64", "0+", {}),
                ("last_fetched_epoch", "int32", "12+", {"default": -1}),
                ("log_start_offset", "int64", "5+", {"default": -1}),
                ("partition_max_bytes", "int32", "0+", {}),
                ("replica_directory_id", "uuid", "17+", {"tag": 0, "tagged": "17+"}),
                # KIP-1166: the high watermark a follower knows (a consumer leaves it out; one node has no follower)
                ("high_watermark", "int64", "18+", {"tag": 1, "tagged": "18+", "default": 9223372036854775807}),
            )),
        )),
        ("forgotten_topics_data", "[]ForgottenTopic", "7+", {}, (
            ("topic", "string", "7-12", {}),
            ("topic_id", "uuid", "13+", {}),
            ("partitions", "[]int32", "7+", {}),
        )),
        ("rack_id", "string", "11+", {"default": ""}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "1+", {}),
        ("error_code", "int16", "7+", {}),
        ("session_id", "int32", "7+", {"default": 0}),
        ("responses", "[]FetchableTopicResponse", "0+", {}, (
            ("topic", "string", "0-12", {}),
            ("topic_id", "uuid", "13+", {}),
            ("partitions", "[]PartitionData", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("error_code", "int16", "0+", {}),
                ("high_watermark", "int64", "0+", {}),
                ("last_stable_offset", "int64", "4+", {"default": -1}),
                ("log_start_offset", "int64", "5+", {"default": -1}),
                # tagged, written by Kafka only when set: a follower's divergence (KIP-595), the new leader after
                # NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH (KIP-951), a snapshot to fetch (KIP-630); one node
                # without followers or leader changes has none of them to say
                ("diverging_epoch", "EpochEndOffset", "12+", {"tag": 0, "tagged": "12+"}, (
                    ("epoch", "int32", "12+", {"default": -1}),
                    ("end_offset", "int64", "12+", {"default": -1}),
                )),
                ("current_leader", "LeaderIdAndEpoch", "12+", {"tag": 1, "tagged": "12+"}, (
                    ("leader_id", "int32", "12+", {"default": -1}),
                    ("leader_epoch", "int32", "12+", {"default": -1}),
                )),
                ("snapshot_id", "SnapshotId", "12+", {"tag": 2, "tagged": "12+"}, (
                    ("end_offset", "int64", "0+", {"default": -1}),
                    ("epoch", "int32", "0+", {"default": -1}),
                )),
                ("aborted_transactions", "[]AbortedTransaction", "4+", {"nullable": "4+"}, (
                    ("producer_id", "int64", "4+", {}),
                    ("first_offset", "int64", "4+", {}),
                )),
                ("preferred_read_replica", "int32", "11+", {"default": -1}),
                ("records", "records", "0+", {"nullable": "0+"}),
            )),
        )),
        ("node_endpoints", "[]NodeEndpoint", "16+", {"tag": 0, "tagged": "16+"}, (
            ("node_id", "int32", "16+", {}),
            ("host", "string", "16+", {}),
            ("port", "int32", "16+", {}),
            ("rack", "string", "16+", {"nullable": "16+", "default": None}),
        )),
    ),
}

LIST_OFFSETS = {
    "key": 2, "name": "ListOffsets", "versions": (1, 11), "flexible": 6,
    "request": (
        ("replica_id", "int32", "0+", {}),
        ("isolation_level", "int8", "2+", {}),
        ("topics", "[]ListOffsetsTopic", "0+", {}, (
            ("name", "string", "0+", {}),
            ("partitions", "[]ListOffsetsPartition", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("current_leader_epoch", "int32", "4+", {"default": -1}),
                ("timestamp", "int64", "0+", {}),
            )),
        )),
        ("timeout_ms", "int32", "10+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "2+", {}),
        ("topics", "[]ListOffsetsTopicResponse", "0+", {}, (
            ("name", "string", "0+", {}),
            ("partitions", "[]ListOffsetsPartitionResponse", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("error_code", "int16", "0+", {}),
                ("timestamp", "int64", "1+", {"default": -1}),
                ("offset", "int64", "1+", {"default": -1}),
                ("leader_epoch", "int32", "4+", {"default": -1}),
            )),
        )),
    ),
}

METADATA = {
    "key": 3, "name": "Metadata", "versions": (0, 13), "flexible": 9,
    "request": (
        ("topics", "[]MetadataRequestTopic", "0+", {'nullable': '1+'}, (
            ("topic_id", "uuid", "10+", {}),
            ("name", "string", "0+", {'nullable': '10+'}),
        )),
        ("allow_auto_topic_creation", "bool", "4+", {'default': True}),
        ("include_cluster_authorized_operations", "bool", "8-10", {}),
        ("include_topic_authorized_operations", "bool", "8+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "3+", {}),
        ("brokers", "[]MetadataResponseBroker", "0+", {}, (
            ("node_id", "int32", "0+", {}),
            ("host", "string", "0+", {}),
            ("port", "int32", "0+", {}),
            ("rack", "string", "1+", {'nullable': '1+', 'default': None}),
        )),
        ("cluster_id", "string", "2+", {'nullable': '2+', 'default': None}),
        ("controller_id", "int32", "1+", {'default': -1}),
        ("topics", "[]MetadataResponseTopic", "0+", {}, (
            ("error_code", "int16", "0+", {}),
            ("name", "string", "0+", {'nullable': '12+'}),
            ("topic_id", "uuid", "10+", {}),
            ("is_internal", "bool", "1+", {'default': False}),
            ("partitions", "[]MetadataResponsePartition", "0+", {}, (
                ("error_code", "int16", "0+", {}),
                ("partition_index", "int32", "0+", {}),
                ("leader_id", "int32", "0+", {}),
                ("leader_epoch", "int32", "7+", {'default': -1}),
                ("replica_nodes", "[]int32", "0+", {}),
                ("isr_nodes", "[]int32", "0+", {}),
                ("offline_replicas", "[]int32", "5+", {}),
            )),
            ("topic_authorized_operations", "int32", "8+", {'default': -2147483648}),
        )),
        ("cluster_authorized_operations", "int32", "8-10", {'default': -2147483648}),
        ("error_code", "int16", "13+", {}),
    ),
}

OFFSET_COMMIT = {
    "key": 8, "name": "OffsetCommit", "versions": (2, 10), "flexible": 8,
    "request": (
        ("group_id", "string", "0+", {}),
        ("generation_id_or_member_epoch", "int32", "1+", {"default": -1}),
        ("member_id", "string", "1+", {}),
        ("group_instance_id", "string", "7+", {"nullable": "7+", "default": None}),
        ("retention_time_ms", "int64", "2-4", {"default": -1}),
        ("topics", "[]OffsetCommitRequestTopic", "0+", {}, (
            ("name", "string", "0-9", {}),
            ("topic_id", "uuid", "10+", {}),
            ("partitions", "[]OffsetCommitRequestPartition", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("committed_offset", "int64", "0+", {}),
                ("committed_leader_epoch", "int32", "6+", {"default": -1}),
                ("committed_metadata", "string", "0+", {"nullable": "0+"}),
            )),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "3+", {}),
        ("topics", "[]OffsetCommitResponseTopic", "0+", {}, (
            ("name", "string", "0-9", {}),
            ("topic_id", "uuid", "10+", {}),
            ("partitions", "[]OffsetCommitResponsePartition", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("error_code", "int16", "0+", {}),
            )),
        )),
    ),
}

OFFSET_FOR_LEADER_EPOCH = {
    "key": 23, "name": "OffsetForLeaderEpoch", "versions": (2, 4), "flexible": 4,
    "request": (
        ("replica_id", "int32", "3+", {"default": -2}),
        ("topics", "[]OffsetForLeaderTopic", "0+", {}, (
            ("topic", "string", "0+", {}),
            ("partitions", "[]OffsetForLeaderPartition", "0+", {}, (
                ("partition", "int32", "0+", {}),
                ("current_leader_epoch", "int32", "2+", {"default": -1}),
                ("leader_epoch", "int32", "0+", {}),
            )),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "2+", {}),
        ("topics", "[]OffsetForLeaderTopicResult", "0+", {}, (
            ("topic", "string", "0+", {}),
            ("partitions", "[]EpochEndOffset", "0+", {}, (
                ("error_code", "int16", "0+", {}),
                ("partition", "int32", "0+", {}),
                ("leader_epoch", "int32", "1+", {"default": -1}),
                ("end_offset", "int64", "0+", {"default": -1}),
            )),
        )),
    ),
}

OFFSET_FETCH = {
    "key": 9, "name": "OffsetFetch", "versions": (1, 10), "flexible": 6,
    "request": (
        ("group_id", "string", "0-7", {}),
        ("topics", "[]OffsetFetchRequestTopic", "0-7", {"nullable": "2-7"}, (
            ("name", "string", "0-7", {}),
            ("partition_indexes", "[]int32", "0-7", {}),
        )),
        ("groups", "[]OffsetFetchRequestGroup", "8+", {}, (
            ("group_id", "string", "8+", {}),
            ("member_id", "string", "9+", {"nullable": "9+", "default": None}),
            ("member_epoch", "int32", "9+", {"default": -1}),
            ("topics", "[]OffsetFetchRequestTopics", "8+", {"nullable": "8+"}, (
                ("name", "string", "8-9", {}),
                ("topic_id", "uuid", "10+", {}),
                ("partition_indexes", "[]int32", "8+", {}),
            )),
        )),
        ("require_stable", "bool", "7+", {"default": False}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "3+", {}),
        ("topics", "[]OffsetFetchResponseTopic", "0-7", {}, (
            ("name", "string", "0-7", {}),
            ("partitions", "[]OffsetFetchResponsePartition", "0-7", {}, (
                ("partition_index", "int32", "0-7", {}),
                ("committed_offset", "int64", "0-7", {}),
                ("committed_leader_epoch", "int32", "5-7", {"default": -1}),
                ("metadata", "string", "0-7", {"nullable": "0-7"}),
                ("error_code", "int16", "0-7", {}),
            )),
        )),
        ("error_code", "int16", "2-7", {"default": 0}),
        ("groups", "[]OffsetFetchResponseGroup", "8+", {}, (
            ("group_id", "string", "8+", {}),
            ("topics", "[]OffsetFetchResponseTopics", "8+", {}, (
                ("name", "string", "8-9", {}),
                ("topic_id", "uuid", "10+", {}),
                ("partitions", "[]OffsetFetchResponsePartitions", "8+", {}, (
                    ("partition_index", "int32", "8+", {}),
                    ("committed_offset", "int64", "8+", {}),
                    ("committed_leader_epoch", "int32", "8+", {"default": -1}),
                    ("metadata", "string", "8+", {"nullable": "8+"}),
                    ("error_code", "int16", "8+", {}),
                )),
            )),
            ("error_code", "int16", "8+", {"default": 0}),
        )),
    ),
}

FIND_COORDINATOR = {
    "key": 10, "name": "FindCoordinator", "versions": (0, 6), "flexible": 3,
    "request": (
        ("key", "string", "0-3", {}),
        ("key_type", "int8", "1+", {"default": 0}),
        ("coordinator_keys", "[]string", "4+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "1+", {}),
        ("error_code", "int16", "0-3", {}),
        ("error_message", "string", "1-3", {"nullable": "1-3"}),
        ("node_id", "int32", "0-3", {}),
        ("host", "string", "0-3", {}),
        ("port", "int32", "0-3", {}),
        ("coordinators", "[]Coordinator", "4+", {}, (
            ("key", "string", "4+", {}),
            ("node_id", "int32", "4+", {}),
            ("host", "string", "4+", {}),
            ("port", "int32", "4+", {}),
            ("error_code", "int16", "4+", {}),
            ("error_message", "string", "4+", {"nullable": "4+"}),
        )),
    ),
}

JOIN_GROUP = {
    "key": 11, "name": "JoinGroup", "versions": (0, 9), "flexible": 6,
    "request": (
        ("group_id", "string", "0+", {}),
        ("session_timeout_ms", "int32", "0+", {}),
        ("rebalance_timeout_ms", "int32", "1+", {"default": -1}),
        ("member_id", "string", "0+", {}),
        ("group_instance_id", "string", "5+", {"nullable": "5+", "default": None}),
        ("protocol_type", "string", "0+", {}),
        ("protocols", "[]JoinGroupRequestProtocol", "0+", {}, (
            ("name", "string", "0+", {}),
            ("metadata", "bytes", "0+", {}),
        )),
        ("reason", "string", "8+", {"nullable": "8+", "default": None}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "2+", {}),
        ("error_code", "int16", "0+", {}),
        ("generation_id", "int32", "0+", {"default": -1}),
        ("protocol_type", "string", "7+", {"nullable": "7+", "default": None}),
        ("protocol_name", "string", "0+", {"nullable": "7+"}),
        ("leader", "string", "0+", {}),
        ("skip_assignment", "bool", "9+", {"default": False}),
        ("member_id", "string", "0+", {}),
        ("members", "[]JoinGroupResponseMember", "0+", {}, (
            ("member_id", "string", "0+", {}),
            ("group_instance_id", "string", "5+", {"nullable": "5+", "default": None}),
            ("metadata", "bytes", "0+", {}),
        )),
    ),
}

HEARTBEAT = {
    "key": 12, "name": "Heartbeat", "versions": (0, 4), "flexible": 4,
    "request": (
        ("group_id", "string", "0+", {}),
        ("generation_id", "int32", "0+", {}),
        ("member_id", "string", "0+", {}),
        ("group_instance_id", "string", "3+", {"nullable": "3+", "default": None}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "1+", {}),
        ("error_code", "int16", "0+", {}),
    ),
}

LEAVE_GROUP = {
    "key": 13, "name": "LeaveGroup", "versions": (0, 5), "flexible": 4,
    "request": (
        ("group_id", "string", "0+", {}),
        ("member_id", "string", "0-2", {}),
        ("members", "[]MemberIdentity", "3+", {}, (
            ("member_id", "string", "3+", {}),
            ("group_instance_id", "string", "3+", {"nullable": "3+", "default": None}),
            ("reason", "string", "5+", {"nullable": "5+", "default": None}),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "1+", {}),
        ("error_code", "int16", "0+", {}),
        ("members", "[]MemberResponse", "3+", {}, (
            ("member_id", "string", "3+", {}),
            ("group_instance_id", "string", "3+", {"nullable": "3+", "default": None}),
            ("error_code", "int16", "3+", {}),
        )),
    ),
}

SYNC_GROUP = {
    "key": 14, "name": "SyncGroup", "versions": (0, 5), "flexible": 4,
    "request": (
        ("group_id", "string", "0+", {}),
        ("generation_id", "int32", "0+", {}),
        ("member_id", "string", "0+", {}),
        ("group_instance_id", "string", "3+", {"nullable": "3+", "default": None}),
        ("protocol_type", "string", "5+", {"nullable": "5+", "default": None}),
        ("protocol_name", "string", "5+", {"nullable": "5+", "default": None}),
        ("assignments", "[]SyncGroupRequestAssignment", "0+", {}, (
            ("member_id", "string", "0+", {}),
            ("assignment", "bytes", "0+", {}),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "1+", {}),
        ("error_code", "int16", "0+", {}),
        ("protocol_type", "string", "5+", {"nullable": "5+", "default": None}),
        ("protocol_name", "string", "5+", {"nullable": "5+", "default": None}),
        ("assignment", "bytes", "0+", {}),
    ),
}

SASL_HANDSHAKE = {
    "key": 17, "name": "SaslHandshake", "versions": (0, 1), "flexible": None,
    "request": (
        ("mechanism", "string", "0+", {}),
    ),
    "response": (
        ("error_code", "int16", "0+", {}),
        ("mechanisms", "[]string", "0+", {}),
    ),
}

API_VERSIONS = {
    "key": 18, "name": "ApiVersions", "versions": (0, 5), "flexible": 3,
    "request": (
        ("client_software_name", "string", "3+", {}),
        ("client_software_version", "string", "3+", {}),
        ("cluster_id", "string", "5+", {"nullable": "5+", "default": None}),
        ("node_id", "int32", "5+", {"default": -1}),
    ),
    "response": (
        ("error_code", "int16", "0+", {}),
        ("api_keys", "[]ApiVersion", "0+", {}, (
            ("api_key", "int16", "0+", {}),
            ("min_version", "int16", "0+", {}),
            ("max_version", "int16", "0+", {}),
        )),
        ("throttle_time_ms", "int32", "1+", {}),
        ("supported_features", "[]SupportedFeatureKey", "3+", {"tag": 0, "tagged": "3+"}, (
            ("name", "string", "3+", {}),
            ("min_version", "int16", "3+", {}),
            ("max_version", "int16", "3+", {}),
        )),
        ("finalized_features_epoch", "int64", "3+", {"tag": 1, "tagged": "3+", "default": -1}),
        ("finalized_features", "[]FinalizedFeatureKey", "3+", {"tag": 2, "tagged": "3+"}, (
            ("name", "string", "3+", {}),
            ("max_version_level", "int16", "3+", {}),
            ("min_version_level", "int16", "3+", {}),
        )),
        ("zk_migration_ready", "bool", "3+", {"tag": 3, "tagged": "3+", "default": False}),
    ),
}

CREATE_TOPICS = {
    "key": 19, "name": "CreateTopics", "versions": (2, 7), "flexible": 5,
    "request": (
        ("topics", "[]CreatableTopic", "0+", {}, (
            ("name", "string", "0+", {}),
            ("num_partitions", "int32", "0+", {}),
            ("replication_factor", "int16", "0+", {}),
            ("assignments", "[]CreatableReplicaAssignment", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("broker_ids", "[]int32", "0+", {}),
            )),
            ("configs", "[]CreatableTopicConfig", "0+", {}, (
                ("name", "string", "0+", {}),
                ("value", "string", "0+", {'nullable': '0+'}),
            )),
        )),
        ("timeout_ms", "int32", "0+", {'default': 60000}),
        ("validate_only", "bool", "1+", {'default': False}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "2+", {}),
        ("topics", "[]CreatableTopicResult", "0+", {}, (
            ("name", "string", "0+", {}),
            ("topic_id", "uuid", "7+", {}),
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "1+", {'nullable': '0+'}),
            ("topic_config_error_code", "int16", "5+", {'tag': 0, 'tagged': '5+'}),
            ("num_partitions", "int32", "5+", {'default': -1}),
            ("replication_factor", "int16", "5+", {'default': -1}),
            ("configs", "[]CreatableTopicConfigs", "5+", {'nullable': '5+'}, (
                ("name", "string", "5+", {}),
                ("value", "string", "5+", {'nullable': '5+'}),
                ("read_only", "bool", "5+", {}),
                ("config_source", "int8", "5+", {'default': -1}),
                ("is_sensitive", "bool", "5+", {}),
            )),
        )),
    ),
}


DELETE_TOPICS = {
    "key": 20, "name": "DeleteTopics", "versions": (1, 6), "flexible": 4,
    "request": (
        ("topics", "[]DeleteTopicState", "6+", {}, (
            ("name", "string", "6+", {"nullable": "6+", "default": None}),
            ("topic_id", "uuid", "6+", {}),
        )),
        ("topic_names", "[]string", "0-5", {}),
        ("timeout_ms", "int32", "0+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "1+", {}),
        ("responses", "[]DeletableTopicResult", "0+", {}, (
            ("name", "string", "0+", {"nullable": "6+"}),
            ("topic_id", "uuid", "6+", {}),
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "5+", {"nullable": "5+", "default": None}),
        )),
    ),
}

DELETE_RECORDS = {
    "key": 21, "name": "DeleteRecords", "versions": (0, 2), "flexible": 2,
    "request": (
        ("topics", "[]DeleteRecordsTopic", "0+", {}, (
            ("name", "string", "0+", {}),
            ("partitions", "[]DeleteRecordsPartition", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("offset", "int64", "0+", {}),
            )),
        )),
        ("timeout_ms", "int32", "0+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("topics", "[]DeleteRecordsTopicResult", "0+", {}, (
            ("name", "string", "0+", {}),
            ("partitions", "[]DeleteRecordsPartitionResult", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("low_watermark", "int64", "0+", {}),
                ("error_code", "int16", "0+", {}),
            )),
        )),
    ),
}

INIT_PRODUCER_ID = {
    "key": 22, "name": "InitProducerId", "versions": (0, 5), "flexible": 2,
    "request": (
        ("transactional_id", "string", "0+", {"nullable": "0+"}),
        ("transaction_timeout_ms", "int32", "0+", {}),
        ("producer_id", "int64", "3+", {"default": -1}),
        ("producer_epoch", "int16", "3+", {"default": -1}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        ("producer_id", "int64", "0+", {"default": -1}),
        ("producer_epoch", "int16", "0+", {}),
    ),
}

# -- transactions (KIP-98, KIP-447, KIP-664): the client forms, before KIP-890 part 2 ---------------------------------

ADD_PARTITIONS_TO_TXN = {
    "key": 24, "name": "AddPartitionsToTxn", "versions": (0, 5), "flexible": 3,
    "request": (
        # v4+: the broker-to-coordinator form, several transactions at once (KIP-890)
        ("transactions", "[]AddPartitionsToTxnTransaction", "4+", {}, (
            ("transactional_id", "string", "4+", {}),
            ("producer_id", "int64", "4+", {}),
            ("producer_epoch", "int16", "4+", {}),
            ("verify_only", "bool", "4+", {"default": False}),
            ("topics", "[]AddPartitionsToTxnTopic", "4+", {}, (
                ("name", "string", "0+", {}),
                ("partitions", "[]int32", "0+", {}),
            )),
        )),
        ("v3_and_below_transactional_id", "string", "0-3", {}),
        ("v3_and_below_producer_id", "int64", "0-3", {}),
        ("v3_and_below_producer_epoch", "int16", "0-3", {}),
        ("v3_and_below_topics", "[]AddPartitionsToTxnTopic", "0-3", {}, (
            ("name", "string", "0+", {}),
            ("partitions", "[]int32", "0+", {}),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "4+", {}),
        ("results_by_transaction", "[]AddPartitionsToTxnResult", "4+", {}, (
            ("transactional_id", "string", "4+", {}),
            ("topic_results", "[]AddPartitionsToTxnTopicResult", "4+", {}, (
                ("name", "string", "0+", {}),
                ("results_by_partition", "[]AddPartitionsToTxnPartitionResult", "0+", {}, (
                    ("partition_index", "int32", "0+", {}),
                    ("partition_error_code", "int16", "0+", {}),
                )),
            )),
        )),
        ("results_by_topic_v3_and_below", "[]AddPartitionsToTxnTopicResult", "0-3", {}, (
            ("name", "string", "0+", {}),
            ("results_by_partition", "[]AddPartitionsToTxnPartitionResult", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("partition_error_code", "int16", "0+", {}),
            )),
        )),
    ),
}

ADD_OFFSETS_TO_TXN = {
    "key": 25, "name": "AddOffsetsToTxn", "versions": (0, 4), "flexible": 3,
    "request": (
        ("transactional_id", "string", "0+", {}),
        ("producer_id", "int64", "0+", {}),
        ("producer_epoch", "int16", "0+", {}),
        ("group_id", "string", "0+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
    ),
}

END_TXN = {
    "key": 26, "name": "EndTxn", "versions": (0, 5), "flexible": 3,
    "request": (
        ("transactional_id", "string", "0+", {}),
        ("producer_id", "int64", "0+", {}),
        ("producer_epoch", "int16", "0+", {}),
        ("committed", "bool", "0+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        # v5 (transactions v2, KIP-890 part 2): the producer id and epoch the producer goes on with
        ("producer_id", "int64", "5+", {"default": -1}),
        ("producer_epoch", "int16", "5+", {"default": -1}),
    ),
}

TXN_OFFSET_COMMIT = {
    "key": 28, "name": "TxnOffsetCommit", "versions": (0, 6), "flexible": 3,
    "request": (
        ("transactional_id", "string", "0+", {}),
        ("group_id", "string", "0+", {}),
        ("producer_id", "int64", "0+", {}),
        ("producer_epoch", "int16", "0+", {}),
        ("generation_id", "int32", "3+", {"default": -1}),
        ("member_id", "string", "3+", {"default": ""}),
        ("group_instance_id", "string", "3+", {"nullable": "3+", "default": None}),
        ("topics", "[]TxnOffsetCommitRequestTopic", "0+", {}, (
            ("name", "string", "0-5", {}),
            ("topic_id", "uuid", "6+", {}),  # KIP-1319: topics by id from v6
            ("partitions", "[]TxnOffsetCommitRequestPartition", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("committed_offset", "int64", "0+", {}),
                ("committed_leader_epoch", "int32", "2+", {"default": -1}),
                ("committed_metadata", "string", "0+", {"nullable": "0+"}),
            )),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("topics", "[]TxnOffsetCommitResponseTopic", "0+", {}, (
            ("name", "string", "0-5", {}),
            ("topic_id", "uuid", "6+", {}),
            ("partitions", "[]TxnOffsetCommitResponsePartition", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("error_code", "int16", "0+", {}),
            )),
        )),
    ),
}

DESCRIBE_PRODUCERS = {
    "key": 61, "name": "DescribeProducers", "versions": (0, 0), "flexible": 0,
    "request": (
        ("topics", "[]TopicRequest", "0+", {}, (
            ("name", "string", "0+", {}),
            ("partition_indexes", "[]int32", "0+", {}),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("topics", "[]TopicResponse", "0+", {}, (
            ("name", "string", "0+", {}),
            ("partitions", "[]PartitionResponse", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("error_code", "int16", "0+", {}),
                ("error_message", "string", "0+", {"nullable": "0+"}),
                ("active_producers", "[]ProducerState", "0+", {}, (
                    ("producer_id", "int64", "0+", {}),
                    ("producer_epoch", "int32", "0+", {}),
                    ("last_sequence", "int32", "0+", {"default": -1}),
                    ("last_timestamp", "int64", "0+", {"default": -1}),
                    ("coordinator_epoch", "int32", "0+", {}),
                    ("current_txn_start_offset", "int64", "0+", {"default": -1}),
                )),
            )),
        )),
    ),
}

DESCRIBE_TRANSACTIONS = {
    "key": 65, "name": "DescribeTransactions", "versions": (0, 0), "flexible": 0,
    "request": (
        ("transactional_ids", "[]string", "0+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("transaction_states", "[]TransactionState", "0+", {}, (
            ("error_code", "int16", "0+", {}),
            ("transactional_id", "string", "0+", {}),
            ("transaction_state", "string", "0+", {}),
            ("transaction_timeout_ms", "int32", "0+", {}),
            ("transaction_start_time_ms", "int64", "0+", {}),
            ("producer_id", "int64", "0+", {}),
            ("producer_epoch", "int16", "0+", {}),
            ("topics", "[]TopicData", "0+", {}, (
                ("topic", "string", "0+", {}),
                ("partitions", "[]int32", "0+", {}),
            )),
        )),
    ),
}

LIST_TRANSACTIONS = {
    "key": 66, "name": "ListTransactions", "versions": (0, 2), "flexible": 0,
    "request": (
        ("state_filters", "[]string", "0+", {}),
        ("producer_id_filters", "[]int64", "0+", {}),
        ("duration_filter", "int64", "1+", {"default": -1}),
        ("transactional_id_pattern", "string", "2+", {"nullable": "2+", "default": None}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        ("unknown_state_filters", "[]string", "0+", {}),
        ("transaction_states", "[]TransactionState", "0+", {}, (
            ("transactional_id", "string", "0+", {}),
            ("producer_id", "int64", "0+", {}),
            ("transaction_state", "string", "0+", {}),
        )),
    ),
}

WRITE_TXN_MARKERS = {
    "key": 27, "name": "WriteTxnMarkers", "versions": (1, 2), "flexible": 1,
    "request": (
        ("markers", "[]WritableTxnMarker", "0+", {}, (
            ("producer_id", "int64", "0+", {}),
            ("producer_epoch", "int16", "0+", {}),
            ("transaction_result", "bool", "0+", {}),
            ("topics", "[]WritableTxnMarkerTopic", "0+", {}, (
                ("name", "string", "0+", {}),
                ("partition_indexes", "[]int32", "0+", {}),
            )),
            ("coordinator_epoch", "int32", "0+", {}),
            ("transaction_version", "int8", "2+", {}),
        )),
    ),
    "response": (
        ("markers", "[]WritableTxnMarkerResult", "0+", {}, (
            ("producer_id", "int64", "0+", {}),
            ("topics", "[]WritableTxnMarkerTopicResult", "0+", {}, (
                ("name", "string", "0+", {}),
                ("partitions", "[]WritableTxnMarkerPartitionResult", "0+", {}, (
                    ("partition_index", "int32", "0+", {}),
                    ("error_code", "int16", "0+", {}),
                )),
            )),
        )),
    ),
}

SASL_AUTHENTICATE = {
    "key": 36, "name": "SaslAuthenticate", "versions": (0, 2), "flexible": 2,
    "request": (
        ("auth_bytes", "bytes", "0+", {}),
    ),
    "response": (
        ("error_code", "int16", "0+", {}),
        ("error_message", "string", "0+", {"nullable": "0+"}),
        ("auth_bytes", "bytes", "0+", {}),
        ("session_lifetime_ms", "int64", "1+", {"default": 0}),
    ),
}

DESCRIBE_CLIENT_QUOTAS = {
    "key": 48, "name": "DescribeClientQuotas", "versions": (0, 1), "flexible": 1,
    "request": (
        ("components", "[]ComponentData", "0+", {}, (
            ("entity_type", "string", "0+", {}),
            ("match_type", "int8", "0+", {}),
            ("match", "string", "0+", {"nullable": "0+"}),
        )),
        ("strict", "bool", "0+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        ("error_message", "string", "0+", {"nullable": "0+"}),
        ("entries", "[]EntryData", "0+", {"nullable": "0+"}, (
            ("entity", "[]EntityData", "0+", {}, (
                ("entity_type", "string", "0+", {}),
                ("entity_name", "string", "0+", {"nullable": "0+"}),
            )),
            ("values", "[]ValueData", "0+", {}, (
                ("key", "string", "0+", {}),
                ("value", "float64", "0+", {}),
            )),
        )),
    ),
}

ALTER_CLIENT_QUOTAS = {
    "key": 49, "name": "AlterClientQuotas", "versions": (0, 1), "flexible": 1,
    "request": (
        ("entries", "[]EntryData", "0+", {}, (
            ("entity", "[]EntityData", "0+", {}, (
                ("entity_type", "string", "0+", {}),
                ("entity_name", "string", "0+", {"nullable": "0+"}),
            )),
            ("ops", "[]OpData", "0+", {}, (
                ("key", "string", "0+", {}),
                ("value", "float64", "0+", {}),
                ("remove", "bool", "0+", {}),
            )),
        )),
        ("validate_only", "bool", "0+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("entries", "[]EntryData", "0+", {}, (
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "0+", {"nullable": "0+"}),
            ("entity", "[]EntityData", "0+", {}, (
                ("entity_type", "string", "0+", {}),
                ("entity_name", "string", "0+", {"nullable": "0+"}),
            )),
        )),
    ),
}

# KIP-848 consumer groups (kafkalog/broker/consumer_groups.py); flexible from v0, no tagged field in 4.4's JSON

CONSUMER_GROUP_HEARTBEAT = {
    "key": 68, "name": "ConsumerGroupHeartbeat", "versions": (0, 1), "flexible": 0,
    "request": (
        ("group_id", "string", "0+", {}),
        ("member_id", "string", "0+", {}),
        ("member_epoch", "int32", "0+", {}),
        ("instance_id", "string", "0+", {"nullable": "0+", "default": None}),
        ("rack_id", "string", "0+", {"nullable": "0+", "default": None}),
        ("rebalance_timeout_ms", "int32", "0+", {"default": -1}),
        ("subscribed_topic_names", "[]string", "0+", {"nullable": "0+", "default": None}),
        ("subscribed_topic_regex", "string", "1+", {"nullable": "1+", "default": None}),
        ("server_assignor", "string", "0+", {"nullable": "0+", "default": None}),
        ("topic_partitions", "[]TopicPartitions", "0+", {"nullable": "0+", "default": None}, (
            ("topic_id", "uuid", "0+", {}),
            ("partitions", "[]int32", "0+", {}),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        ("error_message", "string", "0+", {"nullable": "0+", "default": None}),
        ("member_id", "string", "0+", {"nullable": "0+", "default": None}),
        ("member_epoch", "int32", "0+", {}),
        ("heartbeat_interval_ms", "int32", "0+", {}),
        ("assignment", "Assignment", "0+", {"nullable": "0+", "default": None}, (
            ("topic_partitions", "[]TopicPartitions", "0+", {}, (
                ("topic_id", "uuid", "0+", {}),
                ("partitions", "[]int32", "0+", {}),
            )),
        )),
    ),
}

_DESCRIBED_ASSIGNMENT = (
    ("topic_partitions", "[]TopicPartitions", "0+", {}, (
        ("topic_id", "uuid", "0+", {}),
        ("topic_name", "string", "0+", {}),
        ("partitions", "[]int32", "0+", {}),
    )),
)

CONSUMER_GROUP_DESCRIBE = {
    "key": 69, "name": "ConsumerGroupDescribe", "versions": (0, 1), "flexible": 0,
    "request": (
        ("group_ids", "[]string", "0+", {}),
        ("include_authorized_operations", "bool", "0+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("groups", "[]DescribedGroup", "0+", {}, (
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "0+", {"nullable": "0+", "default": None}),
            ("group_id", "string", "0+", {}),
            ("group_state", "string", "0+", {}),
            ("group_epoch", "int32", "0+", {}),
            ("assignment_epoch", "int32", "0+", {}),
            ("assignor_name", "string", "0+", {}),
            ("members", "[]Member", "0+", {}, (
                ("member_id", "string", "0+", {}),
                ("instance_id", "string", "0+", {"nullable": "0+", "default": None}),
                ("rack_id", "string", "0+", {"nullable": "0+", "default": None}),
                ("member_epoch", "int32", "0+", {}),
                ("client_id", "string", "0+", {}),
                ("client_host", "string", "0+", {}),
                ("subscribed_topic_names", "[]string", "0+", {}),
                ("subscribed_topic_regex", "string", "0+", {"nullable": "0+", "default": None}),
                ("assignment", "Assignment", "0+", {}, _DESCRIBED_ASSIGNMENT),
                ("target_assignment", "Assignment", "0+", {}, _DESCRIBED_ASSIGNMENT),
                ("member_type", "int8", "1+", {"default": -1}),
            )),
            ("authorized_operations", "int32", "0+", {"default": -2147483648}),
        )),
    ),
}

# KIP-932 share groups (kafkalog/broker/share_groups.py); flexible from v0, 4.4 accepts only the GA versions (v1+)

_SHARE_TOPIC_PARTITIONS = (
    ("topic_id", "uuid", "0+", {}),
    ("partitions", "[]int32", "0+", {}),
)

SHARE_GROUP_HEARTBEAT = {
    "key": 76, "name": "ShareGroupHeartbeat", "versions": (1, 1), "flexible": 0,
    "request": (
        ("group_id", "string", "0+", {}),
        ("member_id", "string", "0+", {}),
        ("member_epoch", "int32", "0+", {}),
        ("rack_id", "string", "0+", {"nullable": "0+", "default": None}),
        ("subscribed_topic_names", "[]string", "0+", {"nullable": "0+", "default": None}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        ("error_message", "string", "0+", {"nullable": "0+", "default": None}),
        ("member_id", "string", "0+", {"nullable": "0+", "default": None}),
        ("member_epoch", "int32", "0+", {}),
        ("heartbeat_interval_ms", "int32", "0+", {}),
        ("assignment", "Assignment", "0+", {"nullable": "0+", "default": None}, (
            ("topic_partitions", "[]TopicPartitions", "0+", {}, _SHARE_TOPIC_PARTITIONS),
        )),
    ),
}

SHARE_GROUP_DESCRIBE = {
    "key": 77, "name": "ShareGroupDescribe", "versions": (1, 1), "flexible": 0,
    "request": (
        ("group_ids", "[]string", "0+", {}),
        ("include_authorized_operations", "bool", "0+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("groups", "[]DescribedGroup", "0+", {}, (
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "0+", {"nullable": "0+", "default": None}),
            ("group_id", "string", "0+", {}),
            ("group_state", "string", "0+", {}),
            ("group_epoch", "int32", "0+", {}),
            ("assignment_epoch", "int32", "0+", {}),
            ("assignor_name", "string", "0+", {}),
            ("members", "[]Member", "0+", {}, (
                ("member_id", "string", "0+", {}),
                ("rack_id", "string", "0+", {"nullable": "0+", "default": None}),
                ("member_epoch", "int32", "0+", {}),
                ("client_id", "string", "0+", {}),
                ("client_host", "string", "0+", {}),
                ("subscribed_topic_names", "[]string", "0+", {}),
                ("assignment", "Assignment", "0+", {}, _DESCRIBED_ASSIGNMENT),
            )),
            ("authorized_operations", "int32", "0+", {"default": -2147483648}),
        )),
    ),
}

_ACK_BATCHES = ("acknowledgement_batches", "[]AcknowledgementBatch", "0+", {}, (
    ("first_offset", "int64", "0+", {}),
    ("last_offset", "int64", "0+", {}),
    ("acknowledge_types", "[]int8", "0+", {}),
))

_LEADER = ("current_leader", "LeaderIdAndEpoch", "0+", {}, (
    ("leader_id", "int32", "0+", {}),
    ("leader_epoch", "int32", "0+", {}),
))

_NODE_ENDPOINTS = ("node_endpoints", "[]NodeEndpoint", "0+", {}, (
    ("node_id", "int32", "0+", {}),
    ("host", "string", "0+", {}),
    ("port", "int32", "0+", {}),
    ("rack", "string", "0+", {"nullable": "0+", "default": None}),
))

SHARE_FETCH = {
    "key": 78, "name": "ShareFetch", "versions": (1, 2), "flexible": 0,
    "request": (
        ("group_id", "string", "0+", {"nullable": "0+", "default": None}),
        ("member_id", "string", "0+", {"nullable": "0+"}),
        ("share_session_epoch", "int32", "0+", {}),
        ("max_wait_ms", "int32", "0+", {}),
        ("min_bytes", "int32", "0+", {}),
        ("max_bytes", "int32", "0+", {"default": 2147483647}),
        ("max_records", "int32", "1+", {}),
        ("batch_size", "int32", "1+", {}),
        ("share_acquire_mode", "int8", "2+", {"default": 0}),  # KIP-1206: 0 batch_optimized, 1 record_limit
        ("is_renew_ack", "bool", "2+", {"default": False}),  # KIP-1222
        ("topics", "[]FetchTopic", "0+", {}, (
            ("topic_id", "uuid", "0+", {}),
            ("partitions", "[]FetchPartition", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                _ACK_BATCHES,
            )),
        )),
        ("forgotten_topics_data", "[]ForgottenTopic", "0+", {}, _SHARE_TOPIC_PARTITIONS),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        ("error_message", "string", "0+", {"nullable": "0+", "default": None}),
        ("acquisition_lock_timeout_ms", "int32", "1+", {}),
        ("responses", "[]ShareFetchableTopicResponse", "0+", {}, (
            ("topic_id", "uuid", "0+", {}),
            ("partitions", "[]PartitionData", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("error_code", "int16", "0+", {}),
                ("error_message", "string", "0+", {"nullable": "0+", "default": None}),
                ("acknowledge_error_code", "int16", "0+", {}),
                ("acknowledge_error_message", "string", "0+", {"nullable": "0+", "default": None}),
                _LEADER,
                ("records", "records", "0+", {"nullable": "0"}),
                ("acquired_records", "[]AcquiredRecords", "0+", {}, (
                    ("first_offset", "int64", "0+", {}),
                    ("last_offset", "int64", "0+", {}),
                    ("delivery_count", "int16", "0+", {}),
                )),
            )),
        )),
        _NODE_ENDPOINTS,
    ),
}

SHARE_ACKNOWLEDGE = {
    "key": 79, "name": "ShareAcknowledge", "versions": (1, 2), "flexible": 0,
    "request": (
        ("group_id", "string", "0+", {"nullable": "0+", "default": None}),
        ("member_id", "string", "0+", {"nullable": "0+"}),
        ("share_session_epoch", "int32", "0+", {}),
        ("is_renew_ack", "bool", "2+", {"default": False}),
        ("topics", "[]AcknowledgeTopic", "0+", {}, (
            ("topic_id", "uuid", "0+", {}),
            ("partitions", "[]AcknowledgePartition", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                _ACK_BATCHES,
            )),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        ("error_message", "string", "0+", {"nullable": "0+", "default": None}),
        ("acquisition_lock_timeout_ms", "int32", "2+", {}),
        ("responses", "[]ShareAcknowledgeTopicResponse", "0+", {}, (
            ("topic_id", "uuid", "0+", {}),
            ("partitions", "[]PartitionData", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("error_code", "int16", "0+", {}),
                ("error_message", "string", "0+", {"nullable": "0+", "default": None}),
                _LEADER,
            )),
        )),
        _NODE_ENDPOINTS,
    ),
}

DESCRIBE_SHARE_GROUP_OFFSETS = {
    "key": 90, "name": "DescribeShareGroupOffsets", "versions": (0, 1), "flexible": 0,
    "request": (
        ("groups", "[]DescribeShareGroupOffsetsRequestGroup", "0+", {}, (
            ("group_id", "string", "0+", {}),
            ("topics", "[]DescribeShareGroupOffsetsRequestTopic", "0+", {"nullable": "0+", "default": None}, (
                ("topic_name", "string", "0+", {}),
                ("partitions", "[]int32", "0+", {}),
            )),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("groups", "[]DescribeShareGroupOffsetsResponseGroup", "0+", {}, (
            ("group_id", "string", "0+", {}),
            ("topics", "[]DescribeShareGroupOffsetsResponseTopic", "0+", {}, (
                ("topic_name", "string", "0+", {}),
                ("topic_id", "uuid", "0+", {}),
                ("partitions", "[]DescribeShareGroupOffsetsResponsePartition", "0+", {}, (
                    ("partition_index", "int32", "0+", {}),
                    ("start_offset", "int64", "0+", {}),
                    ("leader_epoch", "int32", "0+", {}),
                    ("lag", "int64", "1+", {"default": -1}),  # KIP-1226
                    ("error_code", "int16", "0+", {}),
                    ("error_message", "string", "0+", {"nullable": "0+", "default": None}),
                )),
            )),
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "0+", {"nullable": "0+", "default": None}),
        )),
    ),
}

ALTER_SHARE_GROUP_OFFSETS = {
    "key": 91, "name": "AlterShareGroupOffsets", "versions": (0, 0), "flexible": 0,
    "request": (
        ("group_id", "string", "0+", {}),
        ("topics", "[]AlterShareGroupOffsetsRequestTopic", "0+", {}, (
            ("topic_name", "string", "0+", {}),
            ("partitions", "[]AlterShareGroupOffsetsRequestPartition", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("start_offset", "int64", "0+", {}),
            )),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        ("error_message", "string", "0+", {"nullable": "0+", "default": None}),
        ("responses", "[]AlterShareGroupOffsetsResponseTopic", "0+", {}, (
            ("topic_name", "string", "0+", {}),
            ("topic_id", "uuid", "0+", {}),
            ("partitions", "[]AlterShareGroupOffsetsResponsePartition", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("error_code", "int16", "0+", {}),
                ("error_message", "string", "0+", {"nullable": "0+", "default": None}),
            )),
        )),
    ),
}

DELETE_SHARE_GROUP_OFFSETS = {
    "key": 92, "name": "DeleteShareGroupOffsets", "versions": (0, 0), "flexible": 0,
    "request": (
        ("group_id", "string", "0+", {}),
        ("topics", "[]DeleteShareGroupOffsetsRequestTopic", "0+", {}, (
            ("topic_name", "string", "0+", {}),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        ("error_message", "string", "0+", {"nullable": "0+", "default": None}),
        ("responses", "[]DeleteShareGroupOffsetsResponseTopic", "0+", {}, (
            ("topic_name", "string", "0+", {}),
            ("topic_id", "uuid", "0+", {}),
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "0+", {"nullable": "0+", "default": None}),
        )),
    ),
}

# Admin APIs (kafkalog/broker/admin.py), from Kafka's message specs; flexible versions included

LIST_GROUPS = {
    "key": 16, "name": "ListGroups", "versions": (0, 5), "flexible": 3,
    "request": (
        ("states_filter", "[]string", "4+", {}),
        ("types_filter", "[]string", "5+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "1+", {}),
        ("error_code", "int16", "0+", {}),
        ("groups", "[]ListedGroup", "0+", {}, (
            ("group_id", "string", "0+", {}),
            ("protocol_type", "string", "0+", {}),
            ("group_state", "string", "4+", {}),
            ("group_type", "string", "5+", {}),
        )),
    ),
}

DESCRIBE_GROUPS = {
    "key": 15, "name": "DescribeGroups", "versions": (0, 6), "flexible": 5,
    "request": (
        ("groups", "[]string", "0+", {}),
        ("include_authorized_operations", "bool", "3+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "1+", {}),
        ("groups", "[]DescribedGroup", "0+", {}, (
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "6+", {'nullable': '6+', 'default': None}),
            ("group_id", "string", "0+", {}),
            ("group_state", "string", "0+", {}),
            ("protocol_type", "string", "0+", {}),
            ("protocol_data", "string", "0+", {}),
            ("members", "[]DescribedGroupMember", "0+", {}, (
                ("member_id", "string", "0+", {}),
                ("group_instance_id", "string", "4+", {'nullable': '4+', 'default': None}),
                ("client_id", "string", "0+", {}),
                ("client_host", "string", "0+", {}),
                ("member_metadata", "bytes", "0+", {}),
                ("member_assignment", "bytes", "0+", {}),
            )),
            ("authorized_operations", "int32", "3+", {'default': -2147483648}),
        )),
    ),
}

DELETE_GROUPS = {
    "key": 42, "name": "DeleteGroups", "versions": (0, 3), "flexible": 2,
    "request": (
        ("groups_names", "[]string", "0+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("results", "[]DeletableGroupResult", "0+", {}, (
            ("group_id", "string", "0+", {}),
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "3+", {"nullable": "3+", "default": None}),
        )),
    ),
}

OFFSET_DELETE = {
    "key": 47, "name": "OffsetDelete", "versions": (0, 0), "flexible": None,
    "request": (
        ("group_id", "string", "0+", {}),
        ("topics", "[]OffsetDeleteRequestTopic", "0+", {}, (
            ("name", "string", "0+", {}),
            ("partitions", "[]OffsetDeleteRequestPartition", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
            )),
        )),
    ),
    "response": (
        ("error_code", "int16", "0+", {}),
        ("throttle_time_ms", "int32", "0+", {}),
        ("topics", "[]OffsetDeleteResponseTopic", "0+", {}, (
            ("name", "string", "0+", {}),
            ("partitions", "[]OffsetDeleteResponsePartition", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("error_code", "int16", "0+", {}),
            )),
        )),
    ),
}

DESCRIBE_CONFIGS = {
    "key": 32, "name": "DescribeConfigs", "versions": (1, 4), "flexible": 4,
    "request": (
        ("resources", "[]DescribeConfigsResource", "0+", {}, (
            ("resource_type", "int8", "0+", {}),
            ("resource_name", "string", "0+", {}),
            ("configuration_keys", "[]string", "0+", {'nullable': '0+'}),
        )),
        ("include_synonyms", "bool", "1+", {'default': False}),
        ("include_documentation", "bool", "3+", {'default': False}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("results", "[]DescribeConfigsResult", "0+", {}, (
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "0+", {'nullable': '0+'}),
            ("resource_type", "int8", "0+", {}),
            ("resource_name", "string", "0+", {}),
            ("configs", "[]DescribeConfigsResourceResult", "0+", {}, (
                ("name", "string", "0+", {}),
                ("value", "string", "0+", {'nullable': '0+'}),
                ("read_only", "bool", "0+", {}),
                ("is_default", "bool", "0", {}),
                ("config_source", "int8", "1+", {'default': -1}),
                ("is_sensitive", "bool", "0+", {}),
                ("synonyms", "[]DescribeConfigsSynonym", "1+", {}, (
                    ("name", "string", "1+", {}),
                    ("value", "string", "1+", {'nullable': '0+'}),
                    ("source", "int8", "1+", {}),
                )),
                ("config_type", "int8", "3+", {'default': 0}),
                ("documentation", "string", "3+", {'nullable': '0+'}),
            )),
        )),
    ),
}

ALTER_CONFIGS = {
    "key": 33, "name": "AlterConfigs", "versions": (0, 2), "flexible": 2,
    "request": (
        ("resources", "[]AlterConfigsResource", "0+", {}, (
            ("resource_type", "int8", "0+", {}),
            ("resource_name", "string", "0+", {}),
            ("configs", "[]AlterableConfig", "0+", {}, (
                ("name", "string", "0+", {}),
                ("value", "string", "0+", {'nullable': '0+'}),
            )),
        )),
        ("validate_only", "bool", "0+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("responses", "[]AlterConfigsResourceResponse", "0+", {}, (
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "0+", {'nullable': '0+'}),
            ("resource_type", "int8", "0+", {}),
            ("resource_name", "string", "0+", {}),
        )),
    ),
}

INCREMENTAL_ALTER_CONFIGS = {
    "key": 44, "name": "IncrementalAlterConfigs", "versions": (0, 1), "flexible": 1,
    "request": (
        ("resources", "[]AlterConfigsResource", "0+", {}, (
            ("resource_type", "int8", "0+", {}),
            ("resource_name", "string", "0+", {}),
            ("configs", "[]AlterableConfig", "0+", {}, (
                ("name", "string", "0+", {}),
                ("config_operation", "int8", "0+", {}),
                ("value", "string", "0+", {'nullable': '0+'}),
            )),
        )),
        ("validate_only", "bool", "0+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("responses", "[]AlterConfigsResourceResponse", "0+", {}, (
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "0+", {'nullable': '0+'}),
            ("resource_type", "int8", "0+", {}),
            ("resource_name", "string", "0+", {}),
        )),
    ),
}

CREATE_PARTITIONS = {
    "key": 37, "name": "CreatePartitions", "versions": (0, 3), "flexible": 2,
    "request": (
        ("topics", "[]CreatePartitionsTopic", "0+", {}, (
            ("name", "string", "0+", {}),
            ("count", "int32", "0+", {}),
            ("assignments", "[]CreatePartitionsAssignment", "0+", {'nullable': '0+'}, (
                ("broker_ids", "[]int32", "0+", {}),
            )),
        )),
        ("timeout_ms", "int32", "0+", {}),
        ("validate_only", "bool", "0+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("results", "[]CreatePartitionsTopicResult", "0+", {}, (
            ("name", "string", "0+", {}),
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "0+", {'nullable': '0+', 'default': None}),
        )),
    ),
}

ELECT_LEADERS = {
    "key": 43, "name": "ElectLeaders", "versions": (0, 2), "flexible": 2,
    "request": (
        ("election_type", "int8", "1+", {}),
        ("topic_partitions", "[]TopicPartitions", "0+", {"nullable": "0+"}, (
            ("topic", "string", "0+", {}),
            ("partitions", "[]int32", "0+", {}),
        )),
        ("timeout_ms", "int32", "0+", {"default": 60000}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "1+", {}),
        ("replica_election_results", "[]ReplicaElectionResult", "0+", {}, (
            ("topic", "string", "0+", {}),
            ("partition_result", "[]PartitionResult", "0+", {}, (
                ("partition_id", "int32", "0+", {}),
                ("error_code", "int16", "0+", {}),
                ("error_message", "string", "0+", {"nullable": "0+"}),
            )),
        )),
    ),
}

ALTER_PARTITION_REASSIGNMENTS = {
    "key": 45, "name": "AlterPartitionReassignments", "versions": (0, 1), "flexible": 0,
    "request": (
        ("timeout_ms", "int32", "0+", {"default": 60000}),
        ("allow_replication_factor_change", "bool", "1+", {"default": True}),
        ("topics", "[]ReassignableTopic", "0+", {}, (
            ("name", "string", "0+", {}),
            ("partitions", "[]ReassignablePartition", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("replicas", "[]int32", "0+", {"nullable": "0+", "default": None}),
            )),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("allow_replication_factor_change", "bool", "1+", {"default": True}),
        ("error_code", "int16", "0+", {}),
        ("error_message", "string", "0+", {"nullable": "0+"}),
        ("responses", "[]ReassignableTopicResponse", "0+", {}, (
            ("name", "string", "0+", {}),
            ("partitions", "[]ReassignablePartitionResponse", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("error_code", "int16", "0+", {}),
                ("error_message", "string", "0+", {"nullable": "0+"}),
            )),
        )),
    ),
}

LIST_PARTITION_REASSIGNMENTS = {
    "key": 46, "name": "ListPartitionReassignments", "versions": (0, 0), "flexible": 0,
    "request": (
        ("timeout_ms", "int32", "0+", {"default": 60000}),
        ("topics", "[]ListPartitionReassignmentsTopics", "0+", {"nullable": "0+", "default": None}, (
            ("name", "string", "0+", {}),
            ("partition_indexes", "[]int32", "0+", {}),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        ("error_message", "string", "0+", {"nullable": "0+"}),
        ("topics", "[]OngoingTopicReassignment", "0+", {}, (
            ("name", "string", "0+", {}),
            ("partitions", "[]OngoingPartitionReassignment", "0+", {}, (
                ("partition_index", "int32", "0+", {}),
                ("replicas", "[]int32", "0+", {}),
                ("adding_replicas", "[]int32", "0+", {}),
                ("removing_replicas", "[]int32", "0+", {}),
            )),
        )),
    ),
}

UPDATE_FEATURES = {
    "key": 57, "name": "UpdateFeatures", "versions": (0, 2), "flexible": 0,
    "request": (
        ("timeout_ms", "int32", "0+", {"default": 60000}),
        ("feature_updates", "[]FeatureUpdateKey", "0+", {}, (
            ("feature", "string", "0+", {}),
            ("max_version_level", "int16", "0+", {}),
            ("allow_downgrade", "bool", "0-0", {"default": False}),
            ("upgrade_type", "int8", "1+", {"default": 1}),
        )),
        ("validate_only", "bool", "1+", {"default": False}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        ("error_message", "string", "0+", {"nullable": "0+"}),
        ("results", "[]UpdatableFeatureResult", "0-1", {}, (
            ("feature", "string", "0+", {}),
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "0+", {"nullable": "0+"}),
        )),
    ),
}

DESCRIBE_CLUSTER = {
    "key": 60, "name": "DescribeCluster", "versions": (0, 2), "flexible": 0,
    "request": (
        ("include_cluster_authorized_operations", "bool", "0+", {}),
        ("endpoint_type", "int8", "1+", {'default': 1}),
        ("include_fenced_brokers", "bool", "2+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        ("error_message", "string", "0+", {'nullable': '0+', 'default': None}),
        ("endpoint_type", "int8", "1+", {'default': 1}),
        ("cluster_id", "string", "0+", {}),
        ("controller_id", "int32", "0+", {'default': -1}),
        ("brokers", "[]DescribeClusterBroker", "0+", {}, (
            ("broker_id", "int32", "0+", {}),
            ("host", "string", "0+", {}),
            ("port", "int32", "0+", {}),
            ("rack", "string", "0+", {'nullable': '0+', 'default': None}),
            ("is_fenced", "bool", "2+", {}),
        )),
        ("cluster_authorized_operations", "int32", "0+", {'default': -2147483648}),
    ),
}

DESCRIBE_ACLS = {
    "key": 29, "name": "DescribeAcls", "versions": (1, 3), "flexible": 2,
    "request": (
        ("resource_type_filter", "int8", "0+", {}),
        ("resource_name_filter", "string", "0+", {'nullable': '0+'}),
        ("pattern_type_filter", "int8", "1+", {'default': 3}),
        ("principal_filter", "string", "0+", {'nullable': '0+'}),
        ("host_filter", "string", "0+", {'nullable': '0+'}),
        ("operation", "int8", "0+", {}),
        ("permission_type", "int8", "0+", {}),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        ("error_message", "string", "0+", {'nullable': '0+'}),
        ("resources", "[]DescribeAclsResource", "0+", {}, (
            ("resource_type", "int8", "0+", {}),
            ("resource_name", "string", "0+", {}),
            ("pattern_type", "int8", "1+", {'default': 3}),
            ("acls", "[]AclDescription", "0+", {}, (
                ("principal", "string", "0+", {}),
                ("host", "string", "0+", {}),
                ("operation", "int8", "0+", {}),
                ("permission_type", "int8", "0+", {}),
            )),
        )),
    ),
}

CREATE_ACLS = {
    "key": 30, "name": "CreateAcls", "versions": (1, 3), "flexible": 2,
    "request": (
        ("creations", "[]AclCreation", "0+", {}, (
            ("resource_type", "int8", "0+", {}),
            ("resource_name", "string", "0+", {}),
            ("resource_pattern_type", "int8", "1+", {'default': 3}),
            ("principal", "string", "0+", {}),
            ("host", "string", "0+", {}),
            ("operation", "int8", "0+", {}),
            ("permission_type", "int8", "0+", {}),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("results", "[]AclCreationResult", "0+", {}, (
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "0+", {'nullable': '0+'}),
        )),
    ),
}

DELETE_ACLS = {
    "key": 31, "name": "DeleteAcls", "versions": (1, 3), "flexible": 2,
    "request": (
        ("filters", "[]DeleteAclsFilter", "0+", {}, (
            ("resource_type_filter", "int8", "0+", {}),
            ("resource_name_filter", "string", "0+", {'nullable': '0+'}),
            ("pattern_type_filter", "int8", "1+", {'default': 3}),
            ("principal_filter", "string", "0+", {'nullable': '0+'}),
            ("host_filter", "string", "0+", {'nullable': '0+'}),
            ("operation", "int8", "0+", {}),
            ("permission_type", "int8", "0+", {}),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("filter_results", "[]DeleteAclsFilterResult", "0+", {}, (
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "0+", {'nullable': '0+'}),
            ("matching_acls", "[]DeleteAclsMatchingAcl", "0+", {}, (
                ("error_code", "int16", "0+", {}),
                ("error_message", "string", "0+", {'nullable': '0+'}),
                ("resource_type", "int8", "0+", {}),
                ("resource_name", "string", "0+", {}),
                ("pattern_type", "int8", "1+", {'default': 3}),
                ("principal", "string", "0+", {}),
                ("host", "string", "0+", {}),
                ("operation", "int8", "0+", {}),
                ("permission_type", "int8", "0+", {}),
            )),
        )),
    ),
}

DESCRIBE_LOG_DIRS = {
    "key": 35, "name": "DescribeLogDirs", "versions": (1, 5), "flexible": 2,
    "request": (
        ("topics", "[]DescribableLogDirTopic", "0+", {'nullable': '0+'}, (
            ("topic", "string", "0+", {}),
            ("partitions", "[]int32", "0+", {}),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "3+", {}),
        ("results", "[]DescribeLogDirsResult", "0+", {}, (
            ("error_code", "int16", "0+", {}),
            ("log_dir", "string", "0+", {}),
            ("topics", "[]DescribeLogDirsTopic", "0+", {}, (
                ("name", "string", "0+", {}),
                ("partitions", "[]DescribeLogDirsPartition", "0+", {}, (
                    ("partition_index", "int32", "0+", {}),
                    ("partition_size", "int64", "0+", {}),
                    ("offset_lag", "int64", "0+", {}),
                    ("is_future_key", "bool", "0+", {}),
                )),
            )),
            ("total_bytes", "int64", "4+", {'default': -1}),
            ("usable_bytes", "int64", "4+", {'default': -1}),
            ("is_cordoned", "bool", "5+", {}),
        )),
    ),
}

DESCRIBE_TOPIC_PARTITIONS = {
    "key": 75, "name": "DescribeTopicPartitions", "versions": (0, 0), "flexible": 0,
    "request": (
        ("topics", "[]TopicRequest", "0+", {}, (
            ("name", "string", "0+", {}),
        )),
        ("response_partition_limit", "int32", "0+", {'default': 2000}),
        ("cursor", "Cursor", "0+", {'nullable': '0+', 'default': None}, (
            ("topic_name", "string", "0+", {}),
            ("partition_index", "int32", "0+", {}),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("topics", "[]DescribeTopicPartitionsResponseTopic", "0+", {}, (
            ("error_code", "int16", "0+", {}),
            ("name", "string", "0+", {'nullable': '0+'}),
            ("topic_id", "uuid", "0+", {}),
            ("is_internal", "bool", "0+", {'default': False}),
            ("partitions", "[]DescribeTopicPartitionsResponsePartition", "0+", {}, (
                ("error_code", "int16", "0+", {}),
                ("partition_index", "int32", "0+", {}),
                ("leader_id", "int32", "0+", {}),
                ("leader_epoch", "int32", "0+", {'default': -1}),
                ("replica_nodes", "[]int32", "0+", {}),
                ("isr_nodes", "[]int32", "0+", {}),
                ("eligible_leader_replicas", "[]int32", "0+", {'nullable': '0+', 'default': None}),
                ("last_known_elr", "[]int32", "0+", {'nullable': '0+', 'default': None}),
                ("offline_replicas", "[]int32", "0+", {}),
            )),
            ("topic_authorized_operations", "int32", "0+", {'default': -2147483648}),
        )),
        ("next_cursor", "Cursor", "0+", {'nullable': '0+', 'default': None}, (
            ("topic_name", "string", "0+", {}),
            ("partition_index", "int32", "0+", {}),
        )),
    ),
}

DESCRIBE_USER_SCRAM_CREDENTIALS = {
    "key": 50, "name": "DescribeUserScramCredentials", "versions": (0, 0), "flexible": 0,
    "request": (
        ("users", "[]UserName", "0+", {'nullable': '0+'}, (
            ("name", "string", "0+", {}),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("error_code", "int16", "0+", {}),
        ("error_message", "string", "0+", {'nullable': '0+'}),
        ("results", "[]DescribeUserScramCredentialsResult", "0+", {}, (
            ("user", "string", "0+", {}),
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "0+", {'nullable': '0+'}),
            ("credential_infos", "[]CredentialInfo", "0+", {}, (
                ("mechanism", "int8", "0+", {}),
                ("iterations", "int32", "0+", {}),
            )),
        )),
    ),
}

ALTER_USER_SCRAM_CREDENTIALS = {
    "key": 51, "name": "AlterUserScramCredentials", "versions": (0, 0), "flexible": 0,
    "request": (
        ("deletions", "[]ScramCredentialDeletion", "0+", {}, (
            ("name", "string", "0+", {}),
            ("mechanism", "int8", "0+", {}),
        )),
        ("upsertions", "[]ScramCredentialUpsertion", "0+", {}, (
            ("name", "string", "0+", {}),
            ("mechanism", "int8", "0+", {}),
            ("iterations", "int32", "0+", {}),
            ("salt", "bytes", "0+", {}),
            ("salted_password", "bytes", "0+", {}),
        )),
    ),
    "response": (
        ("throttle_time_ms", "int32", "0+", {}),
        ("results", "[]AlterUserScramCredentialsResult", "0+", {}, (
            ("user", "string", "0+", {}),
            ("error_code", "int16", "0+", {}),
            ("error_message", "string", "0+", {'nullable': '0+'}),
        )),
    ),
}

# ConsumerProtocolSubscription (versions 0-3): opaque bytes in JoinGroup protocol metadata / SyncGroup assignments
CONSUMER_PROTOCOL_SUBSCRIPTION = (
    ("topics", "[]string", "0+", {}),
    ("user_data", "bytes", "0+", {"nullable": "0+", "default": None}),
    ("owned_partitions", "[]TopicPartition", "1+", {}, (
        ("topic", "string", "1+", {}),
        ("partitions", "[]int32", "1+", {}),
    )),
    ("generation_id", "int32", "2+", {"default": -1}),
    ("rack_id", "string", "3+", {"nullable": "3+", "default": None}),
)

# ConsumerProtocolAssignment (versions 0-3): opaque bytes in JoinGroup protocol metadata / SyncGroup assignments
CONSUMER_PROTOCOL_ASSIGNMENT = (
    ("assigned_partitions", "[]TopicPartition", "0+", {}, (
        ("topic", "string", "0+", {}),
        ("partitions", "[]int32", "0+", {}),
    )),
    ("user_data", "bytes", "0+", {"nullable": "0+", "default": None}),
)

APIS = {
    0: PRODUCE,
    1: FETCH,
    2: LIST_OFFSETS,
    3: METADATA,
    8: OFFSET_COMMIT,
    9: OFFSET_FETCH,
    10: FIND_COORDINATOR,
    11: JOIN_GROUP,
    12: HEARTBEAT,
    13: LEAVE_GROUP,
    14: SYNC_GROUP,
    17: SASL_HANDSHAKE,
    18: API_VERSIONS,
    19: CREATE_TOPICS,
    20: DELETE_TOPICS,
    21: DELETE_RECORDS,
    22: INIT_PRODUCER_ID,
    23: OFFSET_FOR_LEADER_EPOCH,
    24: ADD_PARTITIONS_TO_TXN,
    25: ADD_OFFSETS_TO_TXN,
    26: END_TXN,
    27: WRITE_TXN_MARKERS,
    28: TXN_OFFSET_COMMIT,
    61: DESCRIBE_PRODUCERS,
    65: DESCRIBE_TRANSACTIONS,
    66: LIST_TRANSACTIONS,
    36: SASL_AUTHENTICATE,
    48: DESCRIBE_CLIENT_QUOTAS,
    49: ALTER_CLIENT_QUOTAS,
    15: DESCRIBE_GROUPS,
    16: LIST_GROUPS,
    29: DESCRIBE_ACLS,
    30: CREATE_ACLS,
    31: DELETE_ACLS,
    32: DESCRIBE_CONFIGS,
    33: ALTER_CONFIGS,
    35: DESCRIBE_LOG_DIRS,
    37: CREATE_PARTITIONS,
    42: DELETE_GROUPS,
    44: INCREMENTAL_ALTER_CONFIGS,
    47: OFFSET_DELETE,
    50: DESCRIBE_USER_SCRAM_CREDENTIALS,
    51: ALTER_USER_SCRAM_CREDENTIALS,
    43: ELECT_LEADERS,
    45: ALTER_PARTITION_REASSIGNMENTS,
    46: LIST_PARTITION_REASSIGNMENTS,
    57: UPDATE_FEATURES,
    60: DESCRIBE_CLUSTER,
    75: DESCRIBE_TOPIC_PARTITIONS,
    68: CONSUMER_GROUP_HEARTBEAT,
    69: CONSUMER_GROUP_DESCRIBE,
    76: SHARE_GROUP_HEARTBEAT,
    77: SHARE_GROUP_DESCRIBE,
    78: SHARE_FETCH,
    79: SHARE_ACKNOWLEDGE,
    90: DESCRIBE_SHARE_GROUP_OFFSETS,
    91: ALTER_SHARE_GROUP_OFFSETS,
    92: DELETE_SHARE_GROUP_OFFSETS,
}
