/* Large buffers filled once (decoded columns): malloc plus a transparent-huge-page hint, as numpy gives its own
 * large arrays. Filling a fresh multi-megabyte buffer otherwise costs more in 4 KB page faults than in copying. */
#ifndef KL_ALLOC_H
#define KL_ALLOC_H
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define KL_HUGE_HINT_BYTES ((size_t)1 << 22)

static inline void *kl_malloc_large(size_t n) {
    void *p = malloc(n ? n : 1);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p && n >= KL_HUGE_HINT_BYTES) {
        uintptr_t start = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
        madvise((void *)start, n - (size_t)(start - (uintptr_t)p), MADV_HUGEPAGE);
    }
#endif
    return p;
}
#endif
