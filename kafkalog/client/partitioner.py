"""Kafka's default partitioning: the partition a real cluster's producers would pick for a record.

Keyed records::

    partition = toPositive(murmur2(serialized_key)) % numPartitions      toPositive(x) = x & 0x7fffffff

with Java's ``org.apache.kafka.common.utils.Utils.murmur2`` (MurmurHash2, seed 0x9747b28c, little-endian 4-byte
words, tail bytes mixed high to low). ``murmur2`` (compiled) returns the hash as an unsigned 32-bit int, as
kafka-python does; Java's signed int32 has the same bits, so ``& 0x7fffffff`` gives the same partition either way.

Unkeyed records (KIP-480, Kafka 2.4+): stick to one partition, chosen at random among the topic's partitions,
until a batch for it is sent; then move to another random partition. Batches fill up instead of spreading one
record per partition.

``StickyPartitioner`` has kafka-python's pluggable interface (``partition(topic, key, serialized_key, value,
serialized_value, cluster)`` and the ``on_new_batch`` hook), so it and kafka-python's own partitioners plug into
either producer. The kafkalog producer runs the same rules inline on its hot path when no ``partitioner`` is set.

Thread safety: ``murmur2`` and ``hash_partition`` are pure; ``StickyPartitioner`` guards its state with a lock.
"""

from __future__ import annotations

import random
import threading

from .._engine.accumulator import murmur2

__all__ = ["StickyPartitioner", "hash_partition", "murmur2"]

# murmur2 is compiled (kafkalog/_engine/accumulator.pyx): ~20 ns for a short key, so nothing is memoized. The producer's
# compiled send() path hashes bytes keys with the same C function.


def hash_partition(key, num_partitions: int) -> int:
    """The partition of a keyed record: ``(murmur2(key) & 0x7fffffff) % num_partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """KIP-480 with kafka-python's Partitioner interface: murmur2 for keyed records, sticky for unkeyed ones.

    ``cluster`` is anything with ``partitions_for_topic(topic)`` and ``available_partitions_for_topic(topic)``
    (kafka-python's ClusterMetadata, or the view the kafkalog producer passes). Thread-safe.
    """

    def __init__(self):
        self._sticky: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, topic, key, serialized_key, value, serialized_value, cluster):
        return self.partition(topic, key, serialized_key, value, serialized_value, cluster)

    def partition(self, topic, key, serialized_key, value, serialized_value, cluster) -> int:
        all_partitions = cluster.partitions_for_topic(topic)
        if not all_partitions:
            raise ValueError(f"topic {topic!r} has no known partitions")
        if serialized_key is not None:
            ordered = sorted(all_partitions)
            return ordered[hash_partition(serialized_key, len(ordered))]
        with self._lock:
            p = self._sticky.get(topic)
            available = cluster.available_partitions_for_topic(topic) or all_partitions
            if p is not None and p in available:
                return p
            return self._pick(topic, available, None)

    def on_new_batch(self, topic, cluster, prev_partition) -> None:
        """The sticky partition's batch was sent: move to another partition (a no-op if another thread did)."""
        with self._lock:
            if self._sticky.get(topic) != prev_partition:
                return
            available = cluster.available_partitions_for_topic(topic) or cluster.partitions_for_topic(topic)
            if available:
                self._pick(topic, available, prev_partition)

    def _pick(self, topic, available, avoid) -> int:
        candidates = sorted(p for p in available if p != avoid) or sorted(available)
        p = candidates[int(random.random() * len(candidates))]
        self._sticky[topic] = p
        return p
