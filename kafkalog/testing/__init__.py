"""kafkalog for tests of Kafka code: a real broker on 127.0.0.1 in milliseconds, in-process or as a child process,
with fault injection only a local broker can offer, and the helpers tests write by hand.

The pytest plugin (``pytest_kafkalog``, registered with pytest on install) gives these as fixtures
(``kafka_broker``, ``kafka_bootstrap``, ``kafka_topic``, ``kafka_admin``, the three Python clients', ...); this
package is what they are made of, usable without pytest. See the README's "Testing your Kafka code".
"""

from .broker import DEFAULT_CONFIG, MODES, SASL_USERS, LocalBroker
from .helpers import consume_all, produce, timed, wait_for, wait_for_group
from .wire import Admin

__all__ = ["Admin", "DEFAULT_CONFIG", "LocalBroker", "MODES", "SASL_USERS", "consume_all", "produce", "timed",
           "wait_for", "wait_for_group"]
