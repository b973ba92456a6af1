/* Matrix multiply (see gemm.h). */
#include "gemm.h"

#include <cblas.h>
#include <string.h>

#include "gemm_kernels.h"

/* Declared by OpenBLAS's cblas.h as well; repeated in case a cblas.h without it is found. */
void openblas_set_num_threads(int num_threads);
/* OpenBLAS's pthreads build: stops its server threads (it starts them again only for a
 * multi-threaded call). Weak: other builds and other BLAS libraries lack it. */
int blas_thread_shutdown_(void) __attribute__((weak));

void dt_gemm_setup(void)
{
    static int done;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
        return;
    /* dtrain splits GEMMs over its own pool and calls OpenBLAS on one thread each, so
     * OpenBLAS's own threads (one per core, started when the library loads) only poll: they
     * call sched_yield in a loop, for a while after load and again now and then. On an idle
     * core that costs nothing; with a worker process on every core it takes their time. */
    openblas_set_num_threads(1);
    if (blas_thread_shutdown_)
        blas_thread_shutdown_();
}

static void gemm_blas(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* One task per thread, as always: OpenBLAS's blocking, and so its rounding, depends on the
 * sizes it is given, and the shares must stay what they were for results to stay the same. */
const dt_gemm_kernel dt_gemm_kernel_blas = {"blas", DT_CPU_N_FEATURES, gemm_blas, 1, 1, 1, 0, 0};

/* Fastest first: the first this CPU runs is the default. */
static const dt_gemm_kernel *const kernels[] = {
#if DT_X86
    &dt_gemm_kernel_avx512,
#endif
    &dt_gemm_kernel_blas};
enum { N_KERNELS = sizeof kernels / sizeof kernels[0] };

static const dt_gemm_kernel *chosen;

static bool runs_here(const dt_gemm_kernel *k)
{
    return k->needs == DT_CPU_N_FEATURES || dt_cpu_has(k->needs);
}

static const dt_gemm_kernel *kernel(void)
{
    const dt_gemm_kernel *k = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
    if (k)
        return k;
    for (int i = 0; i < N_KERNELS && !k; i++)
        if (runs_here(kernels[i]))
            k = kernels[i];
    /* Two first calls at once pick the same one. */
    __atomic_store_n(&chosen, k, __ATOMIC_RELEASE);
    return k;
}

const char *dt_gemm_kernel_name(void) { return kernel()->name; }

dt_status dt_gemm_use(const char *name)
{
    if (strcmp(name, "auto") == 0) {
        __atomic_store_n(&chosen, NULL, __ATOMIC_RELEASE);
        (void)kernel();
        return DT_OK;
    }
    for (int i = 0; i < N_KERNELS; i++) {
        if (strcmp(kernels[i]->name, name) != 0)
            continue;
        if (!runs_here(kernels[i]))
            return dt_error(DT_ERR_UNSUPPORTED, "matrix-multiply kernel '%s': this CPU cannot "
                            "run it", name);
        __atomic_store_n(&chosen, kernels[i], __ATOMIC_RELEASE);
        return DT_OK;
    }
    return dt_error(DT_ERR_INVALID, "matrix-multiply kernel '%s': not one of auto, avx512, blas",
                    name);
}

bool dt_gemm_kernel_runs_here(const char *name)
{
    for (int i = 0; i < N_KERNELS; i++)
        if (strcmp(kernels[i]->name, name) == 0)
            return runs_here(kernels[i]);
    return false;
}

struct gemm_job {
    const dt_gemm_kernel *k;
    bool ta, tb, split_rows;
    int M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
};

/* Task `task`'s share [lo, hi) of n rows (or columns) cut in whole units of `unit`. */
static void unit_slice(long n, int unit, int task, int n_tasks, long *lo, long *hi)
{
    dt_pool_slice((n + unit - 1) / unit, task, n_tasks, lo, hi);
    *lo *= unit;
    *hi = *hi * unit < n ? *hi * unit : n;
}

/* The kernel's unit of rows for a product N columns wide. */
static int row_unit_of(const dt_gemm_kernel *k, int N)
{
    return k->narrow_row_unit > 0 && N <= k->narrow_cols ? k->narrow_row_unit : k->row_unit;
}

static void gemm_task(void *ctx, int task, int n_tasks)
{
    const struct gemm_job *j = ctx;
    long lo, hi;
    if (j->split_rows) {
        unit_slice(j->M, row_unit_of(j->k, j->N), task, n_tasks, &lo, &hi);
        if (hi <= lo)
            return;
        const float *A = j->ta ? j->A + lo : j->A + lo * j->lda;
        j->k->fn(j->ta, j->tb, (int)(hi - lo), j->N, j->K, j->alpha, A, j->lda, j->B, j->ldb,
                 j->beta, j->C + lo * j->ldc, j->ldc);
    } else {
        unit_slice(j->N, j->k->col_unit, task, n_tasks, &lo, &hi);
        if (hi <= lo)
            return;
        const float *B = j->tb ? j->B + lo * j->ldb : j->B + lo;
        j->k->fn(j->ta, j->tb, j->M, (int)(hi - lo), j->K, j->alpha, j->A, j->lda, B, j->ldb,
                 j->beta, j->C + lo, j->ldc);
    }
}

void dt_gemm(dt_pool *pool, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
             int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    int threads = dt_pool_size(pool);
    const dt_gemm_kernel *k = kernel();
    double macs = (double)M * N * K;
    /* Below about a million multiply-adds the hand-off costs more than the second core gives. */
    if (threads == 1 || macs < 1e6) {
        k->fn(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* Several tasks per thread where the kernel allows it, each of at least half a million
     * multiply-adds: a thread the scheduler takes away for a while (the input thread needs a
     * core now and then) leaves its remaining tasks to the others. */
    bool split_rows = M >= N;
    int row_unit = row_unit_of(k, N);
    long units = split_rows ? (M + row_unit - 1) / row_unit
                            : (N + k->col_unit - 1) / k->col_unit;
    long n_tasks = (long)threads * k->tasks_per_thread;
    if (k->tasks_per_thread > 1 && n_tasks > (long)(macs / 5e5))
        n_tasks = (long)(macs / 5e5);
    n_tasks = n_tasks > units ? units : n_tasks < threads ? threads : n_tasks;
    struct gemm_job j = {k, ta, tb, split_rows, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C};
    dt_pool_run(pool, gemm_task, &j, (int)n_tasks);
}

void dt_gemm_naive(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc)
{
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double acc = 0.0;
            for (int k = 0; k < K; k++) {
                float a = ta ? A[(long)k * lda + m] : A[(long)m * lda + k];
                float b = tb ? B[(long)n * ldb + k] : B[(long)k * ldb + n];
                acc += (double)a * b;
            }
            float *c = &C[(long)m * ldc + n];
            *c = (float)(alpha * acc + (beta == 0.0f ? 0.0 : (double)beta * *c));
        }
    }
}
