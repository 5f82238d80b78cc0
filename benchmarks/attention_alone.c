/*
 * attention_alone.c — the fp32 attention call alone, MiniLM's shape (C = 384, 12 heads of 32):
 * S sequences of n tokens (random QKV), every head in one call, one thread; prints the best CPU
 * time of the rounds in µs per sequence and layer. Built against the objects of a native build,
 * so two builds compare on one machine (docs/benchmarks.md, "## Native CPU backend"):
 *
 *   cc -std=c11 -O2 -Iruntime/include -Iruntime/src -o attention_alone benchmarks/attention_alone.c \
 *       OBJS -lm -pthread          (OBJS: every .o in build/native/obj of the build to measure)
 *   ./attention_alone KERNELS N S ROUNDS      e.g. ./attention_alone avx2 16 32 300
 */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels.h"

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: attention_alone KERNELS N S ROUNDS\n");
        return 2;
    }
    const emb_kernels *k = emb_kernels_find(argv[1]);
    int n_ = atoi(argv[2]), s_ = atoi(argv[3]), r_ = atoi(argv[4]);
    if (!k || (k->supported && !k->supported()) || n_ < 1 || s_ < 1 || r_ < 1) {
        fprintf(stderr, "attention_alone: no such kernel set here, or a count < 1\n");
        return 2;
    }
    size_t n = (size_t)n_, seqs = (size_t)s_, rounds = (size_t)r_, c = 384, heads = 12, ld = 3 * c;
    float *qkv = malloc(sizeof(float) * seqs * n * ld), *out = malloc(sizeof(float) * seqs * n * c);
    float *scratch = malloc(sizeof(float) * emb_attention_scratch(n, c / heads));
    if (!qkv || !out || !scratch) return 1;
    srand(1);
    for (size_t i = 0; i < seqs * n * ld; i++) qkv[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    double best = 1e30;
    for (size_t r = 0; r < rounds; r++) {
        double t = cpu_s();
        for (size_t s = 0; s < seqs; s++) {
            emb_attention_args a = {qkv + s * n * ld, ld, out + s * n * c, c, n, c, heads, NULL, 0, 0, 0};
            k->attention(&a, 0, heads, scratch);
        }
        t = cpu_s() - t;
        if (t < best) best = t;
    }
    printf("%s n=%zu: %.3f us per sequence and layer (out[7] %g)\n", argv[1], n, best / (double)seqs * 1e6,
           (double)out[7]);
    free(qkv);
    free(out);
    free(scratch);
    return 0;
}
