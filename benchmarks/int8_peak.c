/*
 * int8_peak.c — this CPU's int8 multiply-accumulate peak, measured now: the denominator of the
 * "of int8 peak" columns of benchmarks/native_cpu.py, which builds and runs it in every round so
 * that the share is against the speed the machine has at that moment (on a shared VM it moves by
 * a factor of two or more within a day; a constant measured once says little).
 *
 *   cc -O2 -pthread -o int8_peak benchmarks/int8_peak.c
 *   ./int8_peak KIND THREADS SECONDS     KIND: vnni | amx32 | amx64 | which
 *
 * vnni: twelve independent chains of vpdpbusd (zmm with AVX-512 VNNI, 64 MACs each; ymm with
 * AVX-VNNI only, 32), the instruction the engine's VNNI kernels are built on. amx32 / amx64:
 * tdpbssd on 16 × 16 int32 tiles with K = 32 (the engine's block, what its AMX GEMM issues) or
 * 64 (a full tile row), over four independent accumulators. THREADS copies run at once, one per
 * thread; the output is one line, the mean G-MAC/s per thread: `int8_peak vnni zmm 1 458.3`.
 * `which` prints the vnni kind this CPU runs (zmm, ymm) or `none` (exit 1 with none). Every
 * kind that the CPU lacks exits 1 with a message.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define ZMM __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define YMM __attribute__((target("avx2,avxvnni")))
#define AMX __attribute__((target("amx-tile,amx-int8")))

/* run_zmm, run_ymm: multiply-accumulates per second over about `seconds` of twelve independent
   vpdpbusd chains on vector type V (LANES int32 lanes, 4 MACs each); the sums go to *sink so
   that nothing is optimized away. */
#define CHAINS(DP)                                                                          \
    c[0] = DP(c[0], a, b), c[1] = DP(c[1], a, b), c[2] = DP(c[2], a, b), c[3] = DP(c[3], a, b),   \
    c[4] = DP(c[4], a, b), c[5] = DP(c[5], a, b), c[6] = DP(c[6], a, b), c[7] = DP(c[7], a, b),   \
    c[8] = DP(c[8], a, b), c[9] = DP(c[9], a, b), c[10] = DP(c[10], a, b), c[11] = DP(c[11], a, b)
#define VNNI_RUN(NAME, ATTR, V, SET1, ADD, DP, LANES)                                        \
    static ATTR double NAME(double seconds, int *sink) {                                      \
        V a = SET1(0x01010101), b = SET1(0x02020202), c[12];                                  \
        for (int i = 0; i < 12; i++) c[i] = SET1(0);                                          \
        double t0 = now(), macs = 0;                                                          \
        while (now() - t0 < seconds) {                                                        \
            for (int i = 0; i < 100000; i++) {                                                \
                __asm__ volatile("" : "+v"(a), "+v"(b));                                      \
                CHAINS(DP);  /* spelled out: a loop over c[] keeps it in memory */            \
            }                                                                                 \
            macs += 100000.0 * 12 * 4 * (LANES);                                              \
        }                                                                                     \
        V s = c[0];                                                                           \
        for (int i = 1; i < 12; i++) s = ADD(s, c[i]);                                        \
        int out[LANES];                                                                       \
        __builtin_memcpy(out, &s, sizeof out);                                                \
        *sink = out[0];                                                                       \
        return macs / (now() - t0);                                                           \
    }
VNNI_RUN(run_zmm, ZMM, __m512i, _mm512_set1_epi32, _mm512_add_epi32, _mm512_dpbusd_epi32, 16)
VNNI_RUN(run_ymm, YMM, __m256i, _mm256_set1_epi32, _mm256_add_epi32, _mm256_dpbusd_avx_epi32, 8)
#undef VNNI_RUN
#undef CHAINS

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

static AMX double run_amx(int k, double seconds, int *sink) {
    /* tiles 0-3: C (16 × 16 int32); 4: A (16 rows × k bytes); 5: B (k/4 rows × 64 bytes) */
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return -1.0; /* ARCH_REQ_XCOMP_PERM, XTILEDATA */
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    cfg.rows[4] = 16, cfg.colsb[4] = (uint16_t)k;
    cfg.rows[5] = (uint8_t)(k / 4), cfg.colsb[5] = 64;
    _tile_loadconfig(&cfg);
    static _Alignas(64) int8_t a[16 * 64], b[16 * 64];
    static _Alignas(64) int32_t c[16 * 16];
    memset(a, 1, sizeof a), memset(b, 2, sizeof b);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, b, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    double t0 = now(), macs = 0;
    while (now() - t0 < seconds) {
        for (int i = 0; i < 10000; i++) {
            _tile_dpbssd(0, 4, 5);
            _tile_dpbssd(1, 4, 5);
            _tile_dpbssd(2, 4, 5);
            _tile_dpbssd(3, 4, 5);
        }
        macs += 10000.0 * 4 * 16 * 16 * k;
    }
    _tile_stored(0, c, 64);
    _tile_release();
    *sink = c[0];
    return macs / (now() - t0);
}

typedef struct {
    const char *kind;
    double seconds, rate;
    int sink;
} job;

static void *work(void *p) {
    job *j = p;
    if (!strcmp(j->kind, "zmm")) j->rate = run_zmm(j->seconds, &j->sink);
    else if (!strcmp(j->kind, "ymm")) j->rate = run_ymm(j->seconds, &j->sink);
    else j->rate = run_amx(!strcmp(j->kind, "amx64") ? 64 : 32, j->seconds, &j->sink);
    return NULL;
}

int main(int argc, char **argv) {
    __builtin_cpu_init();
    const char *vnni = __builtin_cpu_supports("avx512vnni") ? "zmm" : __builtin_cpu_supports("avxvnni") ? "ymm" : NULL;
    if (argc == 2 && !strcmp(argv[1], "which")) {
        puts(vnni ? vnni : "none");
        return vnni ? 0 : 1;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: int8_peak vnni|amx32|amx64|which THREADS SECONDS\n");
        return 2;
    }
    const char *kind = argv[1];
    if (!strcmp(kind, "vnni")) {
        if (!vnni) {
            fprintf(stderr, "int8_peak: this CPU has neither AVX-512 VNNI nor AVX-VNNI\n");
            return 1;
        }
        kind = vnni;
    } else if (strcmp(kind, "amx32") && strcmp(kind, "amx64")) {
        fprintf(stderr, "int8_peak: unknown kind %s (vnni, amx32, amx64, which)\n", kind);
        return 2;
    } else if (!__builtin_cpu_supports("amx-int8")) {
        fprintf(stderr, "int8_peak: this CPU has no AMX-INT8\n");
        return 1;
    }
    int threads = atoi(argv[2]);
    double seconds = atof(argv[3]);
    if (threads < 1 || threads > 256 || !(seconds > 0)) {
        fprintf(stderr, "int8_peak: THREADS in 1..256, SECONDS > 0\n");
        return 2;
    }
    job jobs[256];
    pthread_t tids[256];
    for (int i = 0; i < threads; i++) {
        jobs[i] = (job){kind, seconds, 0, 0};
        pthread_create(&tids[i], NULL, work, &jobs[i]);
    }
    double sum = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tids[i], NULL);
        if (jobs[i].rate < 0) {
            fprintf(stderr, "int8_peak: the kernel refused the AMX tile state (arch_prctl)\n");
            return 1;
        }
        sum += jobs[i].rate;
    }
    printf("int8_peak %s %s %d %.1f\n", argv[1], kind, threads, sum / threads / 1e9);
    return 0;
}
