"""Idempotent producers (KIP-98 without transactions): producer ids, and per-partition sequence checks.

The fields of a v2 batch header that carry a producer's identity::

    ProducerId => Int64  ProducerEpoch => Int16  BaseSequence => Int32   (at bytes 43, 51, 53 of the batch)
    LastOffsetDelta => Int32 (byte 23): the batch's sequences are BaseSequence .. BaseSequence + LastOffsetDelta

Per (partition, producer id) the broker keeps the epoch and the last five batches' (first seq, last seq, base
offset), as Kafka's ProducerStateManager does: a batch equal to one of them is a retry and is answered with the
offset it got the first time (nothing appended twice); a batch whose first sequence is not the last sequence + 1
gets OUT_OF_ORDER_SEQUENCE_NUMBER (45); an older epoch gets INVALID_PRODUCER_EPOCH (47). Producer ids come from
``LogStore.producer_ids`` (blocks of 1000 from ``.kafkalog-broker/producer-ids``, shared with embedded producers), so
ids are never reused across restarts. After a restart the state of a partition is rebuilt from the batches of its
active segment the first time an idempotent batch arrives for it.
"""

from __future__ import annotations

from collections import deque

from .._engine.batch import iter_batches
from ..errors import InvalidProducerEpochError, KafkaError, OutOfOrderSequenceNumberError

_CACHED_BATCHES = 5
_INT32_MAX = 2**31 - 1


def _batches(buf):
    """(base offset, last offset delta, producer id, epoch, base sequence) of each batch in ``buf`` (the engine's
    header reader: no CRC check here, append_records does that)."""
    for b in iter_batches(buf):
        yield b.base_offset, b.last_offset_delta, b.producer_id, b.producer_epoch, b.base_sequence


class _State:
    __slots__ = ("epoch", "batches")

    def __init__(self, epoch: int):
        self.epoch = epoch
        self.batches: deque = deque(maxlen=_CACHED_BATCHES)  # (first seq, last seq, base offset)


class ProducerStates:
    """Producer ids and sequence state of one broker. Loop thread only."""

    def __init__(self, store):
        self.store = store
        self._parts: dict[tuple[str, int], dict[int, _State]] = {}

    def new_producer_id(self) -> int:
        return self.store.producer_ids.next()

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._parts if k[0] == topic]:
            del self._parts[key]

    def _partition(self, topic: str, partition: int, log) -> dict[int, _State]:
        states = self._parts.get((topic, partition))
        if states is None:
            states = self._parts[(topic, partition)] = {}
            self._rebuild(states, log)
        return states

    @staticmethod
    def _rebuild(states: dict[int, _State], log) -> None:
        bases = getattr(log, "_bases", None)
        pos = max(bases[-1] if bases else 0, log.log_start_offset)
        end = log.log_end_offset
        while pos < end:
            try:
                view = log.read(pos, 8 << 20)
            except KafkaError:
                return
            if not len(view):
                return
            last = pos
            for base, lod, pid, epoch, seq in _batches(view):
                last = base + lod + 1
                if pid < 0 or seq < 0:
                    continue
                st = states.get(pid)
                if st is None or epoch > st.epoch:
                    st = states[pid] = _State(epoch)
                st.batches.append((seq, (seq + lod) & _INT32_MAX, base))
            if last <= pos:
                return
            pos = last

    def check(self, topic: str, partition: int, log, records):
        """Before an append: the base offset of the original when ``records`` is a retry of a batch already
        appended, else None; raises for a sequence or epoch the producer cannot be right about."""
        first = next(_batches(records), None)
        if first is None:
            return None
        _base, lod, pid, epoch, seq = first
        if pid < 0:
            return None
        st = self._partition(topic, partition, log).get(pid)
        if st is None:
            return None  # a new producer (or one whose batches were all deleted): any sequence starts it
        if epoch < st.epoch:
            raise InvalidProducerEpochError(f"producer {pid} epoch {epoch} is older than {st.epoch} on "
                                            f"{topic}-{partition}")
        if epoch > st.epoch:
            if seq != 0:
                raise OutOfOrderSequenceNumberError(f"producer {pid} new epoch {epoch} must start at sequence 0, "
                                                    f"got {seq} on {topic}-{partition}")
            return None
        last_seq = (seq + lod) & _INT32_MAX
        for f, lst, base in st.batches:
            if f == seq and lst == last_seq:
                return base
        if st.batches:
            expected = (st.batches[-1][1] + 1) & _INT32_MAX
            if seq != expected:
                raise OutOfOrderSequenceNumberError(
                    f"producer {pid} epoch {epoch} sent sequence {seq} to {topic}-{partition}, expected {expected}")
        return None

    def active(self, topic: str, partition: int, log) -> dict[int, tuple[int, int, int]]:
        """{producer id: (epoch, last sequence, last timestamp or -1)} of the producers this broker knows on the
        partition (DescribeProducers)."""
        return {pid: (st.epoch, st.batches[-1][1] if st.batches else -1, -1)
                for pid, st in self._partition(topic, partition, log).items()}

    def appended(self, topic: str, partition: int, records, first_offset: int) -> None:
        states = self._parts.get((topic, partition))
        offset = first_offset
        for _base, lod, pid, epoch, seq in _batches(records):
            if pid >= 0 and seq >= 0:
                if states is None:
                    states = self._parts[(topic, partition)] = {}
                st = states.get(pid)
                if st is None or epoch != st.epoch:
                    st = states[pid] = _State(epoch)
                st.batches.append((seq, (seq + lod) & _INT32_MAX, offset))
            offset += lod + 1


__all__ = ["ProducerStates"]
