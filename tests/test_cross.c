/* DCN-v2's cross layer (src/nn/cross.h): dt_cross_forward and dt_cross_backward against
 * their naive twins, full rank and low rank, at sizes off every kernel's tile (B and D not
 * multiples of 8), on no pool and on pools of 1 and 3 threads, with each gemm kernel this CPU
 * runs; and the naive backward against central differences of the naive forward, so that the
 * pair the fast kernels are compared with is itself right. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/nn/cross.h"
#include "../src/nn/gemm.h"
#include "dtrain/pool.h"
#include "dtrain/rng.h"
#include "test.h"

typedef struct {
    int B, D, R;
    float *x0, *x, *W, *U, *V, *b, *dy;
} cross_case;

static float *rand_floats(dt_rng *r, size_t n, float scale)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = scale * (2.0f * dt_rng_uniform(r) - 1.0f);
    return p;
}

static float *nan_floats(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
    return p;
}

static float *copy_floats(const float *src, size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (n)
        memcpy(p, src, n * sizeof *p);
    return p;
}

/* x0 and x distinct unless same_input (layer 0, where x is x0). W only when R == 0, U and V
 * only when R > 0: the other kernels are NULL, so a kernel that read them would crash. */
static void case_init(cross_case *c, int B, int D, int R, bool same_input, uint64_t seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed);
    memset(c, 0, sizeof *c);
    c->B = B, c->D = D, c->R = R;
    size_t BD = (size_t)B * D;
    c->x0 = rand_floats(&r, BD, 1.0f);
    c->x = same_input ? c->x0 : rand_floats(&r, BD, 1.0f);
    if (R == 0) {
        c->W = rand_floats(&r, (size_t)D * D, 0.5f);
    } else {
        c->U = rand_floats(&r, (size_t)D * R, 0.5f);
        c->V = rand_floats(&r, (size_t)R * D, 0.5f);
    }
    c->b = rand_floats(&r, (size_t)D, 0.3f);
    c->dy = rand_floats(&r, BD, 1.0f);
}

static void case_free(cross_case *c)
{
    if (c->x != c->x0)
        free(c->x);
    free(c->x0), free(c->W), free(c->U), free(c->V), free(c->b), free(c->dy);
}

/* max |a - b| / max(1, |b|) over n elements. */
static double worst_diff(const float *a, const float *b, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / fmax(1.0, fabs((double)b[i]));
        if (!(d <= worst)) /* NaN counts as the worst */
            worst = isnan(d) ? INFINITY : d;
    }
    return worst;
}

#define CHECK_CLOSE(what, a, b, n, tol, ...)                                                       \
    do {                                                                                           \
        double w_ = worst_diff((a), (b), (n));                                                     \
        if (!(w_ <= (tol)))                                                                        \
            test_fail(__FILE__, __LINE__, "%s: off by %g (B %d D %d R %d, %s)", (what), w_,        \
                      c->B, c->D, c->R, __VA_ARGS__);                                              \
    } while (0)

/* The fast pair against the naive pair on one case and one pool. The gradients start from
 * non-zero values (both kernels add into dx0, dW, dU, dV and db), the scratch du and dt from
 * NaN (the fast backward must write them before reading them). */
static void compare_with_naive(const cross_case *c, dt_pool *pool, const char *label)
{
    int B = c->B, D = c->D, R = c->R;
    size_t BD = (size_t)B * D, BR = (size_t)B * R;
    dt_rng r;
    dt_rng_seed(&r, 1234);
    float *t = R ? nan_floats(BR) : NULL, *u = nan_floats(BD), *y = nan_floats(BD);
    float *tn = R ? nan_floats(BR) : NULL, *un = nan_floats(BD), *yn = nan_floats(BD);
    dt_cross_forward(pool, B, D, R, c->x0, c->x, c->W, c->U, c->V, c->b, t, u, y);
    dt_cross_forward_naive(B, D, R, c->x0, c->x, c->W, c->U, c->V, c->b, tn, un, yn);
    if (R)
        CHECK_CLOSE("forward t", t, tn, BR, 1e-5, label);
    CHECK_CLOSE("forward u", u, un, BD, 1e-5, label);
    CHECK_CLOSE("forward y", y, yn, BD, 1e-5, label);

    float *dx0 = rand_floats(&r, BD, 1.0f), *dx0n = copy_floats(dx0, BD);
    float *dx = nan_floats(BD), *dxn = nan_floats(BD);
    float *dW = R ? NULL : rand_floats(&r, (size_t)D * D, 1.0f);
    float *dU = R ? rand_floats(&r, (size_t)D * R, 1.0f) : NULL;
    float *dV = R ? rand_floats(&r, (size_t)R * D, 1.0f) : NULL;
    float *db = rand_floats(&r, (size_t)D, 1.0f);
    float *dWn = R ? NULL : copy_floats(dW, (size_t)D * D);
    float *dUn = R ? copy_floats(dU, (size_t)D * R) : NULL;
    float *dVn = R ? copy_floats(dV, (size_t)R * D) : NULL;
    float *dbn = copy_floats(db, (size_t)D);
    float *du = nan_floats(BD), *dt = R ? nan_floats(BR) : NULL;
    /* Both backwards from the naive forward's t and u, so only backward is compared. */
    dt_cross_backward(pool, B, D, R, c->x0, c->x, c->W, c->U, c->V, tn, un, c->dy, dx0, dx, dW,
                      dU, dV, db, du, dt);
    dt_cross_backward_naive(B, D, R, c->x0, c->x, c->W, c->U, c->V, tn, un, c->dy, dx0n, dxn,
                            dWn, dUn, dVn, dbn);
    CHECK_CLOSE("backward dx0", dx0, dx0n, BD, 1e-5, label);
    CHECK_CLOSE("backward dx", dx, dxn, BD, 1e-5, label);
    CHECK_CLOSE("backward db", db, dbn, (size_t)D, 1e-5, label);
    if (R == 0) {
        CHECK_CLOSE("backward dW", dW, dWn, (size_t)D * D, 1e-5, label);
    } else {
        CHECK_CLOSE("backward dU", dU, dUn, (size_t)D * R, 1e-5, label);
        CHECK_CLOSE("backward dV", dV, dVn, (size_t)R * D, 1e-5, label);
    }
    free(t), free(u), free(y), free(tn), free(un), free(yn), free(dx0), free(dx0n), free(dx);
    free(dxn), free(dW), free(dU), free(dV), free(db), free(dWn), free(dUn), free(dVn);
    free(dbn), free(du), free(dt);
}

static const struct {
    int B, D, R;
} shapes[] = {
    {1, 1, 0},  {1, 5, 2},   {7, 13, 0}, {7, 13, 3}, {13, 11, 0}, {13, 11, 11}, {13, 11, 17},
    {29, 37, 0}, {29, 37, 5}, {3, 70, 0}, {70, 3, 1}, {33, 67, 9},
};

TEST(cross_kernels_match_naive_twins_on_every_pool_and_gemm)
{
    static const char *const kernels[] = {"avx512", "blas"};
    dt_pool *pools[3] = {NULL, NULL, NULL};
    CHECK_OK(dt_pool_create(1, &pools[1]));
    CHECK_OK(dt_pool_create(3, &pools[2]));
    for (int g = 0; g < 2; g++) {
        if (!dt_gemm_kernel_runs_here(kernels[g]))
            continue;
        CHECK_OK(dt_gemm_use(kernels[g]));
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int same = 0; same < 2; same++) {
                cross_case c;
                case_init(&c, shapes[s].B, shapes[s].D, shapes[s].R, same,
                          100 + 7 * s + (uint64_t)same);
                for (int p = 0; p < 3; p++) {
                    char label[64];
                    snprintf(label, sizeof label, "%s, %d threads%s", kernels[g],
                             dt_pool_size(pools[p]), same ? ", x = x0" : "");
                    compare_with_naive(&c, pools[p], label);
                }
                case_free(&c);
            }
    }
    CHECK_OK(dt_gemm_use("auto"));
    dt_pool_destroy(pools[1]);
    dt_pool_destroy(pools[2]);
}

/* The naive forward's y against its definition written out here: y = x0 * (W x + b) + x. */
TEST(cross_naive_forward_is_the_dcn_v2_formula)
{
    /* B 2, D 3; full rank, then rank 2 with U V equal to that W. */
    const float x0[6] = {1, -2, 0.5f, 3, 0, -1}, x[6] = {0.25f, 1, -1, 2, -0.5f, 0};
    const float U[6] = {1, 0, 0, 1, 1, -1}, V[6] = {2, 0, 1, 0, -1, 3};
    float W[9]; /* U (3, 2) V (2, 3) */
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 3; k++)
            W[d * 3 + k] = U[d * 2] * V[k] + U[d * 2 + 1] * V[3 + k];
    const float b[3] = {0.5f, -0.25f, 1};
    float t[4], u[6], y[6], u2[6], y2[6];
    dt_cross_forward_naive(2, 3, 0, x0, x, W, NULL, NULL, b, NULL, u, y);
    dt_cross_forward_naive(2, 3, 2, x0, x, NULL, U, V, b, t, u2, y2);
    for (int i = 0; i < 2; i++)
        for (int d = 0; d < 3; d++) {
            double s = b[d];
            for (int k = 0; k < 3; k++)
                s += (double)W[d * 3 + k] * x[i * 3 + k];
            CHECK_NEAR(u[i * 3 + d], s, 1e-6);
            CHECK_NEAR(y[i * 3 + d], x0[i * 3 + d] * s + x[i * 3 + d], 1e-6);
            CHECK_NEAR(u2[i * 3 + d], s, 1e-6);
            CHECK_NEAR(y2[i * 3 + d], x0[i * 3 + d] * s + x[i * 3 + d], 1e-6);
        }
    /* t = x V^T */
    for (int i = 0; i < 2; i++)
        for (int q = 0; q < 2; q++)
            CHECK_NEAR(t[i * 2 + q], x[i * 3] * V[q * 3] + x[i * 3 + 1] * V[q * 3 + 1] +
                                         x[i * 3 + 2] * V[q * 3 + 2], 1e-6);
}

/* L = sum(g * y) in double, y from the naive forward. */
static double cross_loss(const cross_case *c, const float *g)
{
    size_t BD = (size_t)c->B * c->D;
    float *t = c->R ? malloc((size_t)c->B * c->R * sizeof *t) : NULL;
    float *u = malloc(BD * sizeof *u), *y = malloc(BD * sizeof *y);
    dt_cross_forward_naive(c->B, c->D, c->R, c->x0, c->x, c->W, c->U, c->V, c->b, t, u, y);
    double L = 0;
    for (size_t i = 0; i < BD; i++)
        L += (double)g[i] * y[i];
    free(t), free(u), free(y);
    return L;
}

/* Central differences of L over every element of v against grad. */
static void fd_check(cross_case *c, const char *name, float *v, size_t n, const float *grad,
                     double eps)
{
    int bad = 0;
    for (size_t k = 0; k < n; k++) {
        float saved = v[k];
        v[k] = (float)(saved + eps);
        double up = cross_loss(c, c->dy);
        v[k] = (float)(saved - eps);
        double down = cross_loss(c, c->dy);
        double h = (double)(float)(saved + eps) - (double)(float)(saved - eps);
        v[k] = saved;
        double fd = (up - down) / h;
        if (fabs(fd - grad[k]) > 1e-4 * fmax(1.0, fabs(fd)) && bad++ < 3)
            test_fail(__FILE__, __LINE__, "B %d D %d R %d: d%s[%zu]: backward %.7g, finite "
                      "difference %.7g", c->B, c->D, c->R, name, k, grad[k], fd);
    }
}

/* The naive backward against finite differences of the naive forward: L = sum(dy * y) is
 * linear in each of x0, x, W, U, V and b alone, so central differences are exact up to float
 * rounding. With x = x0 (layer 0) the two gradients add: d/dx0 = dx0 + dx. */
TEST(cross_naive_backward_matches_finite_differences)
{
    static const struct {
        int B, D, R, same;
    } cases[] = {{3, 5, 0, 0}, {3, 5, 2, 0}, {4, 7, 3, 0}, {2, 6, 0, 1}, {2, 6, 4, 1}};
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++) {
        cross_case c;
        case_init(&c, cases[s].B, cases[s].D, cases[s].R, cases[s].same, 900 + s);
        int B = c.B, D = c.D, R = c.R;
        size_t BD = (size_t)B * D;
        float *t = R ? malloc((size_t)B * R * sizeof *t) : NULL;
        float *u = malloc(BD * sizeof *u), *y = malloc(BD * sizeof *y);
        dt_cross_forward_naive(B, D, R, c.x0, c.x, c.W, c.U, c.V, c.b, t, u, y);
        float *dx0 = calloc(BD, sizeof *dx0), *dx = calloc(BD, sizeof *dx);
        float *dW = R ? NULL : calloc((size_t)D * D, sizeof *dW);
        float *dU = R ? calloc((size_t)D * R, sizeof *dU) : NULL;
        float *dV = R ? calloc((size_t)R * D, sizeof *dV) : NULL;
        float *db = calloc((size_t)D, sizeof *db);
        dt_cross_backward_naive(B, D, R, c.x0, c.x, c.W, c.U, c.V, t, u, c.dy, dx0, dx, dW, dU,
                                dV, db);
        const double eps = 1e-2;
        if (cases[s].same) {
            for (size_t i = 0; i < BD; i++)
                dx0[i] += dx[i];
            fd_check(&c, "x0 (= x)", c.x0, BD, dx0, eps);
        } else {
            fd_check(&c, "x0", c.x0, BD, dx0, eps);
            fd_check(&c, "x", c.x, BD, dx, eps);
        }
        fd_check(&c, "b", c.b, (size_t)D, db, eps);
        if (R == 0) {
            fd_check(&c, "W", c.W, (size_t)D * D, dW, eps);
        } else {
            fd_check(&c, "U", c.U, (size_t)D * R, dU, eps);
            fd_check(&c, "V", c.V, (size_t)R * D, dV, eps);
        }
        free(t), free(u), free(y), free(dx0), free(dx), free(dW), free(dU), free(dV), free(db);
        case_free(&c);
    }
}
