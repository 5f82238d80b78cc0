/*
 * check.h — what the C test programs share: a pass/fail counter with CHECK, and a small seeded
 * xorshift generator. Define TEST_SEED (a 64-bit constant) before including it.
 */
#ifndef EMB_TEST_CHECK_H
#define EMB_TEST_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static int n_pass, n_fail;

#define CHECK(cond, ...)                                \
    do {                                                \
        if (cond) {                                     \
            n_pass++;                                   \
        } else {                                        \
            n_fail++;                                   \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
        }                                               \
    } while (0)

static uint64_t rng_state = TEST_SEED;
static inline uint32_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static inline float frand(float lo, float hi) { return lo + (hi - lo) * (float)(rng() & 0xFFFFFF) / 16777216.0f; }
static inline size_t urand(size_t lo, size_t hi) { return lo + rng() % (uint32_t)(hi - lo + 1); }

#endif
