/*
 * embcli — a debugging CLI for the native engine (only a CLI's main prints).
 *
 *   embcli BUNDLE TEXT...        token ids and the first values of each text's embedding
 *   embcli bench BUNDLE [N] [L] [THREADS] [KERNELS] [SECONDS] [cold]
 *                                N sequences of L tokens, encoded as one batch: the best call's
 *                                tokens/s and G-MAC/s, and the median call's time (of
 *                                the first 65,536 calls at most; default 32 x 64, 1 thread,
 *                                the best kernel set, calls for 2 s). "cold": before each call
 *                                (untimed) write 64 MiB elsewhere, so that the call finds the
 *                                weights in memory rather than in the caches, as a call does
 *                                after other work
 */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "edgembed.h"

static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = aligned_alloc(64, ((size_t)n + 63) / 64 * 64);
    *size = fread(p, 1, (size_t)n, f);
    fclose(f);
    return p;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int bench = argc > 1 && strcmp(argv[1], "bench") == 0;
    if (argc < 3) {
        fprintf(stderr, "usage: embcli BUNDLE TEXT... | embcli bench BUNDLE [N] [L] [THREADS] [KERNELS] [SECONDS] "
                        "[cold]\n");
        return 2;
    }
    const char *path = argv[bench ? 2 : 1];
    size_t size = 0;
    void *bytes = read_file(path, &size);
    if (!bytes) {
        fprintf(stderr, "embcli: cannot read %s\n", path);
        return 1;
    }
    emb_model *m = NULL;
    emb_status s = emb_model_init(&m, bytes, size);
    if (s != EMB_STATUS_OK) {
        fprintf(stderr, "embcli: %s: %s\n", path, emb_status_str(s));
        return 1;
    }
    emb_model_info info;
    emb_model_get_info(m, &info);
    emb_context *ctx = NULL;
    if (bench) {
        int n = argc > 3 ? atoi(argv[3]) : 32, l = argc > 4 ? atoi(argv[4]) : 64;
        int threads = argc > 5 ? atoi(argv[5]) : 1;
        const char *kernels = argc > 6 ? argv[6] : NULL;
        double seconds = argc > 7 ? atof(argv[7]) : 2.0;
        int cold = argc > 8 && strcmp(argv[8], "cold") == 0;
        if (argc > 9 || (argc > 8 && !cold)) {
            fprintf(stderr, "embcli: bench takes at most 7 arguments, the last one \"cold\" if any\n");
            return 2;
        }
        if (n < 1 || l < 2 || l > info.max_length || threads < 1) {
            fprintf(stderr, "embcli: bench needs N >= 1, 2 <= L <= %d (this model's maximum) and THREADS >= 1\n",
                    info.max_length);
            return 2;
        }
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n * l)), *lens = malloc(sizeof(int32_t) * (size_t)n);
        float *out = malloc(sizeof(float) * (size_t)(n * info.dim));
        for (int i = 0; i < n * l; i++) ids[i] = 1000 + (i * 7919) % 20000;
        for (int i = 0; i < n; i++) lens[i] = l;
        s = emb_context_init_ex(&ctx, m, (size_t)(n * l), threads, kernels);
        if (s != EMB_STATUS_OK) {
            fprintf(stderr, "embcli: context: %s\n", emb_status_str(s));
            return 1;
        }
        emb_context_encode(ctx, ids, lens, (size_t)n, EMB_POOLING_MODEL, -1, out, (size_t)(n * info.dim));
        /* the best call of those that fit in `seconds`: on a shared machine the fastest call is
           the one least disturbed by other work; CPU time over wall time shows how disturbed */
        int reps = 0, cap = 1 << 16;
        double t0 = now(), best = 1e30, best_cpu = 0, t, *times = malloc(sizeof(double) * (size_t)cap);
        size_t evict_size = (size_t)64 << 20;
        volatile char *evict = cold ? malloc(evict_size) : NULL;
        if (cold && !evict) {
            fprintf(stderr, "embcli: out of memory\n");
            return 1;
        }
        do {
            for (size_t q = 0; evict && q < evict_size; q += 64) evict[q] = (char)q;
            double a = now(), ca = cpu_now();
            emb_context_encode(ctx, ids, lens, (size_t)n, EMB_POOLING_MODEL, -1, out, (size_t)(n * info.dim));
            double dt = now() - a;
            if (dt < best) best = dt, best_cpu = cpu_now() - ca;
            if (times && reps < cap) times[reps] = dt;
            reps++;
            t = now() - t0;
        } while (t < seconds || reps < 3);
        int kept = reps < cap ? reps : cap;
        double median = -1; /* no buffer for the call times: no median */
        if (times) {
            qsort(times, (size_t)kept, sizeof(double), by_value);
            median = times[kept / 2];
            free(times);
        }
        free((void *)evict);
        double c = info.dim, f = info.ffn_dim, tokens = (double)n * l;
        double macs = tokens * info.n_layers * (4 * c * c + 2 * c * f) + (double)n * info.n_layers * 2.0 * l * l * c;
        printf("%d x %d tokens, %d threads, %s: %.0f tokens/s, %.2f G-MAC/s (linear + attention), best of %d "
               "calls (%.3f ms, CPU %.3f ms",
               n, l, threads, emb_context_kernels(ctx), tokens / best, macs / best / 1e9, reps, best * 1e3,
               best_cpu * 1e3);
        if (median >= 0) printf("; median call %.3f ms", median * 1e3);
        printf(")\n");
    } else {
        if (emb_context_init(&ctx, m, (size_t)info.max_length) != EMB_STATUS_OK) return 1;
        int32_t ids[4096];
        float *out = malloc(sizeof(float) * (size_t)info.dim);
        for (int a = 2; a < argc; a++) {
            size_t n = 0, full = 0;
            s = emb_model_tokenize(m, argv[a], strlen(argv[a]), 1, ids, 4096, &n, &full);
            if (s != EMB_STATUS_OK) {
                fprintf(stderr, "embcli: tokenize: %s\n", emb_status_str(s));
                return 1;
            }
            int32_t len = (int32_t)n;
            s = emb_context_encode(ctx, ids, &len, 1, EMB_POOLING_MODEL, -1, out, (size_t)info.dim);
            if (s != EMB_STATUS_OK) {
                fprintf(stderr, "embcli: encode: %s\n", emb_status_str(s));
                return 1;
            }
            printf("ids:");
            for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
            printf("%s\nvec: [", full > n ? " (truncated)" : "");
            for (int i = 0; i < 6; i++) printf("%s%.6f", i ? ", " : "", (double)out[i]);
            printf(", ...]\n");
        }
    }
    emb_context_free(ctx);
    emb_model_free(m);
    free(bytes);
    return 0;
}
