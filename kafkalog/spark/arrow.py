"""Arrow record batches of Spark's Kafka schema, built from the engine's columns without per-record Python objects.

Spark's Kafka source schema, and the Arrow type each column must have for Spark to take the batch as it is::

    key            binary                  (null key -> null)
    value          binary
    topic          string
    partition      int32
    offset         int64
    timestamp      timestamp[us, tz=UTC]   (record timestamp ms x 1000)
    timestampType  int32                   (0 CreateTime, 1 LogAppendTime)
    headers        list<element: struct<key: string, value: binary>>   (includeHeaders; null when a record has none)

Keys, values and header fields come from ``decode_columns`` in Arrow's binary layout (int32 offsets + data), so a
column is the engine's buffers re-based, not a copy per record. A range is read in chunks of whole batches
(``Log.read``: a zero-copy view of the segment), each chunk becoming one record batch (~70,000 records of 100 bytes).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .._engine.batch import next_offset_after
from .._engine.columns import decode_columns
from ..errors import OffsetOutOfRangeError
from ..storage.isolation import drop_aborted
from .offsets import report_data_loss

CHUNK_BYTES = 8 << 20


def _binary(typ, offsets, data, valid=None) -> pa.Array:
    n = len(offsets) - 1
    lo, hi = int(offsets[0]), int(offsets[-1])
    if lo:
        offsets = offsets - np.int32(lo)
    validity, nulls = None, 0
    if valid is not None:
        nulls = n - int(np.count_nonzero(valid))
        if nulls:
            validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data[lo:hi])],
                                 null_count=nulls)


def _primitive(typ, values: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(typ, len(values), [None, pa.py_buffer(values)], null_count=0)


def _constant_string(text: bytes, n: int) -> pa.Array:
    offsets = np.arange(0, (n + 1) * len(text), len(text), dtype=np.int32) if text else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text * n)],
                                 null_count=0)


def build_batch(cols: dict, lo: int, hi: int, topic: bytes, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """Records [lo, hi) of one ``decode_columns`` result as a record batch of ``schema`` (7 or 8 columns)."""
    n = hi - lo
    arrays = [
        _binary(pa.binary(), cols["key_offsets"][lo:hi + 1], cols["keys"], cols["key_valid"][lo:hi]),
        _binary(pa.binary(), cols["value_offsets"][lo:hi + 1], cols["values"], cols["value_valid"][lo:hi]),
        _constant_string(topic, n),
        _primitive(pa.int32(), np.full(n, partition, dtype=np.int32)),
        _primitive(pa.int64(), np.ascontiguousarray(cols["offset"][lo:hi])),
        _primitive(schema.field("timestamp").type, cols["timestamp"][lo:hi] * 1000),
        _primitive(pa.int32(), cols["timestamp_type"][lo:hi].astype(np.int32)),
    ]
    if len(schema) == 8:
        arrays.append(_headers(cols, lo, hi, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _headers(cols: dict, lo: int, hi: int, list_type) -> pa.Array:
    n = hi - lo
    owners = cols["header_offsets"][lo:hi + 1]
    h0, h1 = int(owners[0]), int(owners[-1])
    struct_type = list_type.value_type
    keys = _binary(struct_type.field(0).type, cols["header_key_offsets"][h0:h1 + 1], cols["header_keys"])
    values = _binary(struct_type.field(1).type, cols["header_value_offsets"][h0:h1 + 1], cols["header_values"],
                     cols["header_value_valid"][h0:h1])
    entries = pa.StructArray.from_arrays([keys, values], fields=[struct_type.field(0), struct_type.field(1)])
    has = np.diff(owners) > 0  # Spark's Kafka source: a record without headers has null headers
    nulls = n - int(np.count_nonzero(has))
    validity = pa.py_buffer(np.packbits(has, bitorder="little")) if nulls else None
    rebased = owners - np.int32(h0) if h0 else owners
    return pa.Array.from_buffers(list_type, n, [validity, pa.py_buffer(np.ascontiguousarray(rebased))],
                                 null_count=nulls, children=[entries])


def read_range(log, start: int, end: int, schema: pa.Schema, fail_on_data_loss: bool, chunk_bytes=CHUNK_BYTES, *,
               read_committed: bool = False):
    """Yield record batches of offsets [start, end) of ``log`` (opened read-only by the caller). Offsets removed
    since planning (delete-before, retention) fail or are skipped with a warning, per failOnDataLoss.
    ``read_committed`` (kafka.isolation.level): the range ends at or below the last stable offset (the planner saw
    to it) and the records of aborted transactions are dropped."""
    topic = log.topic.encode()
    partition = log.partition
    where = f"{log.topic}-{partition}"
    pos = start
    while pos < end:
        try:
            if read_committed:
                _, _, _, view, aborted = log.fetch_isolated(pos, chunk_bytes, True)
                if view is None:
                    view = memoryview(b"")
            else:
                view = log.read(pos, chunk_bytes)
        except OffsetOutOfRangeError:
            lso, leo = log.log_start_offset, log.log_end_offset
            if pos < lso:
                report_data_loss(f"Cannot read offsets [{pos}, {min(lso, end)}) of {where}: the log starts at "
                                 f"offset {lso} now", fail_on_data_loss)
                pos = lso
                continue
            report_data_loss(f"Cannot read offsets [{pos}, {end}) of {where}: the log ends at offset {leo} now",
                             fail_on_data_loss)
            return
        if not len(view):
            report_data_loss(f"Cannot read offsets [{pos}, {end}) of {where}: the log ends at offset {pos} now",
                             fail_on_data_loss)
            return
        nxt = next_offset_after(view, pos)
        if read_committed:
            view = drop_aborted(view, aborted)
        cols = decode_columns(view)
        del view  # the columns are copies: let the segment's mapping go
        off = cols["offset"]
        lo = int(np.searchsorted(off, pos))
        hi = int(np.searchsorted(off, end))
        if hi > lo:
            yield build_batch(cols, lo, hi, topic, partition, schema)
        if nxt <= pos:
            break
        pos = nxt
