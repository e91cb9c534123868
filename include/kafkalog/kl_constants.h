/* Constants of Kafka's storage formats; the one place they are defined (reached from Cython via clib.pxd). */
#ifndef KL_CONSTANTS_H
#define KL_CONSTANTS_H

/* Record batch v2 header (61 bytes), field offsets:
 * BaseOffset => Int64 | BatchLength => Int32 | PartitionLeaderEpoch => Int32 | Magic => Int8 | CRC => Uint32 |
 * Attributes => Int16 | LastOffsetDelta => Int32 | BaseTimestamp => Int64 | MaxTimestamp => Int64 |
 * ProducerId => Int64 | ProducerEpoch => Int16 | BaseSequence => Int32 | RecordsCount => Int32 */
#define KL_BASE_OFFSET_OFFSET 0
#define KL_LENGTH_OFFSET 8
#define KL_PARTITION_LEADER_EPOCH_OFFSET 12
#define KL_MAGIC_OFFSET 16
#define KL_CRC_OFFSET 17
#define KL_ATTRIBUTES_OFFSET 21
#define KL_LAST_OFFSET_DELTA_OFFSET 23
#define KL_BASE_TIMESTAMP_OFFSET 27
#define KL_MAX_TIMESTAMP_OFFSET 35
#define KL_PRODUCER_ID_OFFSET 43
#define KL_PRODUCER_EPOCH_OFFSET 51
#define KL_BASE_SEQUENCE_OFFSET 53
#define KL_RECORDS_COUNT_OFFSET 57
#define KL_RECORD_BATCH_OVERHEAD 61
#define KL_LOG_OVERHEAD 12          /* BaseOffset + BatchLength: bytes not counted by BatchLength */
#define KL_HEADER_SIZE_UP_TO_MAGIC 17
#define KL_MIN_BATCH_LENGTH 14     /* Kafka's smallest legal size after LOG_OVERHEAD (legacy v0) */
#define KL_MAX_RECORD_OVERHEAD 21
#define KL_MAGIC_V2 2

#define KL_COMPRESSION_CODEC_MASK 0x07
#define KL_TIMESTAMP_TYPE_MASK 0x08
#define KL_TRANSACTIONAL_FLAG_MASK 0x10
#define KL_CONTROL_FLAG_MASK 0x20
#define KL_DELETE_HORIZON_FLAG_MASK 0x40

#define KL_CODEC_NONE 0
#define KL_CODEC_GZIP 1
#define KL_CODEC_SNAPPY 2
#define KL_CODEC_LZ4 3
#define KL_CODEC_ZSTD 4

#define KL_TIMESTAMP_CREATE_TIME 0
#define KL_TIMESTAMP_LOG_APPEND_TIME 1
#define KL_NO_TIMESTAMP (-1LL)

/* Index entries: OffsetIndex = RelativeOffset => Int32 | Position => Int32;
 * TimeIndex = Timestamp => Int64 | RelativeOffset => Int32. */
#define KL_OFFSET_INDEX_ENTRY 8
#define KL_TIME_INDEX_ENTRY 12
#define KL_INDEX_WARM_BYTES 8192   /* tail of an index kept hot by the two-section binary search */

#define KL_INT32_MAX 2147483647LL

/* Below this many bytes, releasing the GIL around a C pass (CRC, copy, walk) costs more than it frees. */
#define KL_NOGIL_BYTES 65536
#endif
