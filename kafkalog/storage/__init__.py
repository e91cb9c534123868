"""Storage policy over the compiled engine: LogStore (a data dir of topics), Log (one partition), recovery,
checkpoints, locks. OSError never leaves this package raw: it becomes KafkaStorageError naming path and operation."""

from .log import Log
from .offsets import OffsetStore
from .store import LogStore

__all__ = ["Log", "LogStore", "OffsetStore"]
