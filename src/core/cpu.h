/* What this CPU can run, asked once per feature and cached: the one place the library checks
 * before it runs code built for an instruction set beyond the baseline (internal to the
 * library). */
#ifndef DTRAIN_CORE_CPU_H
#define DTRAIN_CORE_CPU_H

#include <stdbool.h>

typedef enum {
    DT_CPU_SSE42,     /* the crc32 instruction */
    DT_CPU_AVX2,
    DT_CPU_AVX2_FMA,  /* AVX2 and FMA3 */
    DT_CPU_FAST_PEXT, /* AVX2 and BMI2 with a pext that is not microcoded (AMD families 15h and
                         17h run it in tens of cycles) */
    DT_CPU_AVX512F,   /* AVX-512 Foundation, its register state enabled by the OS */
    DT_CPU_N_FEATURES
} dt_cpu_feature;

/* False on any CPU but x86-64, and for a feature out of range. Thread-safe. */
bool dt_cpu_has(dt_cpu_feature f);

/* x86-64 with GCC's or Clang's intrinsics: where the AVX2 and AVX-512 kernels are built at all
 * (the Makefile leaves their files out elsewhere). */
#if defined(__x86_64__) && defined(__GNUC__)
#define DT_X86 1
#else
#define DT_X86 0
#endif

/* Before a function: GCC compiles it for AVX-512, AVX2 and the baseline, and the loader picks
 * one for the CPU (target_clones, resolved once). For loops over floats whose every element's
 * result is the same whatever the vector width: no reassociation, and no FMA contraction
 * (-std=c11 keeps GCC from contracting), so every clone gives the same bits. */
/* Not under ThreadSanitizer, whose instrumented resolvers would run before it starts. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define DT_MULTI_ISA __attribute__((target_clones("avx512f", "avx2", "default")))
#define DT_MULTI_ISA_HIDE(name) __asm__(".hidden " #name "\n\t.hidden " #name ".resolver");
#else
#define DT_MULTI_ISA
#define DT_MULTI_ISA_HIDE(name)
#endif
/* After a DT_MULTI_ISA function that is not static: GCC 12 gives the symbol it dispatches through
 * (an ifunc) and its resolver default visibility whatever -fvisibility or the function's own
 * visibility attribute say, so libdtrain.so would export the kernel. This tells the assembler
 * to hide both, as -fvisibility=hidden hides the library's other internal functions; a static
 * link still finds them. Written without a ';' after it. */

#endif
