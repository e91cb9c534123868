"""The embedded client: kafka-python's KafkaProducer / KafkaConsumer / KafkaAdminClient names over a LogStore."""
