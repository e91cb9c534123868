"""kafkalog's broker facade: the Kafka wire protocol over one data dir (``kafkalog serve``, ``kafkalog.Broker``).

Kafka clients (kafka-python, confluent-kafka/librdkafka, aiokafka, kcat) talk to it unchanged; embedded
producers, consumers and the CLI use the same data dir beside it (one store, two doors).
"""

from .server import Broker

__all__ = ["Broker"]
