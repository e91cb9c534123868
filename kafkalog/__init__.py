"""kafkalog: an in-process, Kafka-compatible log engine for Python.

    >>> import kafkalog
    >>> with kafkalog.LogStore("data") as store:
    ...     store.create_topic("events", partitions=1)
    ...     log = store.log("events", 0)
    ...     log.append(b"hello", timestamp=1_700_000_000_000)
"""

from . import _engine  # noqa: F401  (fails loudly when the compiled engine is missing)
from .client.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from .client.consumer import ConsumerRebalanceListener, KafkaConsumer
from .client.producer import FutureRecordMetadata, KafkaProducer
from .client.queue import DurableQueue
from .config import Config
from .errors import KafkaError
from .storage import Log, LogStore, OffsetStore
from .structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, RecordMetadata, TopicPartition

__version__ = "0.1.0"


def __getattr__(name):
    # the broker (asyncio, the wire codec) loads only when asked for
    if name == "Broker":
        from .broker import Broker
        return Broker
    raise AttributeError(f"module 'kafkalog' has no attribute {name!r}")


__all__ = ["Broker", "Config", "ConfigResource", "ConfigResourceType", "ConsumerRebalanceListener", "ConsumerRecord",
           "DurableQueue", "FutureRecordMetadata", "KafkaAdminClient", "KafkaConsumer", "KafkaError",
           "KafkaProducer", "Log", "LogStore", "NewTopic", "OffsetAndMetadata", "OffsetAndTimestamp", "OffsetStore",
           "RecordMetadata", "TopicPartition", "__version__"]
