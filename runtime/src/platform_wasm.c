/*
 * platform_wasm.c — host services for wasm32-freestanding: no libc, one linear memory.
 *
 * The allocator is a first-fit free list over memory obtained with memory.grow. The engine
 * allocates rarely (a model, a context arena, host-side input buffers), so simplicity wins over
 * speed. Each block has a 64-byte header so that every returned pointer is 64-byte aligned.
 * Freed blocks are merged with the following free block when adjacent.
 *
 * In the shared-memory (threads) build several instances run on the same memory, so the
 * allocator takes a spin lock built on wasm atomics.
 */
#include <stddef.h>
#include <stdint.h>

#include "platform.h"

#define EMB_WASM_PAGE 65536u
#define EMB_ALIGN 64u

typedef struct emb_block {
    size_t size;               /* bytes in the block, header included, a multiple of 64 */
    struct emb_block *next;    /* next free block (address order), when free */
    uint32_t free;
    uint8_t pad[EMB_ALIGN - 2 * sizeof(size_t) - sizeof(uint32_t)];
} emb_block;

_Static_assert(sizeof(emb_block) == EMB_ALIGN, "block header must be one 64-byte line");

extern unsigned char __heap_base;

static emb_block *emb_free_list;
static uintptr_t emb_heap_end;

#if defined(__wasm_atomics__)
static volatile int32_t emb_heap_lock;
static void lock(void) {
    while (__c11_atomic_exchange((_Atomic int32_t *)&emb_heap_lock, 1, __ATOMIC_ACQUIRE)) {
    }
}
static void unlock(void) { __c11_atomic_store((_Atomic int32_t *)&emb_heap_lock, 0, __ATOMIC_RELEASE); }
#else
static void lock(void) {}
static void unlock(void) {}
#endif

static emb_block *grow(size_t need) {
    if (emb_heap_end == 0) {
        emb_heap_end = ((uintptr_t)&__heap_base + EMB_ALIGN - 1) & ~(uintptr_t)(EMB_ALIGN - 1);
    }
    uintptr_t cur = (uintptr_t)__builtin_wasm_memory_size(0) * EMB_WASM_PAGE;
    uintptr_t want = emb_heap_end + need;
    if (want < emb_heap_end) return NULL;
    if (want > cur) {
        size_t pages = (size_t)((want - cur + EMB_WASM_PAGE - 1) / EMB_WASM_PAGE);
        if (__builtin_wasm_memory_grow(0, pages) == (size_t)-1) return NULL;
    }
    emb_block *b = (emb_block *)emb_heap_end;
    b->size = need;
    b->next = NULL;
    b->free = 0;
    emb_heap_end = want;
    return b;
}

void *emb_alloc(size_t size) {
    if (size == 0 || size > ((size_t)1 << 31)) return NULL;
    size_t need = ((size + EMB_ALIGN - 1) & ~(size_t)(EMB_ALIGN - 1)) + EMB_ALIGN;
    lock();
    emb_block **link = &emb_free_list;
    emb_block *b = emb_free_list;
    while (b && b->size < need) {
        link = &b->next;
        b = b->next;
    }
    if (b) {
        if (b->size - need >= 4 * EMB_ALIGN) {  /* split: keep the tail free */
            emb_block *tail = (emb_block *)((uint8_t *)b + need);
            tail->size = b->size - need;
            tail->next = b->next;
            tail->free = 1;
            b->size = need;
            *link = tail;
        } else {
            *link = b->next;
        }
        b->free = 0;
        b->next = NULL;
    } else {
        b = grow(need);
    }
    unlock();
    return b ? (uint8_t *)b + EMB_ALIGN : NULL;
}

void emb_dealloc(void *ptr) {
    if (!ptr) return;
    emb_block *b = (emb_block *)((uint8_t *)ptr - EMB_ALIGN);
    lock();
    b->free = 1;
    /* Insert in address order, then merge with the neighbours that touch it. */
    emb_block **link = &emb_free_list;
    emb_block *prev = NULL;
    while (*link && *link < b) {
        prev = *link;
        link = &(*link)->next;
    }
    b->next = *link;
    *link = b;
    if (b->next && (uint8_t *)b + b->size == (uint8_t *)b->next) {
        b->size += b->next->size;
        b->next = b->next->next;
    }
    if (prev && (uint8_t *)prev + prev->size == (uint8_t *)b) {
        prev->size += b->size;
        prev->next = b->next;
    }
    unlock();
}

/* The compiler may emit calls to these for struct copies and large loops. */
void *memcpy(void *restrict dst, const void *restrict src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    while (n--) *d++ = *s++;
    return dst;
}

void *memmove(void *dst, const void *src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    if (d == s || n == 0) return dst;
    if (d < s) {
        while (n--) *d++ = *s++;
    } else {
        d += n;
        s += n;
        while (n--) *--d = *--s;
    }
    return dst;
}

void *memset(void *dst, int c, size_t n) {
    unsigned char *d = dst;
    while (n--) *d++ = (unsigned char)c;
    return dst;
}

int memcmp(const void *a, const void *b, size_t n) {
    const unsigned char *x = a, *y = b;
    for (; n; n--, x++, y++) {
        if (*x != *y) return *x < *y ? -1 : 1;
    }
    return 0;
}
