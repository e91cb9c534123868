/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as record batch v2 uses over bytes [21, end).
 * SSE4.2 crc32 instruction when the CPU has it (checked once at run time), slice-by-8 tables otherwise. */
#ifndef KL_CRC32C_H
#define KL_CRC32C_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t kl_crc32c_table[8][256];
static int kl_crc32c_mode = -1; /* -1 not initialised, 0 tables, 1 hardware */

/* Three independent crc32 chains run ~3x faster than one (the instruction's latency, not its throughput, bounds a
 * single chain). The lanes are joined by CRC linearity: crc(s, A||B) = crc(s, zeros(|B|)) ^ crc(0, B), where
 * "crc over |B| zero bytes" is a fixed GF(2) operator on the 32-bit state, tabulated per state byte below. */
#define KL_CRC32C_LONG 4096
#define KL_CRC32C_SHORT 256
static uint32_t kl_crc32c_long[4][256];
static uint32_t kl_crc32c_short[4][256];

static uint32_t kl_gf2_apply(const uint32_t *op, uint32_t v) {
    uint32_t r = 0;
    for (int i = 0; v; i++, v >>= 1) if (v & 1) r ^= op[i];
    return r;
}
static void kl_gf2_square(uint32_t *out, const uint32_t *op) {
    for (int i = 0; i < 32; i++) out[i] = kl_gf2_apply(op, op[i]);
}
/* tables[k][b] = the zero-bytes operator applied to state byte k holding b; op starts as one zero BIT. */
static void kl_crc32c_zeros_tables(uint32_t tables[4][256], size_t nbytes) {
    uint32_t op[32], sq[32];
    op[0] = 0x82F63B78u;
    for (int i = 1; i < 32; i++) op[i] = 1u << (i - 1);
    for (size_t bits = 1; bits < 8 * nbytes; bits *= 2) { kl_gf2_square(sq, op); memcpy(op, sq, sizeof(op)); }
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) tables[k][b] = kl_gf2_apply(op, b << (8 * k));
}
static inline uint32_t kl_crc32c_shift(uint32_t tables[4][256], uint32_t c) {
    return tables[0][c & 0xff] ^ tables[1][(c >> 8) & 0xff] ^ tables[2][(c >> 16) & 0xff] ^ tables[3][c >> 24];
}

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
    kl_crc32c_zeros_tables(kl_crc32c_long, KL_CRC32C_LONG);
    kl_crc32c_zeros_tables(kl_crc32c_short, KL_CRC32C_SHORT);
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
    for (size_t lane = KL_CRC32C_LONG; lane >= KL_CRC32C_SHORT; lane = KL_CRC32C_SHORT) {
        uint32_t (*zeros)[256] = lane == KL_CRC32C_LONG ? kl_crc32c_long : kl_crc32c_short;
        while (n >= 3 * lane) {
            uint64_t c1 = 0, c2 = 0, w0, w1, w2;
            for (const unsigned char *e = p + lane; p < e; p += 8) {
                memcpy(&w0, p, 8); memcpy(&w1, p + lane, 8); memcpy(&w2, p + 2 * lane, 8);
                c = __builtin_ia32_crc32di(c, w0); c1 = __builtin_ia32_crc32di(c1, w1);
                c2 = __builtin_ia32_crc32di(c2, w2);
            }
            c = kl_crc32c_shift(zeros, (uint32_t)c) ^ (uint32_t)c1;
            c = kl_crc32c_shift(zeros, (uint32_t)c) ^ (uint32_t)c2;
            p += 2 * lane; n -= 3 * lane;
        }
        if (lane == KL_CRC32C_SHORT) break;
    }
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
