/* Fast kernels against their naive references, at odd sizes, on one and several threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/nn/convpool.h"
#include "../src/nn/dense_sparse.h"
#include "../src/nn/gemm.h"
#include "../src/nn/nn.h"
#include "dtrain/rng.h"
#include "test.h"

static float *random_floats(dt_rng *r, size_t n, float lo, float hi)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * dt_rng_uniform(r);
    return p;
}

static float *copy_floats(const float *src, size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    memcpy(p, src, n * sizeof *p);
    return p;
}

/* Largest |a - b| over n, relative to max(1, |b|). */
static double max_rel_diff(const float *a, const float *b, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(1.0, fabs(b[i]));
        if (d > worst || d != d)
            worst = d != d ? INFINITY : d;
    }
    return worst;
}

static dt_pool *pool_of(int threads)
{
    dt_pool *p = NULL;
    if (dt_pool_create(threads, &p) != DT_OK)
        abort();
    return p;
}

static const char *const gemm_kernels[] = {"avx512", "blas"};

/* Every kernel this CPU runs, against the reference: every transpose, leading dimensions wider
 * than the matrices, sizes around the AVX-512 kernel's tiles and 192-deep k blocks, K = 0
 * (C = beta C), and beta = 0 over a C of NaNs (C is not read then). */
TEST(gemm_matches_reference_in_every_layout)
{
    static const int sizes[][3] = {{1, 1, 1},   {7, 13, 5},    {33, 17, 65},  {64, 300, 9},
                                   {130, 3, 40}, {6, 64, 192}, {13, 129, 200}, {5, 65, 385},
                                   {100, 1, 32}, {12, 128, 0}};
    dt_rng r;
    dt_rng_seed(&r, 1);
    dt_gemm_setup();
    dt_pool *pool = pool_of(2);
    int kernels_run = 0;
    for (size_t g = 0; g < sizeof gemm_kernels / sizeof gemm_kernels[0]; g++) {
        if (!dt_gemm_kernel_runs_here(gemm_kernels[g])) {
            CHECK_ERR(dt_gemm_use(gemm_kernels[g]), DT_ERR_UNSUPPORTED, "cannot run it");
            continue;
        }
        CHECK_OK(dt_gemm_use(gemm_kernels[g]));
        kernels_run++;
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++)
                    for (int v = 0; v < 3; v++) {
                        int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
                        int threads = v == 1 ? 2 : 1;
                        float beta = v == 2 ? 0.0f : 0.25f;
                        int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
                        float *A = random_floats(&r, (size_t)(ta ? K : M) * lda, -1, 1);
                        float *B = random_floats(&r, (size_t)(tb ? N : K) * ldb, -1, 1);
                        float *C = random_floats(&r, (size_t)M * ldc, -1, 1);
                        float *C_ref = copy_floats(C, (size_t)M * ldc);
                        if (beta == 0.0f)
                            for (int i = 0; i < M; i++)
                                for (int j = 0; j < N; j++)
                                    C[(size_t)i * ldc + j] = NAN;
                        dt_gemm(threads == 2 ? pool : NULL, ta, tb, M, N, K, 0.5f, A, lda, B, ldb,
                                beta, C, ldc);
                        dt_gemm_naive(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, beta, C_ref, ldc);
                        double d = max_rel_diff(C, C_ref, (size_t)M * ldc);
                        CHECK_MSG(d < 1e-5, "%s: M=%d N=%d K=%d ta=%d tb=%d threads=%d beta=%g: "
                                  "diff %g", gemm_kernels[g], M, N, K, ta, tb, threads,
                                  (double)beta, d);
                        free(A), free(B), free(C), free(C_ref);
                    }
    }
    CHECK(kernels_run >= 1);
    CHECK_OK(dt_gemm_use("auto"));
    CHECK_ERR(dt_gemm_use("sse"), DT_ERR_INVALID, "not one of auto, avx512, blas");
    dt_pool_destroy(pool);
}

/* dtrain's kernel gives a column of C the same bits however many columns the product has: a
 * narrow product (tiles 12 x 32 or 24 x 16) equals the first columns of a product 64 + wide
 * (tiles 6 x 64), in every layout, with row counts off every tile height, K across two k blocks,
 * and split over 2 threads. */
TEST(gemm_narrow_products_have_the_wide_products_bits)
{
    if (!dt_gemm_kernel_runs_here("avx512")) {
        CHECK_ERR(dt_gemm_use("avx512"), DT_ERR_UNSUPPORTED, "cannot run it");
        return;
    }
    static const int narrow[] = {1, 5, 16, 17, 31, 32};
    static const int rows[] = {1, 11, 25, 100, 401}; /* 401: the narrow products split too */
    dt_rng r;
    dt_rng_seed(&r, 7);
    dt_pool *pool = pool_of(2);
    CHECK_OK(dt_gemm_use("avx512"));
    for (size_t a = 0; a < sizeof narrow / sizeof narrow[0]; a++)
        for (size_t b = 0; b < sizeof rows / sizeof rows[0]; b++)
            for (int t = 0; t < 8; t++) {
                bool ta = t & 1, tb = t & 2, threads2 = t & 4;
                int n = narrow[a], M = rows[b], K = 200, W = 64 + n;
                int lda = ta ? M : K, ldb = tb ? K : W;
                float *A = random_floats(&r, (size_t)(ta ? K : M) * lda, -1, 1);
                float *B = random_floats(&r, (size_t)(tb ? W : K) * ldb, -1, 1);
                float *wide = random_floats(&r, (size_t)M * W, -1, 1);
                float *thin = malloc((size_t)M * n * sizeof *thin);
                for (int i = 0; i < M; i++)
                    memcpy(thin + (size_t)i * n, wide + (size_t)i * W, (size_t)n * sizeof *thin);
                dt_pool *p = threads2 ? pool : NULL;
                dt_gemm(p, ta, tb, M, W, K, 0.5f, A, lda, B, ldb, 0.25f, wide, W);
                dt_gemm(p, ta, tb, M, n, K, 0.5f, A, lda, B, ldb, 0.25f, thin, n);
                bool same = true;
                for (int i = 0; i < M; i++)
                    same = same && memcmp(thin + (size_t)i * n, wide + (size_t)i * W,
                                          (size_t)n * sizeof *thin) == 0;
                CHECK_MSG(same, "N=%d of %d, M=%d, ta=%d tb=%d threads=%d: other bits", n, W, M,
                          ta, tb, threads2 ? 2 : 1);
                free(A), free(B), free(wide), free(thin);
            }
    CHECK_OK(dt_gemm_use("auto"));
    dt_pool_destroy(pool);
}

/* A product of 1, 2 or 3 rows (one example's forward, read without packing) gives the bits those
 * rows get inside a taller product, in every layout, with K past one block. */
TEST(gemm_few_rows_have_the_tall_products_bits)
{
    if (!dt_gemm_kernel_runs_here("avx512")) {
        CHECK_ERR(dt_gemm_use("avx512"), DT_ERR_UNSUPPORTED, "cannot run it");
        return;
    }
    enum { TALL = 40 };
    static const int cols[] = {1, 17, 64, 100, 128};
    static const int ks[] = {5, 192, 1248};
    dt_rng r;
    dt_rng_seed(&r, 8);
    CHECK_OK(dt_gemm_use("avx512"));
    for (size_t a = 0; a < sizeof cols / sizeof cols[0]; a++)
        for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++)
            for (int t = 0; t < 4; t++)
                for (int M = 1; M <= 3; M++) {
                    bool ta = t & 1, tb = t & 2;
                    int N = cols[a], K = ks[b];
                    int lda = ta ? TALL : K, ldb = tb ? K : N;
                    float *A = random_floats(&r, (size_t)(ta ? K : TALL) * lda, -1, 1);
                    float *B = random_floats(&r, (size_t)(tb ? N : K) * ldb, -1, 1);
                    float *tall = random_floats(&r, (size_t)TALL * N, -1, 1);
                    float *few = malloc((size_t)M * N * sizeof *few);
                    memcpy(few, tall, (size_t)M * N * sizeof *few);
                    dt_gemm(NULL, ta, tb, TALL, N, K, 0.5f, A, lda, B, ldb, 0.25f, tall, N);
                    /* The first M rows of op(A): the same pointer and lda either way. */
                    dt_gemm(NULL, ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.25f, few, N);
                    CHECK_MSG(memcmp(few, tall, (size_t)M * N * sizeof *few) == 0,
                              "M=%d N=%d K=%d ta=%d tb=%d: other bits", M, N, K, ta, tb);
                    free(A), free(B), free(tall), free(few);
                }
    CHECK_OK(dt_gemm_use("auto"));
}

/* The default is dtrain's own kernel wherever the CPU has AVX-512F, OpenBLAS elsewhere. */
TEST(gemm_default_kernel_follows_the_cpu)
{
    CHECK_OK(dt_gemm_use("auto"));
    const char *want = dt_gemm_kernel_runs_here("avx512") ? "avx512" : "blas";
    CHECK_MSG(strcmp(dt_gemm_kernel_name(), want) == 0, "default kernel %s, expected %s",
              dt_gemm_kernel_name(), want);
    CHECK(dt_gemm_kernel_runs_here("blas"));
    CHECK(!dt_gemm_kernel_runs_here("nope"));
}

TEST(gemm_large_split_over_threads_matches_one_thread)
{
    /* The tutorial's and DeepFM's dense layer shapes, big enough that dt_gemm really splits
     * the work (over rows, or over columns when N > M). dtrain's own kernel gives the same
     * bits however the product is split; OpenBLAS's blocking depends on the sizes it is given. */
    static const int shapes[][5] = {
        {0, 0, 64, 64, 5408}, {0, 0, 1024, 128, 1248}, {1, 0, 1248, 128, 1024}, {0, 1, 1024, 1248, 128}};
    dt_rng r;
    dt_rng_seed(&r, 2);
    dt_pool *pool = pool_of(2);
    for (size_t g = 0; g < sizeof gemm_kernels / sizeof gemm_kernels[0]; g++) {
        if (dt_gemm_use(gemm_kernels[g]) != DT_OK)
            continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            bool ta = shapes[s][0], tb = shapes[s][1];
            int M = shapes[s][2], N = shapes[s][3], K = shapes[s][4];
            int lda = ta ? M : K, ldb = tb ? K : N;
            float *A = random_floats(&r, (size_t)M * K, -1, 1);
            float *B = random_floats(&r, (size_t)K * N, -1, 1);
            float *C1 = calloc((size_t)M * N, sizeof *C1), *C2 = calloc((size_t)M * N, sizeof *C2);
            float *C_ref = calloc((size_t)M * N, sizeof *C_ref);
            dt_gemm(NULL, ta, tb, M, N, K, 1, A, lda, B, ldb, 0, C1, N);
            dt_gemm(pool, ta, tb, M, N, K, 1, A, lda, B, ldb, 0, C2, N);
            dt_gemm_naive(ta, tb, M, N, K, 1, A, lda, B, ldb, 0, C_ref, N);
            CHECK_MSG(max_rel_diff(C1, C_ref, (size_t)M * N) < 1e-4, "%s shape %zu",
                      gemm_kernels[g], s);
            CHECK_MSG(max_rel_diff(C2, C_ref, (size_t)M * N) < 1e-4, "%s shape %zu",
                      gemm_kernels[g], s);
            if (strcmp(gemm_kernels[g], "avx512") == 0)
                CHECK_MSG(memcmp(C1, C2, (size_t)M * N * sizeof *C1) == 0,
                          "avx512: shape %zu differs between 1 and 2 threads", s);
            free(A), free(B), free(C1), free(C2), free(C_ref);
        }
    }
    CHECK_OK(dt_gemm_use("auto"));
    dt_pool_destroy(pool);
}

TEST(dense_matches_reference)
{
    dt_rng r;
    dt_rng_seed(&r, 3);
    dt_pool *pool = pool_of(2);
    int B = 5, IN = 13, OUT = 7;
    float *x = random_floats(&r, (size_t)B * IN, -1, 1), *w = random_floats(&r, (size_t)IN * OUT, -1, 1);
    float *b = random_floats(&r, OUT, -1, 1), *dy = random_floats(&r, (size_t)B * OUT, -1, 1);
    float y[35], y_ref[35], dx[65], dx_ref[65];
    float *dw = random_floats(&r, (size_t)IN * OUT, -1, 1), *dw_ref = copy_floats(dw, (size_t)IN * OUT);
    float *db = random_floats(&r, OUT, -1, 1), *db_ref = copy_floats(db, OUT);
    dt_dense_forward(pool, B, IN, OUT, x, w, b, y);
    dt_dense_forward_naive(B, IN, OUT, x, w, b, y_ref);
    dt_dense_backward(pool, B, IN, OUT, x, w, dy, dw, db, dx);
    dt_dense_backward_naive(B, IN, OUT, x, w, dy, dw_ref, db_ref, dx_ref);
    CHECK(max_rel_diff(y, y_ref, 35) < 1e-5);
    CHECK(max_rel_diff(dx, dx_ref, 65) < 1e-5);
    CHECK(max_rel_diff(dw, dw_ref, (size_t)IN * OUT) < 1e-5); /* accumulated onto random values */
    CHECK(max_rel_diff(db, db_ref, OUT) < 1e-5);
    free(x), free(w), free(b), free(dy), free(dw), free(dw_ref), free(db), free(db_ref);
    dt_pool_destroy(pool);
}

/* A gradient like ReLU's and dropout's: about `density` of it non-zero, with a zero row and a
 * zero column, and a NaN when asked (it must reach dw and dx as the dense products carry it). */
static float *sparse_dy(dt_rng *r, int B, int OUT, double density, bool nan)
{
    float *dy = malloc((size_t)B * OUT * sizeof *dy);
    for (size_t i = 0; i < (size_t)B * OUT; i++)
        dy[i] = dt_rng_uniform(r) < density ? 2.0f * (float)dt_rng_uniform(r) - 1.0f : 0.0f;
    for (int j = 0; j < OUT; j++)
        dy[(size_t)(B / 2) * OUT + j] = 0.0f;
    for (int b = 0; b < B; b++)
        dy[(size_t)b * OUT + OUT / 2] = 0.0f;
    if (nan)
        dy[OUT - 1] = NAN;
    return dy;
}

/* With dy[0][OUT - 1] NaN: dx's row 0, dw's column OUT - 1 and db[OUT - 1] are NaN; they are
 * zeroed then, for the rest to be compared. */
static bool nan_where_dy_was(int IN, int OUT, float *dx, float *dw, float *db)
{
    bool all = isnan(db[OUT - 1]);
    db[OUT - 1] = 0.0f;
    for (int i = 0; i < IN; i++) {
        all = all && isnan(dx[i]) && isnan(dw[(size_t)i * OUT + OUT - 1]);
        dx[i] = dw[(size_t)i * OUT + OUT - 1] = 0.0f;
    }
    return all;
}

static int sparse_chunks_run;
static void dx_counted(const dt_sparse_dy *s, const float *wt, int i0, int nc, float *dx)
{
    __atomic_fetch_add(&sparse_chunks_run, 1, __ATOMIC_RELAXED);
    dt_sparse_kernels_portable.dx(s, wt, i0, nc, dx);
}
static void dw_counted(const dt_sparse_dy *s, const float *x, int i0, int nc, float *dwt)
{
    __atomic_fetch_add(&sparse_chunks_run, 1, __ATOMIC_RELAXED);
    dt_sparse_kernels_portable.dw(s, x, i0, nc, dwt);
}
static long list_rows_counted(const dt_sparse_dy *s, const float *dy, long lo, long hi)
{
    return dt_sparse_kernels_portable.list_rows(s, dy, lo, hi);
}
static void list_cols_counted(const dt_sparse_dy *s, const float *dy, long lo, long hi, float *db)
{
    dt_sparse_kernels_portable.list_cols(s, dy, lo, hi, db);
}
static void transpose_portable(const float *w, int OUT, int i0, int nc, float *wt)
{
    dt_sparse_kernels_portable.transpose(w, OUT, i0, nc, wt);
}
static void add_transposed_portable(const float *dwt, int OUT, int i0, int nc, float *dw)
{
    dt_sparse_kernels_portable.add_transposed(dwt, OUT, i0, nc, dw);
}

/* The portable kernels, counting their calls: whether a product went through the lists. */
static const dt_sparse_kernels counted = {"counted",          list_rows_counted,
                                          list_cols_counted,  dx_counted,
                                          dw_counted,         transpose_portable,
                                          add_transposed_portable};

static bool same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* Over dy's non-zeros: the reference's values, at sizes off the 64-input chunks and 128-example
 * blocks, with an odd count of entries per row, and a dx large enough to be streamed; the same
 * bits from the portable and AVX-512 kernels on 1 and 3 threads, and the dense products' bias
 * gradient. Over a third of dy non-zero,
 * or fewer than 256 inputs, the products stay dense: dt_dense_backward's bits. */
TEST(dense_backward_over_nonzeros_matches_reference)
{
    static const struct {
        int B, IN, OUT;
        double density;
        bool nan, dense;
    } cases[] = {
        {1, 256, 3, 0.3, false, false},    {200, 300, 7, 0.25, false, false},
        {129, 1248, 128, 0.29, false, false}, {300, 257, 33, 0.05, true, false},
        {64, 320, 16, 0.0, false, false},  {50, 256, 20, 0.45, false, true},
        {40, 255, 20, 0.2, false, true},
        {450, 1248, 40, 0.29, false, false}, /* dx of 2.2 MB: streamed (DX_STREAM_BYTES) */
    };
    dt_rng r;
    dt_rng_seed(&r, 12);
    bool has_avx512 = dt_gemm_kernel_runs_here("avx512");
    CHECK_OK(dt_gemm_use("auto"));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int B = cases[c].B, IN = cases[c].IN, OUT = cases[c].OUT;
        size_t nx = (size_t)B * IN, nw = (size_t)IN * OUT;
        float *x = random_floats(&r, nx, -1, 1), *w = random_floats(&r, nw, -1, 1);
        float *dy = sparse_dy(&r, B, OUT, cases[c].density, cases[c].nan);
        float *dw0 = random_floats(&r, nw, -1, 1), *db0 = random_floats(&r, OUT, -1, 1);
        float *dw_ref = copy_floats(dw0, nw), *db_ref = copy_floats(db0, OUT);
        float *dx_ref = malloc(nx * sizeof *dx_ref);
        dt_dense_backward_naive(B, IN, OUT, x, w, dy, dw_ref, db_ref, dx_ref);
        if (cases[c].nan)
            CHECK(nan_where_dy_was(IN, OUT, dx_ref, dw_ref, db_ref));
        float *dw_dense = copy_floats(dw0, nw), *db_dense = copy_floats(db0, OUT);
        float *dx_dense = malloc(nx * sizeof *dx_dense);
        dt_dense_backward(NULL, B, IN, OUT, x, w, dy, dw_dense, db_dense, dx_dense);
        float *dw_first = NULL, *dx_first = NULL;
        for (int t = 1; t <= 3; t += 2)
            for (int k = 0; k < 3; k++) {
                if (k == 2 && !has_avx512)
                    continue;
                const dt_sparse_kernels *kern = k == 0   ? &counted
                                                : k == 1 ? &dt_sparse_kernels_portable
                                                         : &dt_sparse_kernels_avx512;
                dt_pool *pool = pool_of(t);
                size_t ns = dt_dense_sparse_scratch_elems(B, IN, OUT, t);
                float *scratch = aligned_alloc(64, (ns + 16) / 16 * 64);
                float *dw = copy_floats(dw0, nw), *db = copy_floats(db0, OUT);
                /* Aligned as the model's buffers are, so that whole chunks of dx can stream. */
                float *dx = aligned_alloc(64, (nx + 15) / 16 * 64);
                sparse_chunks_run = 0;
                if (k == 2)
                    dt_dense_backward_sparse(pool, B, IN, OUT, x, w, dy, dw, db, dx, scratch);
                else if (ns == 0)
                    dt_dense_backward(pool, B, IN, OUT, x, w, dy, dw, db, dx);
                else
                    dt_dense_backward_sparse_with(kern, pool, B, IN, OUT, x, w, dy, dw, db, dx,
                                                  scratch);
                if (k > 0 && ns > 0) { /* without dx: the same dw */
                    float *dw2 = copy_floats(dw0, nw), *db2 = copy_floats(db0, OUT);
                    if (k == 2)
                        dt_dense_backward_sparse(pool, B, IN, OUT, x, w, dy, dw2, db2, NULL,
                                                 scratch);
                    else
                        dt_dense_backward_sparse_with(kern, pool, B, IN, OUT, x, w, dy, dw2, db2,
                                                      NULL, scratch);
                    CHECK_MSG(same_bits(dw2, dw, nw), "case %zu kernel %d: dw without dx", c, k);
                    free(dw2), free(db2);
                }
                if (k == 0)
                    CHECK_MSG((sparse_chunks_run == 0) == cases[c].dense,
                              "case %zu: %d chunks through the lists", c, sparse_chunks_run);
                if (cases[c].nan) {
                    CHECK_MSG(nan_where_dy_was(IN, OUT, dx, dw, db),
                              "case %zu: the NaN did not reach the gradients", c);
                } else {
                    CHECK_MSG(same_bits(db, db_dense, OUT), "case %zu: db", c);
                }
                CHECK_MSG(max_rel_diff(dx, dx_ref, nx) < 1e-5, "case %zu kernel %d", c, k);
                CHECK_MSG(max_rel_diff(dw, dw_ref, nw) < 1e-5, "case %zu kernel %d", c, k);
                CHECK_MSG(cases[c].nan || max_rel_diff(db, db_ref, OUT) < 1e-5, "case %zu", c);
                if (cases[c].dense)
                    CHECK_MSG(same_bits(dw, dw_dense, nw) && same_bits(dx, dx_dense, nx),
                              "case %zu: not the dense products' bits", c);
                if (!dw_first) {
                    dw_first = copy_floats(dw, nw), dx_first = copy_floats(dx, nx);
                } else {
                    CHECK_MSG(same_bits(dw, dw_first, nw) && same_bits(dx, dx_first, nx),
                              "case %zu: kernel %d on %d threads changed the bits", c, k, t);
                }
                free(dw), free(db), free(dx), free(scratch);
                dt_pool_destroy(pool);
            }
        free(x), free(w), free(dy), free(dw0), free(db0), free(dw_ref), free(db_ref), free(dx_ref);
        free(dw_dense), free(db_dense), free(dx_dense), free(dw_first), free(dx_first);
    }
}

/* Without scratch, or with OpenBLAS as the matrix multiply, it is dt_dense_backward. */
TEST(dense_backward_over_nonzeros_needs_scratch_and_dtrains_kernel)
{
    dt_rng r;
    dt_rng_seed(&r, 13);
    int B = 70, IN = 300, OUT = 24;
    size_t nx = (size_t)B * IN, nw = (size_t)IN * OUT;
    float *x = random_floats(&r, nx, -1, 1), *w = random_floats(&r, nw, -1, 1);
    float *dy = sparse_dy(&r, B, OUT, 0.3, false);
    float *dw_dense = calloc(nw, 4), *db_dense = calloc(OUT, 4), *dx_dense = malloc(nx * 4);
    dt_dense_backward(NULL, B, IN, OUT, x, w, dy, dw_dense, db_dense, dx_dense);
    float *scratch = aligned_alloc(64, (dt_dense_sparse_scratch_elems(B, IN, OUT, 1) + 16) / 16 * 64);
    for (int v = 0; v < 2; v++) {
        if (v == 1)
            CHECK_OK(dt_gemm_use("blas"));
        float *dw = calloc(nw, 4), *db = calloc(OUT, 4), *dx = malloc(nx * 4);
        dt_dense_backward_sparse(NULL, B, IN, OUT, x, w, dy, dw, db, dx, v == 0 ? NULL : scratch);
        if (v == 1) { /* OpenBLAS's dense products */
            float *dw2 = calloc(nw, 4), *db2 = calloc(OUT, 4), *dx2 = malloc(nx * 4);
            dt_dense_backward(NULL, B, IN, OUT, x, w, dy, dw2, db2, dx2);
            CHECK(same_bits(dw, dw2, nw) && same_bits(dx, dx2, nx) && same_bits(db, db2, OUT));
            free(dw2), free(db2), free(dx2);
        } else {
            CHECK(same_bits(dw, dw_dense, nw) && same_bits(dx, dx_dense, nx));
        }
        free(dw), free(db), free(dx);
    }
    CHECK_OK(dt_gemm_use("auto"));
    free(x), free(w), free(dy), free(dw_dense), free(db_dense), free(dx_dense), free(scratch);
}

struct conv_case {
    int H, W, C, KH, KW, OC, SH, SW;
    bool same;
};

TEST(conv2d_im2col_matches_reference)
{
    static const struct conv_case cases[] = {
        {28, 28, 1, 3, 3, 32, 1, 1, false}, {7, 6, 2, 3, 2, 3, 2, 1, true},
        {9, 11, 3, 5, 5, 4, 3, 2, true},    {5, 5, 4, 1, 1, 6, 1, 1, false},
        {6, 9, 2, 2, 4, 5, 2, 3, false},    {4, 4, 1, 4, 4, 2, 1, 1, true},
    };
    dt_rng r;
    dt_rng_seed(&r, 4);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int threads = 1; threads <= 3; threads += 2) {
            const struct conv_case *k = &cases[c];
            dt_conv_geom g;
            CHECK(dt_conv_geom_init(&g, k->H, k->W, k->C, k->KH, k->KW, k->OC, k->SH, k->SW, k->same));
            int B = 3;
            size_t nx = (size_t)B * k->H * k->W * k->C, ny = (size_t)B * g.OH * g.OW * k->OC;
            size_t nw = (size_t)k->KH * k->KW * k->C * k->OC;
            float *x = random_floats(&r, nx, -1, 1), *w = random_floats(&r, nw, -1, 1);
            float *b = random_floats(&r, k->OC, -1, 1), *dy = random_floats(&r, ny, -1, 1);
            float *y = malloc(ny * 4), *y_ref = malloc(ny * 4), *dx = malloc(nx * 4), *dx_ref = malloc(nx * 4);
            float *dw = calloc(nw, 4), *dw_ref = calloc(nw, 4), *db = calloc(k->OC, 4), *db_ref = calloc(k->OC, 4);
            dt_pool *pool = pool_of(threads);
            float *scratch = malloc(dt_conv2d_scratch_elems(&g, threads) * 4);
            dt_conv2d_forward(pool, &g, B, x, w, b, y, scratch);
            dt_conv2d_forward_naive(&g, B, x, w, b, y_ref);
            dt_conv2d_backward(pool, &g, B, x, w, dy, dw, db, dx, scratch);
            dt_conv2d_backward_naive(&g, B, x, w, dy, dw_ref, db_ref, dx_ref);
            CHECK_MSG(max_rel_diff(y, y_ref, ny) < 1e-5, "case %zu y", c);
            CHECK_MSG(max_rel_diff(dx, dx_ref, nx) < 1e-5, "case %zu dx", c);
            /* Weight and bias gradients sum B * OH * OW products in float: 1e-4 allows for it. */
            CHECK_MSG(max_rel_diff(dw, dw_ref, nw) < 1e-4, "case %zu dw: %g", c, max_rel_diff(dw, dw_ref, nw));
            CHECK_MSG(max_rel_diff(db, db_ref, k->OC) < 1e-4, "case %zu db: %g", c, max_rel_diff(db, db_ref, k->OC));
            free(x), free(w), free(b), free(dy), free(y), free(y_ref), free(dx), free(dx_ref);
            free(dw), free(dw_ref), free(db), free(db_ref), free(scratch);
            dt_pool_destroy(pool);
        }
}

TEST(conv_geometry_follows_tensorflow)
{
    dt_conv_geom g;
    CHECK(dt_conv_geom_init(&g, 28, 28, 1, 3, 3, 32, 1, 1, false) && g.OH == 26 && g.OW == 26);
    CHECK(dt_conv_geom_init(&g, 7, 8, 1, 3, 3, 1, 2, 3, true) && g.OH == 4 && g.OW == 3);
    /* same, in 7 stride 2 kernel 3: out 4, total padding (4-1)*2+3-7 = 2, one on top. */
    CHECK(g.pad_top == 1);
    /* in 8 stride 3 kernel 3: out 3, total padding 2*3+3-8 = 1, none on the left. */
    CHECK(g.pad_left == 0);
    CHECK(!dt_conv_geom_init(&g, 2, 2, 1, 3, 3, 1, 1, 1, false));
    dt_pool_geom p;
    CHECK(dt_pool_geom_init(&p, 26, 26, 32, 2, 2, 2, 2, false) && p.OH == 13 && p.OW == 13);
    CHECK(dt_pool_geom_init(&p, 5, 5, 1, 2, 2, 2, 2, true) && p.OH == 3 && p.OW == 3);
}

TEST(maxpool_picks_first_max_and_skips_padding)
{
    /* One example, 3x3 single channel, 2x2 pool stride 2 with same padding: output 2x2. */
    float x[9] = {1, 5, 2,
                  5, 0, -3,
                  -7, -1, -4};
    dt_pool_geom g;
    CHECK(dt_pool_geom_init(&g, 3, 3, 1, 2, 2, 2, 2, true));
    float y[4];
    int32_t arg[4];
    dt_maxpool_forward(&g, 1, x, y, arg);
    CHECK(y[0] == 5 && arg[0] == 1); /* the tie of 5s goes to the first in row-major order */
    CHECK(y[1] == 2 && arg[1] == 2);
    CHECK(y[2] == -1 && arg[2] == 7);
    CHECK(y[3] == -4 && arg[3] == 8); /* padding never wins, even over negatives */
    float dy[4] = {1, 2, 3, 4}, dx[9];
    dt_maxpool_backward(&g, 1, dy, arg, dx);
    float expect[9] = {0, 1, 2, 0, 0, 0, 0, 3, 4};
    CHECK(memcmp(dx, expect, sizeof dx) == 0);
}

/* The fused conv+relu+pool kernel against conv_ref -> relu -> maxpool and back. */
static void check_convpool(int B, int H, int W, int OC, int threads, uint64_t seed)
{
    dt_conv_geom cg;
    dt_pool_geom pg;
    CHECK(dt_conv_geom_init(&cg, H, W, 1, 3, 3, OC, 1, 1, false));
    CHECK(dt_pool_geom_init(&pg, cg.OH, cg.OW, OC, 2, 2, 2, 2, false));
    CHECK_MSG(dt_convpool_supported(&cg, &pg), "the fused kernel needs AVX2 and FMA");
    if (!dt_convpool_supported(&cg, &pg))
        return;
    dt_rng r;
    dt_rng_seed(&r, seed);
    size_t nx = (size_t)B * H * W, nw = 9 * (size_t)OC;
    size_t nc = (size_t)B * cg.OH * cg.OW * OC, np = (size_t)B * pg.OH * pg.OW * OC;
    float *x = random_floats(&r, nx, 0, 1), *w = random_floats(&r, nw, -1, 1);
    float *b = random_floats(&r, OC, -0.5f, 0.5f), *dy = random_floats(&r, np, -1, 1);
    float *y = malloc(np * 4), *conv = malloc(nc * 4), *y_ref = malloc(np * 4), *dconv = malloc(nc * 4);
    int32_t *arg = malloc(np * 4);
    uint32_t *mask = malloc(dt_convpool_mask_words(&pg, B) * 4);
    float *dw = calloc(nw, 4), *dw_ref = calloc(nw, 4), *db = calloc(OC, 4), *db_ref = calloc(OC, 4);
    float *scratch = malloc(dt_convpool_scratch_elems(&cg, threads) * 4);
    dt_pool *pool = pool_of(threads);

    dt_convpool_forward(pool, &cg, &pg, B, x, w, b, y, mask);
    dt_conv2d_forward_naive(&cg, B, x, w, b, conv);
    dt_act_forward(DT_ACT_RELU, nc, conv);
    dt_maxpool_forward(&pg, B, conv, y_ref, arg);
    CHECK_MSG(max_rel_diff(y, y_ref, np) < 1e-5, "pooled output B=%d H=%d W=%d OC=%d", B, H, W, OC);

    dt_convpool_backward(pool, &cg, &pg, B, x, y, mask, dy, dw, db, scratch);
    dt_maxpool_backward(&pg, B, dy, arg, dconv);
    dt_act_backward(DT_ACT_RELU, nc, conv, dconv);
    dt_conv2d_backward_naive(&cg, B, x, w, dconv, dw_ref, db_ref, NULL);
    CHECK_MSG(max_rel_diff(dw, dw_ref, nw) < 1e-4, "dw B=%d H=%d W=%d OC=%d: %g", B, H, W, OC,
              max_rel_diff(dw, dw_ref, nw));
    CHECK_MSG(max_rel_diff(db, db_ref, OC) < 1e-4, "db B=%d H=%d W=%d OC=%d", B, H, W, OC);

    free(x), free(w), free(b), free(dy), free(y), free(conv), free(y_ref), free(dconv), free(arg);
    free(mask), free(dw), free(dw_ref), free(db), free(db_ref), free(scratch);
    dt_pool_destroy(pool);
}

TEST(convpool_fused_matches_unfused_reference)
{
    check_convpool(5, 28, 28, 32, 1, 10);
    check_convpool(5, 28, 28, 32, 2, 11);
    check_convpool(3, 11, 9, 16, 2, 12); /* odd conv output: the last row and column are dropped */
    check_convpool(1, 5, 6, 8, 3, 13);   /* fewer examples than threads */
}

TEST(convpool_rejects_shapes_it_cannot_run)
{
    dt_conv_geom cg;
    dt_pool_geom pg;
    dt_conv_geom_init(&cg, 28, 28, 2, 3, 3, 32, 1, 1, false); /* two input channels */
    dt_pool_geom_init(&pg, 26, 26, 32, 2, 2, 2, 2, false);
    CHECK(!dt_convpool_supported(&cg, &pg));
    dt_conv_geom_init(&cg, 28, 28, 1, 3, 3, 12, 1, 1, false); /* 12 filters: not a multiple of 8 */
    dt_pool_geom_init(&pg, 26, 26, 12, 2, 2, 2, 2, false);
    CHECK(!dt_convpool_supported(&cg, &pg));
    dt_conv_geom_init(&cg, 28, 28, 1, 3, 3, 32, 1, 1, false);
    dt_pool_geom_init(&pg, 26, 26, 32, 3, 3, 3, 3, false); /* 3x3 pooling */
    CHECK(!dt_convpool_supported(&cg, &pg));
    /* "same" pooling over an odd conv output (27): padding only at the bottom and right, one
     * more pooled row than valid pooling gives. */
    dt_conv_geom_init(&cg, 29, 29, 1, 3, 3, 32, 1, 1, false);
    dt_pool_geom_init(&pg, 27, 27, 32, 2, 2, 2, 2, true);
    CHECK(pg.pad_top == 0 && pg.OH == 14);
    CHECK(!dt_convpool_supported(&cg, &pg));
    dt_pool_geom_init(&pg, 27, 27, 32, 2, 2, 2, 2, false);
    CHECK(dt_convpool_supported(&cg, &pg));
    /* "same" over an even output is valid pooling under another name: the kernel may run it. */
    dt_conv_geom_init(&cg, 28, 28, 1, 3, 3, 32, 1, 1, false);
    dt_pool_geom_init(&pg, 26, 26, 32, 2, 2, 2, 2, true);
    CHECK(dt_convpool_supported(&cg, &pg));
}

TEST(softmax_cross_entropy_matches_log_softmax)
{
    float logits[6] = {1.0f, 2.0f, 3.0f, 100.0f, -100.0f, 0.0f};
    int32_t labels[2] = {2, 1};
    float prob[6], loss[2], grad[6];
    dt_softmax_xent_forward(2, 3, logits, labels, prob, loss);
    double lse = log(exp(1.0) + exp(2.0) + exp(3.0));
    CHECK_NEAR(loss[0], lse - 3.0, 1e-6);
    CHECK_NEAR(loss[1], 200.0, 1e-5); /* large, finite, no log(0) */
    dt_softmax_xent_backward(2, 3, prob, labels, 0.5f, grad);
    for (int i = 0; i < 2; i++)
        CHECK_NEAR(grad[3 * i] + grad[3 * i + 1] + grad[3 * i + 2], 0.0, 1e-6);
    CHECK_NEAR(grad[2], 0.5 * (exp(3.0 - lse) - 1.0), 1e-6);
}

TEST(binary_cross_entropy_is_stable_for_large_logits)
{
    float z[4] = {100.0f, -100.0f, 0.0f, 2.0f}, t[4] = {0.0f, 1.0f, 1.0f, 1.0f}, loss[4], g[4];
    dt_bce_logits_forward(4, 1, z, t, loss);
    CHECK_NEAR(loss[0], 100.0, 1e-5);
    CHECK_NEAR(loss[1], 100.0, 1e-5);
    CHECK_NEAR(loss[2], log(2.0), 1e-6);
    CHECK_NEAR(loss[3], log1p(exp(-2.0)), 1e-6);
    dt_bce_logits_backward(4, 1, z, t, 1.0f, g);
    CHECK_NEAR(g[0], 1.0, 1e-6);
    CHECK_NEAR(g[1], -1.0, 1e-6);
    CHECK_NEAR(g[3], 1.0 / (1.0 + exp(-2.0)) - 1.0, 1e-6);
}

TEST(dropout_keeps_the_expected_share_and_scales)
{
    size_t n = 100000;
    float *y = malloc(n * 4), *mask = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        y[i] = 1.0f;
    dt_rng r;
    dt_rng_seed(&r, 5);
    dt_dropout_forward(n, 0.25f, &r, y, y, mask);
    size_t kept = 0;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        CHECK(mask[i] == 0.0f || fabsf(mask[i] - 1.0f / 0.75f) < 1e-6f);
        kept += mask[i] != 0.0f;
        sum += y[i];
    }
    CHECK_MSG(kept > 74000 && kept < 76000, "kept %zu of %zu", kept, n);
    CHECK_NEAR(sum / n, 1.0, 0.02); /* inverted dropout keeps the mean */
    free(y), free(mask);
}

/* The kernel against the rule written out value by value: draw d decides values 4d..4d+3 by
 * its 16-bit quarters from the low end. Out of place, x is left as it was and y is x times the
 * mask; in place gives the same bits. n = 1001 ends inside a block and inside a draw. */
TEST(dropout_follows_the_quarter_rule_in_and_out_of_place)
{
    enum { N = 1001 };
    static float x[N], y[N], z[N], mask[N], mask2[N];
    for (int i = 0; i < N; i++)
        x[i] = z[i] = (float)i * 0.01f - 4.0f;
    dt_rng r, ref;
    dt_rng_seed(&r, 21);
    dt_dropout_forward(N, 0.3f, &r, x, y, mask);
    dt_rng_seed(&ref, 21);
    int same = 1, kept = 0;
    uint64_t d = 0;
    for (int i = 0; i < N; i++) {
        if (i % 4 == 0)
            d = dt_rng_next(&ref);
        unsigned q = (unsigned)(d >> (16 * (i % 4))) & 0xffffu;
        float want = q / 65536.0f < 0.7f ? 1.0f / 0.7f : 0.0f;
        same &= mask[i] == want && y[i] == ((float)i * 0.01f - 4.0f) * want &&
                x[i] == (float)i * 0.01f - 4.0f;
        kept += want != 0.0f;
    }
    CHECK(same);
    CHECK_MSG(kept > 600 && kept < 800, "kept %d of %d", kept, N);
    /* Both consumed the same draws: the next ones agree. */
    CHECK(dt_rng_next(&r) == dt_rng_next(&ref));
    dt_rng_seed(&r, 21);
    dt_dropout_forward(N, 0.3f, &r, z, z, mask2);
    CHECK(memcmp(z, y, sizeof z) == 0 && memcmp(mask, mask2, sizeof mask) == 0);
}

/* The pooled dropout draws chunk c from stream (seed, key1, key2 + (c << 16)): the mask is the
 * same on one thread and on three, and each chunk is what the single-stream kernel gives. */
TEST(pooled_dropout_is_the_chunked_stream_whatever_the_threads)
{
    size_t n = 2 * DT_DROPOUT_CHUNK + 1000;
    float *y1 = malloc(n * 4), *y3 = malloc(n * 4), *m1 = malloc(n * 4), *m3 = malloc(n * 4);
    float *ref = malloc(n * 4), *mref = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        y1[i] = y3[i] = ref[i] = (float)i * 0.001f - 3.0f;
    dt_pool *p3 = pool_of(3);
    dt_dropout_forward_pool(NULL, n, 0.5f, 11, 7, 2, y1, y1, m1);
    dt_dropout_forward_pool(p3, n, 0.5f, 11, 7, 2, y3, y3, m3);
    CHECK(memcmp(m1, m3, n * 4) == 0 && memcmp(y1, y3, n * 4) == 0);
    for (size_t c = 0; c * DT_DROPOUT_CHUNK < n; c++) {
        size_t lo = c * DT_DROPOUT_CHUNK, len = n - lo < DT_DROPOUT_CHUNK ? n - lo : DT_DROPOUT_CHUNK;
        dt_rng r;
        dt_rng_derive(&r, 11, 7, 2 + ((uint64_t)c << 16));
        dt_dropout_forward(len, 0.5f, &r, ref + lo, ref + lo, mref + lo);
    }
    CHECK(memcmp(m1, mref, n * 4) == 0 && memcmp(y1, ref, n * 4) == 0);
    /* Backward and the activations: the same values as the one-thread kernels. */
    memcpy(ref, y1, n * 4);
    dt_dropout_backward_pool(p3, n, m3, y3);
    dt_dropout_backward(n, m1, ref);
    CHECK(memcmp(y3, ref, n * 4) == 0);
    for (int a = DT_ACT_RELU; a <= DT_ACT_TANH; a++) {
        for (size_t i = 0; i < n; i++)
            y1[i] = ref[i] = (float)((i * 2654435761u) % 2001) * 0.003f - 3.0f, m1[i] = 0.5f,
            m3[i] = 0.5f;
        dt_act_forward_pool(p3, (dt_activation)a, n, y1);
        dt_act_forward((dt_activation)a, n, ref);
        CHECK_MSG(memcmp(y1, ref, n * 4) == 0, "activation %d forward", a);
        dt_act_backward_pool(p3, (dt_activation)a, n, y1, m1);
        dt_act_backward((dt_activation)a, n, ref, m3);
        CHECK_MSG(memcmp(m1, m3, n * 4) == 0, "activation %d backward", a);
    }
    dt_pool_destroy(p3);
    free(y1), free(y3), free(m1), free(m3), free(ref), free(mref);
}
