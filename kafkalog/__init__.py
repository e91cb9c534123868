"""kafkalog: an in-process, Kafka-compatible log engine for Python.

    >>> import kafkalog
    >>> with kafkalog.LogStore("data") as store:
    ...     store.create_topic("events", partitions=1)
    ...     log = store.log("events", 0)
    ...     log.append(b"hello", timestamp=1_700_000_000_000)

Every public name loads when first asked for (PEP 562): ``import kafkalog`` alone imports no numpy and no compiled
engine, so that what imports it for little (the pytest plugin, registered in every pytest run of an environment
with kafkalog installed; ``kafkalog --help``) pays little. There is still no pure-Python fallback: the first use of
a name that needs the engine (``kafkalog.LogStore``, ``from kafkalog import Log``) raises ``EngineNotBuiltError``
when it is not built.
"""

__version__ = "0.1.0"

# name -> the submodule it comes from, imported when first asked for
_LAZY = {
    "Config": "config", "KafkaError": "errors",
    "Log": "storage", "LogStore": "storage", "OffsetStore": "storage",
    "ConsumerRecord": "structs", "OffsetAndMetadata": "structs", "OffsetAndTimestamp": "structs",
    "RecordMetadata": "structs", "TopicPartition": "structs",
    "ConfigResource": "client.admin", "ConfigResourceType": "client.admin", "KafkaAdminClient": "client.admin",
    "NewTopic": "client.admin", "ConsumerRebalanceListener": "client.consumer", "KafkaConsumer": "client.consumer",
    "FutureRecordMetadata": "client.producer", "KafkaProducer": "client.producer", "DurableQueue": "client.queue",
    "Broker": "broker",
}
# `kafkalog.<sub>` works after a bare `import kafkalog`, as it did when the first five were imported eagerly
_SUBMODULES = {"_engine", "config", "errors", "storage", "structs", "broker", "cli", "client", "spark", "testing"}
_LISTED = ("_engine", "config", "errors", "storage", "structs")  # in dir(), as when they were imported eagerly

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; type checkers take it as True
if TYPE_CHECKING:  # what type checkers and IDEs see (py.typed)
    from .broker import Broker
    from .client.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
    from .client.consumer import ConsumerRebalanceListener, KafkaConsumer
    from .client.producer import FutureRecordMetadata, KafkaProducer
    from .client.queue import DurableQueue
    from .config import Config
    from .errors import KafkaError
    from .storage import Log, LogStore, OffsetStore
    from .structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, RecordMetadata, TopicPartition
del TYPE_CHECKING


def __getattr__(name):
    import importlib
    where = _LAZY.get(name)
    if where is not None:
        value = getattr(importlib.import_module(f".{where}", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'kafkalog' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_LISTED))


__all__ = ["Broker", "Config", "ConfigResource", "ConfigResourceType", "ConsumerRebalanceListener", "ConsumerRecord",
           "DurableQueue", "FutureRecordMetadata", "KafkaAdminClient", "KafkaConsumer", "KafkaError",
           "KafkaProducer", "Log", "LogStore", "NewTopic", "OffsetAndMetadata", "OffsetAndTimestamp", "OffsetStore",
           "RecordMetadata", "TopicPartition", "__version__"]
