"""Fault injection for tests of a Kafka client's resilience: what only a local broker can do to its clients.

``broker.faults`` (``Broker.faults``) turns it on; a broker that never asks for it has ``Services.faults = None`` and
pays one ``is None`` check per produced partition and per fetched partition. What it offers:

- ``fail_produce(topic, error, count=1, partition=None)``: the next ``count`` produces to the topic (one produce =
  one partition of one Produce request) are answered with Kafka error ``error`` and their records are not appended,
  as a broker that refused them would answer. A retriable code (``NOT_LEADER_OR_FOLLOWER`` 6, ``NOT_ENOUGH_REPLICAS``
  19, ``REQUEST_TIMED_OUT`` 7, ...) makes clients retry; another one reaches the application.
- ``stall(topic, partition=0)``: Produce requests naming the partition are held unanswered and fetches of it return
  no records (its high watermark as it is), until ``resume()``: a leader that stopped answering for one partition.
  A held Produce is appended and answered when the stall ends (a client that gave up and retried meanwhile may
  write twice, as with a real slow leader, unless it is idempotent).
- ``clear()`` ends every rule and stall; ``injected`` counts the produces answered with an injected error.

Restarting the broker on its data dir is ``Broker.restart()`` (not a fault of this module: nothing is simulated).
Faults end when the broker stops, a restart included (``reset()``): the rules and stalls of a broker in a thread
end as those of a ``kafkalog serve`` child do with its process, and ``injected`` counts from the start again. A
Produce held by a stall is dropped with its connection, as by a broker process that exits.

Thread safety: every method may be called from any thread; the broker's loop reads the rules under the same lock.
"""

from __future__ import annotations

import asyncio
import threading

from ..errors import _REGISTRY, KafkaError
from ..structs import TopicPartition


def error_code(error) -> int:
    """A Kafka error code from an int, a KafkaError class or instance, or a name (``"NOT_LEADER_OR_FOLLOWER"``
    or a class name such as ``"RequestTimedOutError"``)."""
    if isinstance(error, bool):
        raise TypeError("error: a Kafka error code, a KafkaError or its name")
    if isinstance(error, int):
        code = error
    elif isinstance(error, KafkaError) or (isinstance(error, type) and issubclass(error, KafkaError)):
        code = error.code
    elif isinstance(error, str):
        wanted = error.strip()
        found = [c for c, cls in _REGISTRY.items() if wanted in (cls.name, cls.__name__)]
        if not found and wanted.upper() in KNOWN_CODES:
            found = [KNOWN_CODES[wanted.upper()]]
        if not found:
            raise ValueError(f"unknown Kafka error name {error!r}")
        code = found[0]
    else:
        raise TypeError(f"error: a Kafka error code, a KafkaError or its name, not {type(error).__name__}")
    if not -1 <= code <= 32767 or code == 0:
        raise ValueError(f"error code {code}: not a Kafka error (0 is success)")
    return code


# Kafka's produce errors a client tells apart, by name, for codes kafkalog itself never raises as a class
KNOWN_CODES = {
    "NOT_LEADER_OR_FOLLOWER": 6, "LEADER_NOT_AVAILABLE": 5, "REQUEST_TIMED_OUT": 7, "NETWORK_EXCEPTION": 13,
    "NOT_ENOUGH_REPLICAS": 19, "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20, "KAFKA_STORAGE_ERROR": 56,
    "THROTTLING_QUOTA_EXCEEDED": 89, "POLICY_VIOLATION": 44, "INVALID_RECORD": 87,
}


class _Rule:
    __slots__ = ("topic", "partition", "code", "left")

    def __init__(self, topic, partition, code, left):
        self.topic, self.partition, self.code, self.left = topic, partition, code, left


class Faults:
    """The fault-injection rules of one broker (see the module docstring). The object stays the broker's across
    ``Broker.restart()``; its rules and stalls end at each stop (``reset()``)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._stalls: dict[TopicPartition, list] = {}  # partition -> futures of Produce requests held behind it
        self.injected = 0
        self.active = False  # any rule or stall: the broker's only check on its hot paths when faults exist

    # -- the test's side ------------------------------------------------------------------------------------------

    def fail_produce(self, topic: str, error, count: int = 1, partition: int | None = None) -> None:
        code = error_code(error)
        if count < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            self._rules.append(_Rule(topic, partition, code, int(count)))
            self.active = True

    def pending(self, topic: str | None = None) -> int:
        """Produces still to be failed (of one topic, or all)."""
        with self._lock:
            return sum(r.left for r in self._rules if topic is None or r.topic == topic)

    def stall(self, topic: str, partition: int = 0) -> None:
        with self._lock:
            self._stalls.setdefault(TopicPartition(topic, partition), [])
            self.active = True

    def resume(self, topic: str | None = None, partition: int | None = None) -> None:
        """End the stalls of one partition, of a topic (``partition`` None), or all (``topic`` None)."""
        with self._lock:
            ended = [tp for tp in self._stalls
                     if (topic is None or tp.topic == topic) and (partition is None or tp.partition == partition)]
            held = [f for tp in ended for f in self._stalls.pop(tp)]
            self.active = bool(self._rules or self._stalls)
        for fut in held:
            loop = fut.get_loop()
            if not loop.is_closed():
                loop.call_soon_threadsafe(_release, fut)

    def stalled(self, topic: str, partition: int) -> bool:
        return TopicPartition(topic, partition) in self._stalls

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
        self.resume()

    def reset(self) -> None:
        """What a stop does: every rule and stall ends, ``injected`` starts from 0. The Produce requests held by a
        stall are not released: the stop closed their connections (their handlers were cancelled)."""
        with self._lock:
            self._rules.clear()
            self._stalls.clear()
            self.injected = 0
            self.active = False

    # -- the broker's side (its loop thread) ----------------------------------------------------------------------

    def produce_error(self, topic: str, partition: int) -> int:
        """0, or the error code to answer this produce with (one of the rule's count used up)."""
        with self._lock:
            for rule in self._rules:
                if rule.topic == topic and (rule.partition is None or rule.partition == partition):
                    rule.left -= 1
                    if not rule.left:
                        self._rules.remove(rule)
                        self.active = bool(self._rules or self._stalls)
                    self.injected += 1
                    return rule.code
        return 0

    def hold(self, loop, topics) -> asyncio.Future | None:
        """A future a Produce request naming a stalled partition waits on (None: nothing stalled there).
        ``topics``: (name, [(partition, records), ...]) as the Produce parser gives them."""
        with self._lock:
            if not self._stalls:
                return None
            for name, partitions in topics:
                for idx, _records in partitions:
                    held = self._stalls.get(TopicPartition(name, idx))
                    if held is not None:
                        fut = loop.create_future()
                        held.append(fut)
                        return fut
        return None


def _release(fut) -> None:
    if not fut.done():
        fut.set_result(None)
