/*
 * bundle.h — reading the bundle container (layout: the top of include/edgembed.h).
 *
 * emb_bundle_parse checks the magic, version and header, builds a table of metadata strings
 * and tensor views that point into the caller's bytes, and checks the CRC-32 of the whole file
 * (header included). It reads nothing outside [bytes, bytes + size), whatever the input.
 */
#ifndef EMB_BUNDLE_H
#define EMB_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#include "edgembed.h"

#define EMB_BUNDLE_MAX_TENSORS 4096
#define EMB_BUNDLE_MAX_META 256
#define EMB_BUNDLE_MAX_DIMS 4
#define EMB_BUNDLE_MAX_HEADER ((uint64_t)64 << 20)

typedef enum emb_dtype {
    EMB_DTYPE_F32 = 0, EMB_DTYPE_I8 = 1, EMB_DTYPE_U8 = 2, EMB_DTYPE_I32 = 3, EMB_DTYPE_F64 = 4,
} emb_dtype;

typedef struct emb_str {
    const char *ptr;  /* into the bundle; not NUL-terminated; JSON escapes left as they are */
    size_t len;
} emb_str;

typedef struct emb_meta {
    emb_str key, value;
} emb_meta;

typedef struct emb_tensor {
    emb_str name;
    emb_dtype dtype;
    int32_t ndim;
    int64_t shape[EMB_BUNDLE_MAX_DIMS];
    const uint8_t *data;  /* aligned to its element size at least */
    size_t nbytes;
} emb_tensor;

typedef struct emb_bundle {
    int32_t version;
    emb_meta *meta;       /* (n_meta) */
    size_t n_meta;
    emb_tensor *tensors;  /* (n_tensors), padding tensors ("__pad.*") left out */
    size_t n_tensors;
    const uint8_t *data;  /* the data region */
    size_t data_size;
} emb_bundle;

/* verify_crc = 0 skips the checksum (for fuzzing the checks that come after it). */
emb_status emb_bundle_parse(emb_bundle *b, const void *bytes, size_t size, int verify_crc);
void emb_bundle_release(emb_bundle *b);

const emb_tensor *emb_bundle_tensor(const emb_bundle *b, const char *name);
const emb_str *emb_bundle_meta(const emb_bundle *b, const char *key);

/* Typed metadata values. meta_is: 1 when `key` is present and equals `want`. The others return
   EMB_STATUS_CORRUPT for a missing or malformed value: meta_int a decimal integer in [lo, hi],
   meta_bool "true" or "false", meta_float a plain decimal in (lo, hi) such as "1e-12". */
int emb_bundle_meta_is(const emb_bundle *b, const char *key, const char *want);
emb_status emb_bundle_meta_int(const emb_bundle *b, const char *key, int64_t lo, int64_t hi, int32_t *out);
emb_status emb_bundle_meta_bool(const emb_bundle *b, const char *key, int32_t *out);
emb_status emb_bundle_meta_float(const emb_bundle *b, const char *key, double lo, double hi, float *out);

/* CRC-32 as zlib's crc32(crc, data, n): start with 0, chain calls to cover several pieces. */
uint32_t emb_crc32(uint32_t crc, const uint8_t *data, size_t n);

#endif /* EMB_BUNDLE_H */
