/* Atomic 64-bit words shared between processes through a MAP_SHARED mapping (the partition change counter).
 * A writer publishes with a sequentially consistent read-modify-write after its change is visible in the files;
 * a reader loads with acquire, so the file reads that follow a load see at least what came before the store. */
#ifndef KL_ATOMIC_H
#define KL_ATOMIC_H
#include <stdint.h>

static inline uint64_t kl_atomic_load_u64(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void kl_atomic_store_u64(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
/* returns the value before the addition */
static inline uint64_t kl_atomic_fetch_add_u64(uint64_t *p, uint64_t v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
/* raises *p to v when it is below (compare-and-swap loop); returns the value before */
static inline uint64_t kl_atomic_max_u64(uint64_t *p, uint64_t v) {
    uint64_t cur = __atomic_load_n(p, __ATOMIC_ACQUIRE);
    while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE)) {
    }
    return cur;
}
#endif
