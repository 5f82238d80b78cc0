/*
 * cpu_features.h — what the CPU and the OS let the native kernel sets use, asked directly:
 * cpuid and XGETBV on x86-64 (an instruction set counts only when the OS also saves its
 * registers), getauxval(AT_HWCAP) on Linux ARM64. Compiler builtins such as
 * __builtin_cpu_supports are avoided: not every toolchain (zig's compiler-rt) provides them, and
 * older ones do not know AVX-VNNI.
 */
#ifndef EMB_CPU_FEATURES_H
#define EMB_CPU_FEATURES_H

#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>

#define EMB_X86_AVX2 (1u << 0)
#define EMB_X86_AVX512 (1u << 1)      /* F, BW, VL and DQ */
#define EMB_X86_AVX512VNNI (1u << 2)
#define EMB_X86_AVXVNNI (1u << 3)

static inline unsigned emb_x86_features(void) {
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx) return 0;
    uint32_t lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    uint64_t xcr0 = ((uint64_t)hi << 32) | lo;
    if ((xcr0 & 0x6) != 0x6) return 0;  /* the OS saves SSE and AVX state */
    unsigned b7 = 0, c7 = 0, a71 = 0, unused;
    if (__get_cpuid_count(7, 0, &a, &b7, &c7, &d)) {
        __get_cpuid_count(7, 1, &a71, &unused, &unused, &unused);
    }
    if ((b7 >> 5) & 1) f |= EMB_X86_AVX2;
    int avx512 = ((b7 >> 16) & 1) && ((b7 >> 17) & 1) && ((b7 >> 30) & 1) && ((b7 >> 31) & 1);
    if (avx512 && (xcr0 & 0xE6) == 0xE6) {  /* and opmask, ZMM0-15 upper halves, ZMM16-31 */
        f |= EMB_X86_AVX512;
        if ((c7 >> 11) & 1) f |= EMB_X86_AVX512VNNI;
    }
    if ((f & EMB_X86_AVX2) && ((a71 >> 4) & 1)) f |= EMB_X86_AVXVNNI;
    return f;
}
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>

#define EMB_ARM64_HWCAP_ASIMD (1ul << 1)
#define EMB_ARM64_HWCAP_ASIMDDP (1ul << 20)  /* sdot / udot */

static inline unsigned long emb_arm64_hwcap(void) { return getauxval(AT_HWCAP); }
#endif

#endif /* EMB_CPU_FEATURES_H */
