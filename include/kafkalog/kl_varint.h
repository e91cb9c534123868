/* Zigzag LEB128 varints of record batch v2 (varint <= 5 bytes, varlong <= 10 bytes).
 * Decoders return the number of bytes read, or -1 when the input ends early or the varint is too long. */
#ifndef KL_VARINT_H
#define KL_VARINT_H
#include <stddef.h>
#include <stdint.h>

static inline size_t kl_varlong_size(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    size_t n = 1;
    while (z >= 0x80) { z >>= 7; n++; }
    return n;
}
static inline size_t kl_varint_size(int32_t v) { return kl_varlong_size((int64_t)v); }

static inline size_t kl_write_varlong(unsigned char *p, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    size_t n = 0;
    while (z >= 0x80) { p[n++] = (unsigned char)(z | 0x80); z >>= 7; }
    p[n++] = (unsigned char)z;
    return n;
}
static inline size_t kl_write_varint(unsigned char *p, int32_t v) { return kl_write_varlong(p, (int64_t)v); }

static inline int kl_read_varlong(const unsigned char *p, const unsigned char *end, int64_t *out) {
    uint64_t z = 0;
    int shift = 0, n = 0;
    while (p + n < end) {
        unsigned char b = p[n++];
        z |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) { *out = (int64_t)(z >> 1) ^ -(int64_t)(z & 1); return n; }
        shift += 7;
        if (shift > 63) return -1;
    }
    return -1;
}
static inline int kl_read_varint(const unsigned char *p, const unsigned char *end, int32_t *out) {
    int64_t v;
    int n = kl_read_varlong(p, end, &v);
    if (n < 0 || n > 5 || v < INT32_MIN || v > INT32_MAX) return -1;
    *out = (int32_t)v;
    return n;
}

/* Cursor-style decoding for hot scans: one-byte fast path, advances *pp; 0 on a truncated or over-long varint. */
static inline int kl_next_uvarint(const unsigned char **pp, const unsigned char *end, uint64_t *out) {
    const unsigned char *p = *pp;
    uint64_t v = 0;
    int shift = 0;
    if (p < end && p[0] < 0x80) { *out = p[0]; *pp = p + 1; return 1; }
    /* two bytes: record lengths of 64-8191 bytes, timestamp deltas up to 8 s (the common case of hot scans) */
    if (p + 1 < end && p[1] < 0x80) { *out = (uint64_t)(p[0] & 0x7f) | ((uint64_t)p[1] << 7); *pp = p + 2; return 1; }
    while (p < end && shift < 64) {
        v |= (uint64_t)(p[0] & 0x7f) << shift;
        if (!(p[0] & 0x80)) { *out = v; *pp = p + 1; return 1; }
        p++;
        shift += 7;
    }
    return 0;
}
/* Unsigned varints of the Kafka protocol's flexible versions (KIP-482: compact lengths, tag buffers), <= 5 bytes. */
static inline size_t kl_uvarint_size(uint32_t v) {
    size_t n = 1;
    while (v >= 0x80) { v >>= 7; n++; }
    return n;
}
static inline size_t kl_write_uvarint(unsigned char *p, uint32_t v) {
    size_t n = 0;
    while (v >= 0x80) { p[n++] = (unsigned char)(v | 0x80); v >>= 7; }
    p[n++] = (unsigned char)v;
    return n;
}
static inline int64_t kl_unzigzag(uint64_t z) { return (int64_t)(z >> 1) ^ -(int64_t)(z & 1); }
#endif