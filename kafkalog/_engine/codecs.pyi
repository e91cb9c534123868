"""Compression codecs of record batches: what Python sees of codecs.pyx.

Codecs: 0 none, 1 gzip, 2 snappy (xerial framing), 3 lz4 (Kafka's frame), 4 zstd. Every decompression is bounded
(a reader's plaintext at most 1 GiB; a produced batch's by max.message.bytes), whatever a batch declares.
"""

from typing import Final, Literal, TypeAlias

__all__ = ["COMPRESSION_CODECS"]

COMPRESSION_CODECS: Final[dict[str, int]]  # {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

Compression: TypeAlias = int | Literal["none", "gzip", "snappy", "lz4", "zstd"] | None
