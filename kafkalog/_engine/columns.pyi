"""Columns of records in Arrow's layouts: what Python sees of columns.pyx.

Per record: offset Int64, timestamp Int64, timestamp_type Int8; key and value as Arrow Binary (Int32 offsets n + 1,
Bool validity, UInt8 data); headers as List<Struct<key: Utf8, value: Binary>> (header_offsets n + 1 into the
header columns, which are laid out as keys and values are).
"""

from typing import TypedDict

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

__all__ = ["Columns", "decode_columns"]

class Columns(TypedDict):
    offset: npt.NDArray[np.int64]
    timestamp: npt.NDArray[np.int64]
    timestamp_type: npt.NDArray[np.int8]
    key_offsets: npt.NDArray[np.int32]  # n + 1, Arrow binary layout
    key_valid: npt.NDArray[np.bool_]  # False = null key
    keys: npt.NDArray[np.uint8]
    value_offsets: npt.NDArray[np.int32]
    value_valid: npt.NDArray[np.bool_]
    values: npt.NDArray[np.uint8]
    header_offsets: npt.NDArray[np.int32]  # n + 1: record i owns headers [header_offsets[i], header_offsets[i+1])
    header_key_offsets: npt.NDArray[np.int32]  # h + 1; header keys are never null (UTF-8)
    header_keys: npt.NDArray[np.uint8]
    header_value_offsets: npt.NDArray[np.int32]  # h + 1
    header_value_valid: npt.NDArray[np.bool_]
    header_values: npt.NDArray[np.uint8]
    batches: int
    next_position: int  # byte position after the last complete batch decoded

def decode_columns(buffer: Buffer, start: int = 0, end: int | None = None) -> Columns:
    """Every record of the consecutive batches in buffer[start:end] as numpy columns, without per-record Python
    objects. Checks each batch's CRC, decompresses any codec, stops silently at an incomplete tail batch."""
