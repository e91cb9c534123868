"""kafkalog for tests of Kafka code: a real broker on 127.0.0.1 in milliseconds, in-process or as a child process,
with fault injection only a local broker can offer, and the helpers tests write by hand.

The pytest plugin (``kafkalog.testing.pytest_plugin``, registered with pytest on install) gives these as fixtures
(``kafka_broker``, ``kafka_bootstrap``, ``kafka_topic``, ``kafka_admin``, the three Python clients', ...); this
package is what they are made of, usable without pytest. See the README's "Testing your Kafka code".

Its names load when first asked for (PEP 562), as kafkalog's do: pytest imports the plugin, and with it this
package, in every run of an environment where kafkalog is installed, and a run that uses none of its fixtures
should import no numpy nor compiled engine for it.
"""

_LAZY = {"DEFAULT_CONFIG": "broker", "MODES": "broker", "SASL_USERS": "broker", "LocalBroker": "broker",
         "consume_all": "helpers", "produce": "helpers", "timed": "helpers", "wait_for": "helpers",
         "wait_for_group": "helpers", "Admin": "wire"}

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; type checkers take it as True
if TYPE_CHECKING:
    from .broker import DEFAULT_CONFIG, MODES, SASL_USERS, LocalBroker
    from .helpers import consume_all, produce, timed, wait_for, wait_for_group
    from .wire import Admin
del TYPE_CHECKING


def __getattr__(name):
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'kafkalog.testing' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{where}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["Admin", "DEFAULT_CONFIG", "LocalBroker", "MODES", "SASL_USERS", "consume_all", "produce", "timed",
           "wait_for", "wait_for_group"]
