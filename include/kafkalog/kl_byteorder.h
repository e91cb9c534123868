/* Big-endian loads and stores for Kafka's on-disk and wire integers.
 * Always memcpy + bswap: never cast a byte pointer to a wider type (alignment, strict aliasing). */
#ifndef KL_BYTEORDER_H
#define KL_BYTEORDER_H
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define KL_BE16(x) (x)
#define KL_BE32(x) (x)
#define KL_BE64(x) (x)
#else
#define KL_BE16(x) __builtin_bswap16(x)
#define KL_BE32(x) __builtin_bswap32(x)
#define KL_BE64(x) __builtin_bswap64(x)
#endif

static inline int16_t kl_load_i16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return (int16_t)KL_BE16(v); }
static inline int32_t kl_load_i32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return (int32_t)KL_BE32(v); }
static inline uint32_t kl_load_u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return KL_BE32(v); }
static inline int64_t kl_load_i64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return (int64_t)KL_BE64(v); }
static inline void kl_store_i16(unsigned char *p, int16_t x) { uint16_t v = KL_BE16((uint16_t)x); memcpy(p, &v, 2); }
static inline void kl_store_i32(unsigned char *p, int32_t x) { uint32_t v = KL_BE32((uint32_t)x); memcpy(p, &v, 4); }
static inline void kl_store_u32(unsigned char *p, uint32_t x) { uint32_t v = KL_BE32(x); memcpy(p, &v, 4); }
static inline void kl_store_i64(unsigned char *p, int64_t x) { uint64_t v = KL_BE64((uint64_t)x); memcpy(p, &v, 8); }
/* Little-endian (only the LZ4 frame uses it). */
static inline uint32_t kl_load_u32le(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline void kl_store_u32le(unsigned char *p, uint32_t x) {
    p[0] = (unsigned char)x; p[1] = (unsigned char)(x >> 8); p[2] = (unsigned char)(x >> 16); p[3] = (unsigned char)(x >> 24);
}
#endif
