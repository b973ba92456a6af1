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

#endif
