/* platform_native.c — the engine's host services on a hosted C library. */
#include <stdlib.h>

#include "platform.h"

void *emb_alloc(size_t size) {
    /* 64-byte alignment: every arena and weight view starts on a cache line. */
    size_t rounded = (size + 63u) & ~(size_t)63u;
    if (size == 0 || rounded < size) return NULL;
    return aligned_alloc(64, rounded);
}

void emb_dealloc(void *ptr) { free(ptr); }
