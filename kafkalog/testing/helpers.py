"""What tests of Kafka code write by hand, once: wait for a condition, for a consumer group to settle, produce
records (with the timestamps a test chooses), read a topic back. Each takes a ``LocalBroker`` (the pytest plugin's
``kafka_broker``) or a bootstrap address string.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from .wire import Admin


def wait_for(condition: Callable, timeout: float = 10.0, interval: float = 0.02, what: str | None = None):
    """Call ``condition()`` until it returns something truthy and return that; TimeoutError (naming ``what``, or
    the condition) after ``timeout`` seconds. An exception from the condition ends the wait at once."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= end:
            raise TimeoutError(f"not within {timeout} s: {what or getattr(condition, '__name__', condition)}")
        time.sleep(interval)


def _using(broker, fn):
    """``fn(admin)``: on a LocalBroker's shared connection, or on a connection of its own to an address."""
    if isinstance(broker, str):
        with Admin(broker) as a:
            return fn(a)
    return broker.using_client(fn)


def produce(broker, topic: str, records: Iterable, partition: int | None = None) -> list[tuple[int, int]]:
    """Write ``records`` to ``topic`` and wait for the acknowledgement (acks=all); each record is a value, a
    (key, value) pair, or a dict with ``value``, ``key``, ``headers``, ``timestamp`` (epoch ms or a datetime: what
    ``offsets_for_times`` will find) and ``partition``. Returns each record's (partition, offset)."""
    records = list(records)
    return _using(broker, lambda a: a.produce(topic, records, partition))


def timed(values: Iterable, start_ms: int, step_ms: int = 1000, key=None) -> list[dict]:
    """Records with chosen timestamps: ``values[i]`` at ``start_ms + i * step_ms`` (for offsets_for_times tests)."""
    return [{"value": v, "key": key, "timestamp": start_ms + i * step_ms} for i, v in enumerate(values)]


def consume_all(broker, topic: str, timeout: float = 10.0, count: int | None = None,
                partition: int | None = None) -> list:
    """Every record of ``topic`` (or one partition) as ``kafkalog.ConsumerRecord`` (topic, partition, offset,
    timestamp, key, value, headers, ...), in partition then offset order, read without a group (no offsets
    committed). With ``count``: waits until there are at least that many, TimeoutError after ``timeout`` s;
    without: what the topic holds now (an unknown topic is waited for up to ``timeout``)."""
    def read(a):
        """The records now (None: no such topic), from one Metadata request and the fetches."""
        n = a.metadata([topic]).get(topic)
        return None if n is None else a.read(topic, partition, partitions=n)
    got = []

    def enough():  # one request at a time on a shared connection: other threads' helpers go in between
        got[:] = [_using(broker, read)]
        return got[0] is not None and (count is None or len(got[0]) >= count)
    try:
        wait_for(enough, timeout, what=f"{count if count is not None else 'the'} records in {topic}")
    except TimeoutError as e:
        have = got[0] if got else None
        raise TimeoutError(f"{e} (it has {'no such topic' if have is None else len(have)})") from None
    return got[0]


def wait_for_group(broker, group: str, state: str = "Stable", members: int | None = None,
                   timeout: float = 30.0) -> dict:
    """Until the consumer group is in ``state`` (Kafka's names: Stable, Empty, PreparingRebalance, ...) with
    ``members`` members when given: its DescribeGroups answer ({"state", "protocol", "members"})."""
    last = {}

    def settled():
        last.update(_using(broker, lambda a: a.describe_group(group)))
        return last["state"] == state and (members is None or len(last["members"]) == members)
    try:
        wait_for(settled, timeout, interval=0.05)
    except TimeoutError:
        raise TimeoutError(f"group {group} not {state}{f' with {members} members' if members else ''} within "
                           f"{timeout} s: {last.get('state')} with {len(last.get('members', []))} members") \
            from None
    return dict(last)
