"""kafkalog: an in-process, Kafka-compatible log engine for Python.

    >>> import kafkalog
    >>> with kafkalog.LogStore("data") as store:
    ...     store.create_topic("events", partitions=1)
    ...     log = store.log("events", 0)
    ...     log.append(b"hello", timestamp=1_700_000_000_000)
"""

from . import _engine  # noqa: F401  (fails loudly when the compiled engine is missing)
from .config import Config
from .errors import KafkaError
from .storage import Log, LogStore, OffsetStore
from .structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, RecordMetadata, TopicPartition

__version__ = "0.1.0"

# loaded when first asked for, so `kafkalog serve` and scripts that only use the store start faster
_LAZY = {
    "ConfigResource": "client.admin", "ConfigResourceType": "client.admin", "KafkaAdminClient": "client.admin",
    "NewTopic": "client.admin", "ConsumerRebalanceListener": "client.consumer", "KafkaConsumer": "client.consumer",
    "FutureRecordMetadata": "client.producer", "KafkaProducer": "client.producer", "DurableQueue": "client.queue",
    "Broker": "broker",
}


def __getattr__(name):
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'kafkalog' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{where}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["Broker", "Config", "ConfigResource", "ConfigResourceType", "ConsumerRebalanceListener", "ConsumerRecord",
           "DurableQueue", "FutureRecordMetadata", "KafkaAdminClient", "KafkaConsumer", "KafkaError",
           "KafkaProducer", "Log", "LogStore", "NewTopic", "OffsetAndMetadata", "OffsetAndTimestamp", "OffsetStore",
           "RecordMetadata", "TopicPartition", "__version__"]
