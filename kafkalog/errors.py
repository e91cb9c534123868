"""kafkalog's one error hierarchy: one class per Kafka error code.

Each class carries Kafka's ``code``, ``name`` and ``retriable`` as class attributes, so a broker can answer with the
code and a client can decide to retry. A registry maps codes to classes and refuses duplicates; ``for_code(n)``
returns the class for a wire code. Builtins are mixed in where Python callers expect them (``InvalidConfigError`` is
a ``ValueError``, ``KafkaStorageError`` an ``OSError``). Errors without a wire code (engine-internal invariants)
derive from ``KafkaError`` with ``code = -1`` and are not registered.
"""

from __future__ import annotations

_REGISTRY: dict[int, type[KafkaError]] = {}


class KafkaError(Exception):
    """Base of every kafkalog error."""

    code: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False

    def __init_subclass__(cls, register: bool = True, **kwargs):
        super().__init_subclass__(**kwargs)
        if not register:
            return
        if "code" not in cls.__dict__:
            raise TypeError(f"{cls.__name__} must declare its Kafka error code")
        if cls.code in _REGISTRY:
            raise TypeError(f"Kafka error code {cls.code} is already taken by {_REGISTRY[cls.code].__name__}")
        _REGISTRY[cls.code] = cls


def for_code(code: int) -> type[KafkaError]:
    """The class registered for a Kafka error code (``UnknownServerError`` for codes kafkalog does not know)."""
    return _REGISTRY.get(code, UnknownServerError)


def _define(class_name, code, name, retriable=False, bases=()):
    cls = type(class_name, (KafkaError, *bases), {"code": code, "name": name, "retriable": retriable,
                                                   "__doc__": f"Kafka error {code} {name}.", "__module__": __name__})
    return cls


UnknownServerError = _define("UnknownServerError", -1, "UNKNOWN_SERVER_ERROR")
OffsetOutOfRangeError = _define("OffsetOutOfRangeError", 1, "OFFSET_OUT_OF_RANGE", bases=(IndexError,))
CorruptRecordError = _define("CorruptRecordError", 2, "CORRUPT_MESSAGE", retriable=True, bases=(ValueError,))
UnknownTopicOrPartitionError = _define("UnknownTopicOrPartitionError", 3, "UNKNOWN_TOPIC_OR_PARTITION",
                                       retriable=True, bases=(LookupError,))
InvalidFetchSizeError = _define("InvalidFetchSizeError", 4, "INVALID_FETCH_SIZE", bases=(ValueError,))
RequestTimedOutError = _define("RequestTimedOutError", 7, "REQUEST_TIMED_OUT", retriable=True,
                               bases=(TimeoutError,))
RecordTooLargeError = _define("RecordTooLargeError", 10, "MESSAGE_TOO_LARGE", bases=(ValueError,))
OffsetMetadataTooLargeError = _define("OffsetMetadataTooLargeError", 12, "OFFSET_METADATA_TOO_LARGE",
                                      bases=(ValueError,))
IllegalGenerationError = _define("IllegalGenerationError", 22, "ILLEGAL_GENERATION")
InconsistentGroupProtocolError = _define("InconsistentGroupProtocolError", 23, "INCONSISTENT_GROUP_PROTOCOL")
InvalidGroupIdError = _define("InvalidGroupIdError", 24, "INVALID_GROUP_ID", bases=(ValueError,))
UnknownMemberIdError = _define("UnknownMemberIdError", 25, "UNKNOWN_MEMBER_ID")
InvalidSessionTimeoutError = _define("InvalidSessionTimeoutError", 26, "INVALID_SESSION_TIMEOUT", bases=(ValueError,))
RebalanceInProgressError = _define("RebalanceInProgressError", 27, "REBALANCE_IN_PROGRESS")
InvalidTopicError = _define("InvalidTopicError", 17, "INVALID_TOPIC_EXCEPTION", bases=(ValueError,))
RecordBatchTooLargeError = _define("RecordBatchTooLargeError", 18, "RECORD_LIST_TOO_LARGE", bases=(ValueError,))
InvalidTimestampError = _define("InvalidTimestampError", 32, "INVALID_TIMESTAMP", bases=(ValueError,))
UnsupportedVersionError = _define("UnsupportedVersionError", 35, "UNSUPPORTED_VERSION")
TopicAlreadyExistsError = _define("TopicAlreadyExistsError", 36, "TOPIC_ALREADY_EXISTS", bases=(FileExistsError,))
InvalidPartitionsError = _define("InvalidPartitionsError", 37, "INVALID_PARTITIONS", bases=(ValueError,))
InvalidReplicationFactorError = _define("InvalidReplicationFactorError", 38, "INVALID_REPLICATION_FACTOR",
                                        bases=(ValueError,))
InvalidReplicaAssignmentError = _define("InvalidReplicaAssignmentError", 39, "INVALID_REPLICA_ASSIGNMENT",
                                        bases=(ValueError,))
InvalidConfigError = _define("InvalidConfigError", 40, "INVALID_CONFIG", bases=(ValueError,))
InvalidRequestError = _define("InvalidRequestError", 42, "INVALID_REQUEST", bases=(ValueError,))
PolicyViolationError = _define("PolicyViolationError", 44, "POLICY_VIOLATION")
KafkaStorageError = _define("KafkaStorageError", 56, "KAFKA_STORAGE_ERROR", retriable=True, bases=(OSError,))
UnsupportedCompressionTypeError = _define("UnsupportedCompressionTypeError", 76, "UNSUPPORTED_COMPRESSION_TYPE",
                                          bases=(ValueError,))
InvalidRecordError = _define("InvalidRecordError", 87, "INVALID_RECORD", bases=(ValueError,))


NonEmptyGroupError = _define("NonEmptyGroupError", 68, "NON_EMPTY_GROUP")
GroupIdNotFoundError = _define("GroupIdNotFoundError", 69, "GROUP_ID_NOT_FOUND", bases=(LookupError,))
SecurityDisabledError = _define("SecurityDisabledError", 54, "SECURITY_DISABLED")
GroupSubscribedToTopicError = _define("GroupSubscribedToTopicError", 86, "GROUP_SUBSCRIBED_TO_TOPIC")
ResourceNotFoundError = _define("ResourceNotFoundError", 91, "RESOURCE_NOT_FOUND", bases=(LookupError,))
DuplicateResourceError = _define("DuplicateResourceError", 92, "DUPLICATE_RESOURCE")
UnacceptableCredentialError = _define("UnacceptableCredentialError", 93, "UNACCEPTABLE_CREDENTIAL",
                                      bases=(ValueError,))
TransactionalIdAuthorizationFailedError = _define("TransactionalIdAuthorizationFailedError", 53,
                                                  "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
MismatchedEndpointTypeError = _define("MismatchedEndpointTypeError", 114, "MISMATCHED_ENDPOINT_TYPE")
UnknownTopicIdError = _define("UnknownTopicIdError", 100, "UNKNOWN_TOPIC_ID", retriable=True,
                              bases=(LookupError,))
TopicDeletionDisabledError = _define("TopicDeletionDisabledError", 73, "TOPIC_DELETION_DISABLED")
# OffsetForLeaderEpoch's check of the client's current leader epoch (KIP-320)
FencedLeaderEpochError = _define("FencedLeaderEpochError", 74, "FENCED_LEADER_EPOCH", retriable=True)
UnknownLeaderEpochError = _define("UnknownLeaderEpochError", 75, "UNKNOWN_LEADER_EPOCH", retriable=True)
# KIP-848 consumer groups (ConsumerGroupHeartbeat, OffsetCommit v9+)
GroupMaxSizeReachedError = _define("GroupMaxSizeReachedError", 81, "GROUP_MAX_SIZE_REACHED")
FencedMemberEpochError = _define("FencedMemberEpochError", 110, "FENCED_MEMBER_EPOCH")
UnreleasedInstanceIdError = _define("UnreleasedInstanceIdError", 111, "UNRELEASED_INSTANCE_ID")
UnsupportedAssignorError = _define("UnsupportedAssignorError", 112, "UNSUPPORTED_ASSIGNOR")
StaleMemberEpochError = _define("StaleMemberEpochError", 113, "STALE_MEMBER_EPOCH")
InvalidRegularExpressionError = _define("InvalidRegularExpressionError", 128, "INVALID_REGULAR_EXPRESSION",
                                        bases=(ValueError,))
InvalidRecordStateError = _define("InvalidRecordStateError", 121, "INVALID_RECORD_STATE", bases=(ValueError,))
InvalidRecordStateError.__doc__ = ("Kafka error 121 INVALID_RECORD_STATE (share groups, KIP-932): an ack or nack of a "
                                   "message a DurableQueue does not hold (already acked or nacked, or got by another "
                                   "queue object).")

ShareSessionNotFoundError = _define("ShareSessionNotFoundError", 122, "SHARE_SESSION_NOT_FOUND", retriable=True)
InvalidShareSessionEpochError = _define("InvalidShareSessionEpochError", 123, "INVALID_SHARE_SESSION_EPOCH",
                                        retriable=True)
ShareSessionLimitReachedError = _define("ShareSessionLimitReachedError", 133, "SHARE_SESSION_LIMIT_REACHED",
                                        retriable=True)

class CommitFailedError(KafkaError, register=False):
    """A commit this consumer may no longer make: it left the group, was evicted (missed heartbeats or
    max_poll_interval_ms), or a rebalance gave the partition to another member (kafka-python's CommitFailedError)."""


class NoOffsetForPartitionError(KafkaError, LookupError, register=False):
    """No committed offset (or one out of range) and ``auto_offset_reset='none'``: the app must seek first."""


class IllegalStateError(KafkaError, register=False):
    """A call that contradicts the client's state: subscribe() after assign(), seek() on an unassigned
    partition, a call on a closed consumer, a transactional producer's send() outside a transaction or
    commit_transaction() before begin_transaction() (kafka-python's IllegalStateError)."""


class TransactionAbortedError(KafkaError, register=False):
    """The future of a record still buffered when its transaction was aborted: it was never written (Java's
    TransactionAbortedException)."""


class InvalidOffsetError(KafkaError, ValueError, register=False):
    """An index append out of order, or a relative offset that does not fit (Kafka's InvalidOffsetException)."""


class IndexFullError(KafkaError, register=False):
    """An append to an index that has no free slot; the segment must roll first."""


class CorruptIndexError(KafkaError, ValueError, register=False):
    """An offset or time index whose entries or length contradict its invariants (Kafka's CorruptIndexException).

    Raised by ``sanity_check()``; an index holds no data of its own, so the loader's answer is to rebuild it from
    the segment's ``.log``.
    """


class LogClosedError(KafkaError, register=False):
    """The log or store was closed (or went offline after a storage error); no more calls are accepted."""


class LockTimeoutError(KafkaError, TimeoutError, register=False):
    """Another process holds a lock this call needs (exclusive writer open, or a stuck appender)."""


class EngineNotBuiltError(ImportError):
    """kafkalog's compiled engine is missing: install with ``pip install .`` (there is no pure-Python fallback)."""


# broker facade (wire protocol): codes a Kafka broker answers with
NetworkError = _define("NetworkError", 13, "NETWORK_EXCEPTION", retriable=True)
CoordinatorLoadInProgressError = _define("CoordinatorLoadInProgressError", 14, "COORDINATOR_LOAD_IN_PROGRESS",
                                         retriable=True)
CoordinatorNotAvailableError = _define("CoordinatorNotAvailableError", 15, "COORDINATOR_NOT_AVAILABLE", retriable=True)
NotCoordinatorError = _define("NotCoordinatorError", 16, "NOT_COORDINATOR", retriable=True)
TopicAuthorizationFailedError = _define("TopicAuthorizationFailedError", 29, "TOPIC_AUTHORIZATION_FAILED",
                                        bases=(PermissionError,))
GroupAuthorizationFailedError = _define("GroupAuthorizationFailedError", 30, "GROUP_AUTHORIZATION_FAILED",
                                        bases=(PermissionError,))
ClusterAuthorizationFailedError = _define("ClusterAuthorizationFailedError", 31, "CLUSTER_AUTHORIZATION_FAILED",
                                          bases=(PermissionError,))
UnsupportedSaslMechanismError = _define("UnsupportedSaslMechanismError", 33, "UNSUPPORTED_SASL_MECHANISM")
IllegalSaslStateError = _define("IllegalSaslStateError", 34, "ILLEGAL_SASL_STATE")
OutOfOrderSequenceNumberError = _define("OutOfOrderSequenceNumberError", 45, "OUT_OF_ORDER_SEQUENCE_NUMBER")
DuplicateSequenceNumberError = _define("DuplicateSequenceNumberError", 46, "DUPLICATE_SEQUENCE_NUMBER")
InvalidProducerEpochError = _define("InvalidProducerEpochError", 47, "INVALID_PRODUCER_EPOCH")
SaslAuthenticationFailedError = _define("SaslAuthenticationFailedError", 58, "SASL_AUTHENTICATION_FAILED",
                                        bases=(PermissionError,))
UnknownProducerIdError = _define("UnknownProducerIdError", 59, "UNKNOWN_PRODUCER_ID")
FetchSessionIdNotFoundError = _define("FetchSessionIdNotFoundError", 70, "FETCH_SESSION_ID_NOT_FOUND", retriable=True)
InvalidFetchSessionEpochError = _define("InvalidFetchSessionEpochError", 71, "INVALID_FETCH_SESSION_EPOCH",
                                        retriable=True)
InconsistentTopicIdError = _define("InconsistentTopicIdError", 103, "INCONSISTENT_TOPIC_ID", retriable=True)
FetchSessionTopicIdError = _define("FetchSessionTopicIdError", 106, "FETCH_SESSION_TOPIC_ID_ERROR", retriable=True)
MemberIdRequiredError = _define("MemberIdRequiredError", 79, "MEMBER_ID_REQUIRED")
FencedInstanceIdError = _define("FencedInstanceIdError", 82, "FENCED_INSTANCE_ID")

# transactions (KIP-98, KIP-447, KIP-890)
InvalidTxnStateError = _define("InvalidTxnStateError", 48, "INVALID_TXN_STATE")
InvalidProducerIdMappingError = _define("InvalidProducerIdMappingError", 49, "INVALID_PRODUCER_ID_MAPPING")
InvalidTransactionTimeoutError = _define("InvalidTransactionTimeoutError", 50, "INVALID_TRANSACTION_TIMEOUT",
                                         bases=(ValueError,))
ConcurrentTransactionsError = _define("ConcurrentTransactionsError", 51, "CONCURRENT_TRANSACTIONS", retriable=True)
TransactionCoordinatorFencedError = _define("TransactionCoordinatorFencedError", 52,
                                            "TRANSACTION_COORDINATOR_FENCED")
OperationNotAttemptedError = _define("OperationNotAttemptedError", 55, "OPERATION_NOT_ATTEMPTED")
UnstableOffsetCommitError = _define("UnstableOffsetCommitError", 88, "UNSTABLE_OFFSET_COMMIT", retriable=True)
ProducerFencedError = _define("ProducerFencedError", 90, "PRODUCER_FENCED")
TransactionalIdNotFoundError = _define("TransactionalIdNotFoundError", 105, "TRANSACTIONAL_ID_NOT_FOUND",
                                       bases=(LookupError,))
TransactionAbortableError = _define("TransactionAbortableError", 120, "TRANSACTION_ABORTABLE")


def storage_error(exc: OSError, operation: str, path) -> KafkaStorageError:
    """Wrap an OSError so it names the operation and the path (OSError never leaves storage/ raw)."""
    err = KafkaStorageError(exc.errno, f"{operation} failed on {path}: {exc.strerror or exc}")
    err.filename = str(path)
    return err
