"""aiokafka's fixtures, registered by the plugin when pytest-asyncio is there (its async fixtures need it)."""

from __future__ import annotations

import pytest
import pytest_asyncio


def _aiokafka():
    try:
        import aiokafka
    except ImportError:
        pytest.skip("aiokafka is not installed (pip install aiokafka)")
    return aiokafka


@pytest_asyncio.fixture
async def aiokafka_producer(kafka_topic, kafka_broker):
    """A started ``aiokafka.AIOKafkaProducer`` on kafka_broker (stopped after the test)."""
    p = _aiokafka().AIOKafkaProducer(**kafka_broker.client_config("aiokafka"))
    await p.start()
    yield p
    await p.stop()


@pytest_asyncio.fixture
async def aiokafka_consumer(kafka_topic, kafka_broker, kafka_group):
    """A started ``aiokafka.AIOKafkaConsumer`` in a group of this test from the earliest offset, not subscribed
    yet (``consumer.subscribe([topic])``)."""
    c = _aiokafka().AIOKafkaConsumer(**kafka_broker.client_config("aiokafka"), group_id=kafka_group,
                                     auto_offset_reset="earliest")
    await c.start()
    yield c
    await c.stop()
