/* CPU features, cached (see cpu.h). */
#include "cpu.h"

/* -1: not asked yet. Two threads asking at once both compute the same answer. */
static int cached[DT_CPU_N_FEATURES] = {-1, -1, -1, -1, -1};

static bool ask(dt_cpu_feature f)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    switch (f) {
    case DT_CPU_SSE42:
        return __builtin_cpu_supports("sse4.2");
    case DT_CPU_AVX2:
        return __builtin_cpu_supports("avx2");
    case DT_CPU_AVX2_FMA:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case DT_CPU_FAST_PEXT:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2") &&
               !__builtin_cpu_is("amdfam15h") && !__builtin_cpu_is("amdfam17h");
    case DT_CPU_AVX512F:
        /* libgcc's answer includes the OS check (XCR0 enables the zmm and mask state). */
        return __builtin_cpu_supports("avx512f");
    default:
        return false;
    }
#else
    (void)f;
    return false;
#endif
}

bool dt_cpu_has(dt_cpu_feature f)
{
    if ((unsigned)f >= DT_CPU_N_FEATURES)
        return false;
    int v = __atomic_load_n(&cached[f], __ATOMIC_RELAXED);
    if (v < 0) {
        v = ask(f) ? 1 : 0;
        __atomic_store_n(&cached[f], v, __ATOMIC_RELAXED);
    }
    return v == 1;
}
