/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as record batch v2 uses over bytes [21, end).
 * SSE4.2 crc32 instruction when the CPU has it (checked once at run time), slice-by-8 tables otherwise. */
#ifndef KL_CRC32C_H
#define KL_CRC32C_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t kl_crc32c_table[8][256];
static int kl_crc32c_mode = -1; /* -1 not initialised, 0 tables, 1 hardware */

static void kl_crc32c_init(void) {
    if (kl_crc32c_mode >= 0) return;
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        kl_crc32c_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = kl_crc32c_table[0][n];
        for (int k = 1; k < 8; k++) { c = kl_crc32c_table[0][c & 0xff] ^ (c >> 8); kl_crc32c_table[k][n] = c; }
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    kl_crc32c_mode = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    kl_crc32c_mode = 0;
#endif
}

static uint32_t kl_crc32c_sw(uint32_t crc, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) { crc = kl_crc32c_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8); n--; }
    while (n >= 8) {
        uint64_t w; memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        w ^= crc;
        crc = kl_crc32c_table[7][w & 0xff] ^ kl_crc32c_table[6][(w >> 8) & 0xff] ^
              kl_crc32c_table[5][(w >> 16) & 0xff] ^ kl_crc32c_table[4][(w >> 24) & 0xff] ^
              kl_crc32c_table[3][(w >> 32) & 0xff] ^ kl_crc32c_table[2][(w >> 40) & 0xff] ^
              kl_crc32c_table[1][(w >> 48) & 0xff] ^ kl_crc32c_table[0][w >> 56];
        p += 8; n -= 8;
    }
    while (n--) crc = kl_crc32c_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2")))
static uint32_t kl_crc32c_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    while (n && ((uintptr_t)p & 7)) { c = __builtin_ia32_crc32qi((uint32_t)c, *p++); n--; }
    while (n >= 8) { uint64_t w; memcpy(&w, p, 8); c = __builtin_ia32_crc32di(c, w); p += 8; n -= 8; }
    while (n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

/* crc32c(buf) with the usual pre/post inversion; pass 0 as `crc` for a fresh checksum, or a previous result to continue. */
static inline uint32_t kl_crc32c(uint32_t crc, const unsigned char *p, size_t n) {
    if (kl_crc32c_mode < 0) kl_crc32c_init();
    crc = ~crc;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (kl_crc32c_mode == 1) return ~kl_crc32c_hw(crc, p, n);
#endif
    return ~kl_crc32c_sw(crc, p, n);
}
#endif
