/* gemm_bench: GFLOP/s of each matrix-multiply kernel this CPU runs (dtrain's AVX-512 kernel,
 * OpenBLAS single-threaded as inside dtrain), on one thread, for the products a DeepFM step and
 * the tutorial CNN's dense layer make, and a square one.
 *
 * Each product is checked once against the naive reference (relative 1e-4), then timed in
 * repetitions of at least 0.1 s, alternating kernels so that load from another process hits
 * both; the best repetition of --reps (default 5) counts.
 *
 * usage: gemm_bench [--reps N]
 * One line per kernel and shape: "gemm KERNEL ta=A tb=B M=.. N=.. K=..: X GFLOP/s", then
 * "peak KERNEL: X GFLOP/s" (the best over the shapes). Exits 1 if a kernel disagrees with the
 * reference, 2 on a bad flag. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/clock.h"
#include "../src/nn/gemm.h"
#include "dtrain/rng.h"

static const char *const kernels[] = {"avx512", "blas"};
enum { N_KERNELS = 2 };

/* (trans_a, trans_b, M, N, K): DeepFM's first layer forward, dW and dX at batch 1024, its
 * second layer, the CNN's dense layer (batch 64), 1024 cubed, and a DCN-v2 cross layer over
 * Criteo's 429 inputs at batch 1024 (x W^T, dW = du^T x, dx = du W). */
static const int shapes[][5] = {{0, 0, 1024, 128, 1248}, {1, 0, 1248, 128, 1024},
                                {0, 1, 1024, 1248, 128}, {0, 0, 1024, 64, 128},
                                {0, 0, 64, 64, 5408},    {0, 0, 1024, 1024, 1024},
                                {0, 1, 1024, 429, 429},  {1, 0, 429, 429, 1024},
                                {0, 0, 1024, 429, 429}};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

static float *random_floats(dt_rng *r, size_t n)
{
    float *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "gemm_bench: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        p[i] = dt_rng_uniform(r) - 0.5f;
    return p;
}

static double worst_rel_diff(const float *a, const float *b, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(1.0, fabs(b[i]));
        worst = d > worst || d != d ? (d != d ? INFINITY : d) : worst;
    }
    return worst;
}

int main(int argc, char **argv)
{
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: gemm_bench [--reps N]\n");
            return 2;
        }
    }
    dt_gemm_setup();
    dt_rng r;
    dt_rng_seed(&r, 1);
    double peak[N_KERNELS] = {0};
    for (int s = 0; s < N_SHAPES; s++) {
        int ta = shapes[s][0], tb = shapes[s][1], M = shapes[s][2], N = shapes[s][3];
        int K = shapes[s][4], lda = ta ? M : K, ldb = tb ? K : N;
        float *A = random_floats(&r, (size_t)M * K), *B = random_floats(&r, (size_t)K * N);
        float *C = random_floats(&r, (size_t)M * N), *ref = random_floats(&r, (size_t)M * N);
        dt_gemm_naive(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, ref, N);
        double best[N_KERNELS] = {0};
        for (int rep = 0; rep <= reps; rep++) {
            for (int k = 0; k < N_KERNELS; k++) {
                if (dt_gemm_use(kernels[k]) != DT_OK)
                    continue;
                if (rep == 0) { /* checked, and warmed up */
                    dt_gemm(NULL, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
                    double d = worst_rel_diff(C, ref, (size_t)M * N);
                    if (d > 1e-4) {
                        fprintf(stderr, "gemm_bench: %s ta=%d tb=%d M=%d N=%d K=%d differs from "
                                "the reference by %g\n", kernels[k], ta, tb, M, N, K, d);
                        return 1;
                    }
                    continue;
                }
                int n = 0;
                double t0 = dt_clock_now(), t;
                do {
                    dt_gemm(NULL, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
                    n++;
                } while ((t = dt_clock_now() - t0) < 0.1);
                double gflops = 2.0 * M * N * K * n / t / 1e9;
                best[k] = gflops > best[k] ? gflops : best[k];
            }
        }
        for (int k = 0; k < N_KERNELS; k++) {
            if (best[k] == 0)
                continue;
            printf("gemm %s ta=%d tb=%d M=%d N=%d K=%d: %.1f GFLOP/s\n", kernels[k], ta, tb, M,
                   N, K, best[k]);
            peak[k] = best[k] > peak[k] ? best[k] : peak[k];
        }
        free(A), free(B), free(C), free(ref);
    }
    for (int k = 0; k < N_KERNELS; k++)
        if (peak[k] > 0)
            printf("peak %s: %.1f GFLOP/s\n", kernels[k], peak[k]);
    dt_gemm_use("auto");
    return 0;
}
