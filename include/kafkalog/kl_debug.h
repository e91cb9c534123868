/* KL_CHECK(cond): a bounds/invariant check compiled in only by a KAFKALOG_DEBUG=1 build; free in release builds. */
#ifndef KL_DEBUG_H
#define KL_DEBUG_H
#include <stdio.h>
#include <stdlib.h>
#ifdef KAFKALOG_DEBUG
#define KL_DEBUG_ENABLED 1
#define KL_CHECK(cond) do { if (!(cond)) { fprintf(stderr, "kafkalog debug check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); abort(); } } while (0)
#else
#define KL_DEBUG_ENABLED 0
#define KL_CHECK(cond) ((void)0)
#endif
#endif
