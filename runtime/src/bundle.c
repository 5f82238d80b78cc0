/*
 * bundle.c — the bundle reader: magic, version, a strict JSON header parser and the CRC-32.
 *
 * The header is JSON only because safetensors says so; the parser accepts the subset a bundle
 * needs (objects, arrays, strings, non-negative integers) and treats anything else as
 * EMB_STATUS_CORRUPT. Every read is bounds-checked against the header's end, and nesting is
 * fixed (top object → metadata object or tensor object → arrays), so there is no recursion.
 */
#include "bundle.h"

#include "platform.h"

static const char MAGIC[] = "{\"__metadata__\":{\"edgembed_bundle\":\"";
#define MAGIC_LEN (sizeof(MAGIC) - 1)

typedef struct cursor {
    const char *p, *end;
} cursor;

static int str_eq(emb_str s, const char *lit) {
    size_t i = 0;
    for (; i < s.len; i++) {
        if (lit[i] == '\0' || lit[i] != s.ptr[i]) return 0;
    }
    return lit[i] == '\0';
}

static int str_eq_str(emb_str a, emb_str b) {
    if (a.len != b.len) return 0;
    for (size_t i = 0; i < a.len; i++) {
        if (a.ptr[i] != b.ptr[i]) return 0;
    }
    return 1;
}

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

static int eat(cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static int peek(cursor *c, char ch) {
    skip_ws(c);
    return c->p < c->end && *c->p == ch;
}

static int is_hex(char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* A JSON string; its raw bytes (escapes unresolved) land in *out. */
static int parse_string(cursor *c, emb_str *out) {
    if (!eat(c, '"')) return 0;
    const char *start = c->p;
    while (c->p < c->end) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '"') {
            out->ptr = start;
            out->len = (size_t)(c->p - start);
            c->p++;
            return 1;
        }
        if (ch < 0x20) return 0;
        if (ch == '\\') {
            if (c->end - c->p < 2) return 0;
            char e = c->p[1];
            if (e == 'u') {
                if (c->end - c->p < 6) return 0;
                for (int i = 2; i < 6; i++) {
                    if (!is_hex(c->p[i])) return 0;
                }
                c->p += 6;
                continue;
            }
            if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' && e != 't') {
                return 0;
            }
            c->p += 2;
            continue;
        }
        c->p++;
    }
    return 0;
}

/* A non-negative integer below 2^53. */
static int parse_uint(cursor *c, uint64_t *out) {
    skip_ws(c);
    uint64_t v = 0;
    const char *start = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        v = v * 10 + (uint64_t)(*c->p - '0');
        if (v >= ((uint64_t)1 << 53)) return 0;
        c->p++;
    }
    if (c->p == start) return 0;
    if (c->p - start > 1 && *start == '0') return 0;
    *out = v;
    return 1;
}

static int parse_uint_array(cursor *c, uint64_t *vals, int max, int *n) {
    *n = 0;
    if (!eat(c, '[')) return 0;
    if (eat(c, ']')) return 1;
    do {
        if (*n >= max) return 0;
        if (!parse_uint(c, &vals[*n])) return 0;
        (*n)++;
    } while (eat(c, ','));
    return eat(c, ']');
}

static int dtype_of(emb_str s, emb_dtype *dt, size_t *elem) {
    if (str_eq(s, "F32")) {
        *dt = EMB_DTYPE_F32;
        *elem = 4;
    } else if (str_eq(s, "I8")) {
        *dt = EMB_DTYPE_I8;
        *elem = 1;
    } else if (str_eq(s, "U8")) {
        *dt = EMB_DTYPE_U8;
        *elem = 1;
    } else if (str_eq(s, "I32")) {
        *dt = EMB_DTYPE_I32;
        *elem = 4;
    } else if (str_eq(s, "F64")) {
        *dt = EMB_DTYPE_F64;
        *elem = 8;
    } else {
        return 0;
    }
    return 1;
}

/* {"dtype":..., "shape":[...], "data_offsets":[b, e]} in any order, each key once. */
static emb_status parse_tensor(cursor *c, emb_tensor *t, const emb_bundle *b) {
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    emb_str dts = {0, 0};
    uint64_t shape[EMB_BUNDLE_MAX_DIMS], offs[2];
    int ndim = 0, noffs = 0;
    if (!eat(c, '{')) return EMB_STATUS_CORRUPT;
    do {
        emb_str key;
        if (!parse_string(c, &key) || !eat(c, ':')) return EMB_STATUS_CORRUPT;
        if (str_eq(key, "dtype") && !have_dtype) {
            if (!parse_string(c, &dts)) return EMB_STATUS_CORRUPT;
            have_dtype = 1;
        } else if (str_eq(key, "shape") && !have_shape) {
            if (!parse_uint_array(c, shape, EMB_BUNDLE_MAX_DIMS, &ndim)) return EMB_STATUS_CORRUPT;
            have_shape = 1;
        } else if (str_eq(key, "data_offsets") && !have_offsets) {
            if (!parse_uint_array(c, offs, 2, &noffs) || noffs != 2) return EMB_STATUS_CORRUPT;
            have_offsets = 1;
        } else {
            return EMB_STATUS_CORRUPT;
        }
    } while (eat(c, ','));
    if (!eat(c, '}') || !have_dtype || !have_shape || !have_offsets) return EMB_STATUS_CORRUPT;

    size_t elem;
    if (!dtype_of(dts, &t->dtype, &elem)) return EMB_STATUS_UNSUPPORTED;
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0 || shape[i] > ((uint64_t)1 << 40)) return EMB_STATUS_CORRUPT;
        count *= shape[i];
        if (count > ((uint64_t)1 << 40)) return EMB_STATUS_CORRUPT;
        t->shape[i] = (int64_t)shape[i];
    }
    if (offs[0] > offs[1] || offs[1] > b->data_size) return EMB_STATUS_TRUNCATED;
    if (offs[1] - offs[0] != count * elem) return EMB_STATUS_CORRUPT;
    if (offs[0] % elem) return EMB_STATUS_CORRUPT;
    t->ndim = ndim;
    t->data = b->data + offs[0];
    t->nbytes = (size_t)(offs[1] - offs[0]);
    return EMB_STATUS_OK;
}

static emb_status parse_metadata(cursor *c, emb_bundle *b, size_t cap) {
    if (!eat(c, '{')) return EMB_STATUS_CORRUPT;
    if (eat(c, '}')) return EMB_STATUS_OK;
    do {
        emb_meta m;
        if (!parse_string(c, &m.key) || !eat(c, ':') || !parse_string(c, &m.value)) return EMB_STATUS_CORRUPT;
        for (size_t i = 0; i < b->n_meta; i++) {
            if (str_eq_str(b->meta[i].key, m.key)) return EMB_STATUS_CORRUPT;
        }
        if (b->n_meta >= cap) return EMB_STATUS_CORRUPT;
        b->meta[b->n_meta++] = m;
    } while (eat(c, ','));
    return eat(c, '}') ? EMB_STATUS_OK : EMB_STATUS_CORRUPT;
}

static emb_status parse_header(cursor *c, emb_bundle *b, size_t meta_cap, size_t tensor_cap) {
    int have_meta = 0;
    if (!eat(c, '{')) return EMB_STATUS_CORRUPT;
    if (peek(c, '}')) return EMB_STATUS_CORRUPT;
    do {
        emb_str key;
        if (!parse_string(c, &key) || !eat(c, ':')) return EMB_STATUS_CORRUPT;
        if (str_eq(key, "__metadata__")) {
            if (have_meta) return EMB_STATUS_CORRUPT;
            have_meta = 1;
            emb_status s = parse_metadata(c, b, meta_cap);
            if (s != EMB_STATUS_OK) return s;
            continue;
        }
        emb_tensor t;
        emb_status s = parse_tensor(c, &t, b);
        if (s != EMB_STATUS_OK) return s;
        t.name = key;
        if (key.len >= 6 && key.ptr[0] == '_' && key.ptr[1] == '_' && key.ptr[2] == 'p' &&
            key.ptr[3] == 'a' && key.ptr[4] == 'd' && key.ptr[5] == '.') {
            continue;  /* alignment padding */
        }
        for (size_t i = 0; i < b->n_tensors; i++) {
            if (str_eq_str(b->tensors[i].name, key)) return EMB_STATUS_CORRUPT;
        }
        if (b->n_tensors >= tensor_cap) return EMB_STATUS_CORRUPT;
        b->tensors[b->n_tensors++] = t;
    } while (eat(c, ','));
    if (!eat(c, '}')) return EMB_STATUS_CORRUPT;
    skip_ws(c);
    return (c->p == c->end && have_meta) ? EMB_STATUS_OK : EMB_STATUS_CORRUPT;
}

/*
 * The "crc32" metadata value: 8 lowercase hex digits, the CRC-32 of the whole file with those 8
 * digits read as '0'. The header is covered as well as the weights, so an edited configuration
 * value (n_heads, pooling, …) is caught like a flipped weight bit.
 */
static emb_status check_crc(const emb_bundle *b, const uint8_t *u, size_t size, int verify_crc) {
    const emb_str *crc = emb_bundle_meta(b, "crc32");
    if (!crc || crc->len != 8) return EMB_STATUS_CORRUPT;
    uint32_t want = 0;
    for (size_t i = 0; i < 8; i++) {
        char ch = crc->ptr[i];
        uint32_t d = (ch >= '0' && ch <= '9') ? (uint32_t)(ch - '0') : (ch >= 'a' && ch <= 'f') ? (uint32_t)(ch - 'a' + 10) : 16u;
        if (d == 16u) return EMB_STATUS_CORRUPT;
        want = (want << 4) | d;
    }
    if (!verify_crc) return EMB_STATUS_OK;
    size_t at = (size_t)((const uint8_t *)crc->ptr - u);
    uint32_t got = emb_crc32(0, u, at);
    got = emb_crc32(got, (const uint8_t *)"00000000", 8);
    got = emb_crc32(got, u + at + 8, size - at - 8);
    return got == want ? EMB_STATUS_OK : EMB_STATUS_CORRUPT;
}

emb_status emb_bundle_parse(emb_bundle *b, const void *bytes, size_t size, int verify_crc) {
    const uint8_t *u = bytes;
    b->meta = NULL;
    b->tensors = NULL;
    b->n_meta = b->n_tensors = 0;
    if (!bytes) return EMB_STATUS_INVALID_ARGUMENT;
    if (size < 8) return size == 0 ? EMB_STATUS_INVALID_ARGUMENT : EMB_STATUS_TRUNCATED;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | u[i];

    /* 1. the magic, on the bytes that are there */
    size_t avail = size - 8;
    size_t check = avail < MAGIC_LEN ? avail : MAGIC_LEN;
    if (hlen < MAGIC_LEN) return EMB_STATUS_BAD_MAGIC;
    for (size_t i = 0; i < check; i++) {
        if (u[8 + i] != (uint8_t)MAGIC[i]) return EMB_STATUS_BAD_MAGIC;
    }
    if (hlen > avail) return EMB_STATUS_TRUNCATED;
    if (hlen > EMB_BUNDLE_MAX_HEADER || (8 + hlen) % EMB_BUNDLE_ALIGN) return EMB_STATUS_CORRUPT;

    /* 2. the version, before anything that a later version may change */
    const char *hdr = (const char *)u + 8;
    const char *hend = hdr + hlen;
    const char *v = hdr + MAGIC_LEN;
    int64_t version = 0;
    int digits = 0;
    while (v < hend && *v >= '0' && *v <= '9' && digits < 9) {
        version = version * 10 + (*v - '0');
        v++;
        digits++;
    }
    if (digits == 0 || v >= hend || *v != '"') return EMB_STATUS_CORRUPT;
    if (version < EMB_BUNDLE_VERSION_MIN || version > EMB_BUNDLE_VERSION_MAX) return EMB_STATUS_BAD_VERSION;
    b->version = (int32_t)version;
    b->data = u + 8 + hlen;
    b->data_size = size - 8 - (size_t)hlen;

    /* 3. the JSON header: upper bounds of the table sizes first, then one strict pass */
    size_t n_colon = 0, n_brace = 0;
    for (const char *p = hdr; p < hend; p++) {
        n_colon += *p == ':';
        n_brace += *p == '{';
    }
    size_t meta_cap = n_colon < EMB_BUNDLE_MAX_META ? n_colon : EMB_BUNDLE_MAX_META;
    size_t tensor_cap = n_brace < EMB_BUNDLE_MAX_TENSORS ? n_brace : EMB_BUNDLE_MAX_TENSORS;
    b->meta = emb_alloc((meta_cap ? meta_cap : 1) * sizeof(emb_meta));
    b->tensors = emb_alloc((tensor_cap ? tensor_cap : 1) * sizeof(emb_tensor));
    if (!b->meta || !b->tensors) {
        emb_bundle_release(b);
        return EMB_STATUS_OUT_OF_MEMORY;
    }
    cursor c = {hdr, hend};
    emb_status s = parse_header(&c, b, meta_cap, tensor_cap);
    if (s == EMB_STATUS_OK) s = check_crc(b, u, size, verify_crc);
    if (s != EMB_STATUS_OK) emb_bundle_release(b);
    return s;
}

void emb_bundle_release(emb_bundle *b) {
    emb_dealloc(b->meta);
    emb_dealloc(b->tensors);
    b->meta = NULL;
    b->tensors = NULL;
    b->n_meta = b->n_tensors = 0;
}

const emb_tensor *emb_bundle_tensor(const emb_bundle *b, const char *name) {
    for (size_t i = 0; i < b->n_tensors; i++) {
        if (str_eq(b->tensors[i].name, name)) return &b->tensors[i];
    }
    return NULL;
}

const emb_str *emb_bundle_meta(const emb_bundle *b, const char *key) {
    for (size_t i = 0; i < b->n_meta; i++) {
        if (str_eq(b->meta[i].key, key)) return &b->meta[i].value;
    }
    return NULL;
}

/* ── typed metadata values ─────────────────────────────────────────────────────────── */

int emb_bundle_meta_is(const emb_bundle *b, const char *key, const char *want) {
    const emb_str *v = emb_bundle_meta(b, key);
    if (!v) return 0;
    size_t i = 0;
    for (; i < v->len; i++) {
        if (want[i] == '\0' || want[i] != v->ptr[i]) return 0;
    }
    return want[i] == '\0';
}

emb_status emb_bundle_meta_int(const emb_bundle *b, const char *key, int64_t lo, int64_t hi, int32_t *out) {
    const emb_str *v = emb_bundle_meta(b, key);
    if (!v || v->len == 0 || v->len > 10) return EMB_STATUS_CORRUPT;
    int64_t x = 0;
    for (size_t i = 0; i < v->len; i++) {
        char ch = v->ptr[i];
        if (ch < '0' || ch > '9') return EMB_STATUS_CORRUPT;
        x = x * 10 + (ch - '0');
    }
    if (x < lo || x > hi) return EMB_STATUS_CORRUPT;
    *out = (int32_t)x;
    return EMB_STATUS_OK;
}

emb_status emb_bundle_meta_bool(const emb_bundle *b, const char *key, int32_t *out) {
    if (emb_bundle_meta_is(b, key, "true")) {
        *out = 1;
    } else if (emb_bundle_meta_is(b, key, "false")) {
        *out = 0;
    } else {
        return EMB_STATUS_CORRUPT;
    }
    return EMB_STATUS_OK;
}

/* A plain decimal float such as "1e-12", "1.5E-05" or "160000.0" in (lo, hi); good to an ulp or
   two, enough for an epsilon or a theta. */
emb_status emb_bundle_meta_float(const emb_bundle *b, const char *key, double lo, double hi, float *out) {
    const emb_str *v = emb_bundle_meta(b, key);
    if (!v || v->len == 0 || v->len > 32) return EMB_STATUS_CORRUPT;
    const char *p = v->ptr, *end = v->ptr + v->len;
    double mant = 0;
    int exp10 = 0, digits = 0;
    for (; p < end && *p >= '0' && *p <= '9'; p++, digits++) mant = mant * 10 + (*p - '0');
    if (p < end && *p == '.') {
        for (p++; p < end && *p >= '0' && *p <= '9'; p++, digits++) {
            mant = mant * 10 + (*p - '0');
            exp10--;
        }
    }
    if (digits == 0) return EMB_STATUS_CORRUPT;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int sign = 1, e = 0, ed = 0;
        if (p < end && (*p == '-' || *p == '+')) sign = *p++ == '-' ? -1 : 1;
        for (; p < end && *p >= '0' && *p <= '9' && ed < 3; p++, ed++) e = e * 10 + (*p - '0');
        if (ed == 0) return EMB_STATUS_CORRUPT;
        exp10 += sign * e;
    }
    if (p != end || exp10 < -60 || exp10 > 60) return EMB_STATUS_CORRUPT;
    double scale = 1;
    for (int i = 0; i < (exp10 < 0 ? -exp10 : exp10); i++) scale *= 10;
    double val = exp10 < 0 ? mant / scale : mant * scale;
    if (!(val > lo && val < hi)) return EMB_STATUS_CORRUPT;
    *out = (float)val;
    return EMB_STATUS_OK;
}

/*
 * CRC-32 (reflected polynomial 0xEDB88320, as zlib), four bytes per step with four tables:
 * the whole file is checked at every load, so the byte-at-a-time loop was too slow.
 */
uint32_t emb_crc32(uint32_t crc_in, const uint8_t *data, size_t n) {
    uint32_t t[4][256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        t[1][i] = (t[0][i] >> 8) ^ t[0][t[0][i] & 0xFF];
        t[2][i] = (t[1][i] >> 8) ^ t[0][t[1][i] & 0xFF];
        t[3][i] = (t[2][i] >> 8) ^ t[0][t[2][i] & 0xFF];
    }
    uint32_t crc = crc_in ^ 0xFFFFFFFFu;
    while (n >= 4) {
        crc ^= (uint32_t)data[0] | ((uint32_t)data[1] << 8) | ((uint32_t)data[2] << 16) | ((uint32_t)data[3] << 24);
        crc = t[3][crc & 0xFF] ^ t[2][(crc >> 8) & 0xFF] ^ t[1][(crc >> 16) & 0xFF] ^ t[0][crc >> 24];
        data += 4;
        n -= 4;
    }
    while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *data++) & 0xFF];
    return crc ^ 0xFFFFFFFFu;
}
