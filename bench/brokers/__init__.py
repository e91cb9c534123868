"""The parts of bench/broker.py (which holds the command line and runs the sections in order):

procs      the brokers as subprocesses: kafkalog serve, Tansu, Apache Kafka (the compatibility lab's KafkaBroker)
clients    confluent-kafka, kafka-python and aiokafka throughput (b1, b2, k1); topic helpers
startup    start-up to the first acknowledged record, and the idle RSS after it (k3, k4)
perftools  Kafka's kafka-producer-perf-test and kafka-consumer-perf-test against each broker (k2)
idle       RSS with 100 idle connections (b3)
acks       acks=all against acks=1 with 1, 8 and 32 producer processes (a1, --acks)
report     the tables
"""
