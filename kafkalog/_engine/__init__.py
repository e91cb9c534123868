"""kafkalog's compiled engine (Cython): record batches (framing, codecs, batch), the producer's accumulator, the
durable queue's deliveries, columnar decoding, the cleaner's kernels (compaction), segment indexes, one segment's files.

There is no pure-Python fallback: importing kafkalog without the built extension fails here, loudly.
"""

from ..errors import EngineNotBuiltError
from ..structs import ConsumerRecord

try:
    from . import accumulator, batch, codecs, columns, compaction, delivery, framing, index, segment  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised by the packaging test in a clean tree
    raise EngineNotBuiltError(
        f"kafkalog's compiled engine is not built ({e}). Install with `pip install .` (or build in place with "
        "`python setup.py build_ext --inplace`); kafkalog has no slow pure-Python fallback.") from e

DEBUG_BUILD = bool(framing.debug_build())

# An app reads record.value, record.key... of every record it consumes: member descriptors make each of those reads
# one load (the class stays kafka-python's NamedTuple in every other way). Here, so that it holds for every record
# kafkalog makes, whoever makes it (they all come from the engine).
batch.fields_as_members(ConsumerRecord)
