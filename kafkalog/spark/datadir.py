"""Where ``format("kafkalog")``'s data dir is: the executor's check that it is on this host (``require_data_dir``)
and the driver's make-if-missing (``make_data_dir``), shared by the source and the sink (neither imports the
other for them)."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

from ..errors import KafkaStorageError
from ..storage import LogStore

CLUSTER_HINT = ("format(\"kafkalog\") opens the data dir by path, so every executor must see it: Spark local mode, "
                "or a data dir mounted at the same path on every worker. On a cluster whose executors cannot see "
                "it, read and write through kafkalog's broker (kafkalog serve) with Spark's own Kafka source and "
                "sink: format(\"kafka\").option(\"kafka.bootstrap.servers\", \"<broker host>:9092\") with the "
                "same options (README: From one machine to a cluster).")


def require_data_dir(path: str, what: str) -> None:
    """Executor side, before touching the data dir: it must be here (its meta.properties or topic registry), or the
    task fails with one message saying what to use instead. Never creates anything at ``path``: on a worker without
    the mount, that would be a second, empty data dir."""
    if is_data_dir(path):
        return
    where = socket.gethostname()
    if os.environ.get("SPARK_LOCAL_IP"):
        where += f" {os.environ['SPARK_LOCAL_IP']}"
    raise KafkaStorageError(errno.ENOENT, f"this Spark executor ({where}) cannot {what}: the kafkalog data dir "
                                          f"{path} is not on this host. {CLUSTER_HINT}")


def make_data_dir(path: str) -> None:
    """Driver side, when a write is planned: a new data dir is made here, where the driver is, so that an executor
    never makes one of its own (``require_data_dir``)."""
    if not is_data_dir(path):
        LogStore(path, maintenance=False).close()


def is_data_dir(path: str) -> bool:
    """A kafkalog data dir (its topic registry) or a Kafka log dir (its meta.properties) is at ``path``."""
    p = Path(path)
    return (p / "meta.properties").is_file() or (p / ".kafkalog-topics.json").is_file()
