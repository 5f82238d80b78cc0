/*
 * platform.h — the few things the engine needs from its host, in one place.
 *
 * Native builds map them to the C library. wasm32-freestanding builds have no libc:
 * platform_wasm.c provides emb_alloc/emb_dealloc on top of memory.grow and the
 * memcpy/memset/memmove symbols the compiler may emit calls to.
 */
#ifndef EMB_PLATFORM_H
#define EMB_PLATFORM_H

#include <stddef.h>
#include <stdint.h>

void *emb_alloc(size_t size);    /* NULL when out of memory; memory is not zeroed */
void emb_dealloc(void *ptr);     /* NULL is allowed */

#define emb_memcpy(d, s, n) __builtin_memcpy((d), (s), (n))
#define emb_memset(d, c, n) __builtin_memset((d), (c), (n))
#define emb_memmove(d, s, n) __builtin_memmove((d), (s), (n))

#endif /* EMB_PLATFORM_H */
