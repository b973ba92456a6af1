/* DCN-v2 cross layers (see cross.h): the products on dt_gemm, the element-wise parts in one
 * pass each; the naive twins loop over every index. */
#include "cross.h"

#include <string.h>

#include "gemm.h"

// x0, x, y, u (B, D); W (D, D) or U (D, R), V (R, D); t (B, R); b (D)
void dt_cross_forward(dt_pool *pool, int B, int D, int R, const float *x0, const float *x,
                      const float *W, const float *U, const float *V, const float *b, float *t,
                      float *u, float *y)
{
    if (R == 0) {
        dt_gemm(pool, false, true, B, D, D, 1.0f, x, D, W, D, 0.0f, u, D);
    } else {
        dt_gemm(pool, false, true, B, R, D, 1.0f, x, D, V, D, 0.0f, t, R);
        dt_gemm(pool, false, true, B, D, R, 1.0f, t, R, U, R, 0.0f, u, D);
    }
    for (int i = 0; i < B; i++) {
        float *ui = u + (size_t)i * D, *yi = y + (size_t)i * D;
        const float *x0i = x0 + (size_t)i * D, *xi = x + (size_t)i * D;
        for (int d = 0; d < D; d++) {
            ui[d] += b[d];
            yi[d] = x0i[d] * ui[d] + xi[d];
        }
    }
}

void dt_cross_backward(dt_pool *pool, int B, int D, int R, const float *x0, const float *x,
                       const float *W, const float *U, const float *V, const float *t,
                       const float *u, const float *dy, float *dx0, float *dx, float *dW,
                       float *dU, float *dV, float *db, float *du, float *dt)
{
    for (int i = 0; i < B; i++) {
        const float *dyi = dy + (size_t)i * D, *x0i = x0 + (size_t)i * D, *ui = u + (size_t)i * D;
        float *dui = du + (size_t)i * D, *dx0i = dx0 + (size_t)i * D;
        for (int d = 0; d < D; d++) {
            dui[d] = dyi[d] * x0i[d];
            dx0i[d] += dyi[d] * ui[d];
            db[d] += dui[d];
        }
    }
    memcpy(dx, dy, (size_t)B * D * sizeof *dx);
    if (R == 0) {
        dt_gemm(pool, true, false, D, D, B, 1.0f, du, D, x, D, 1.0f, dW, D);
        dt_gemm(pool, false, false, B, D, D, 1.0f, du, D, W, D, 1.0f, dx, D);
        return;
    }
    dt_gemm(pool, true, false, D, R, B, 1.0f, du, D, t, R, 1.0f, dU, R);
    dt_gemm(pool, false, false, B, R, D, 1.0f, du, D, U, R, 0.0f, dt, R);
    dt_gemm(pool, true, false, R, D, B, 1.0f, dt, R, x, D, 1.0f, dV, D);
    dt_gemm(pool, false, false, B, D, R, 1.0f, dt, R, V, D, 1.0f, dx, D);
}

// as dt_cross_forward
void dt_cross_forward_naive(int B, int D, int R, const float *x0, const float *x, const float *W,
                            const float *U, const float *V, const float *b, float *t, float *u,
                            float *y)
{
    for (int i = 0; i < B; i++) {
        const float *xi = x + (size_t)i * D;
        for (int r = 0; r < R; r++) {
            double s = 0;
            for (int k = 0; k < D; k++)
                s += (double)xi[k] * V[(size_t)r * D + k];
            t[(size_t)i * R + r] = (float)s;
        }
        for (int d = 0; d < D; d++) {
            double s = b[d];
            if (R == 0)
                for (int k = 0; k < D; k++)
                    s += (double)xi[k] * W[(size_t)d * D + k];
            else
                for (int r = 0; r < R; r++)
                    s += (double)t[(size_t)i * R + r] * U[(size_t)d * R + r];
            u[(size_t)i * D + d] = (float)s;
            y[(size_t)i * D + d] = x0[(size_t)i * D + d] * (float)s + xi[d];
        }
    }
}

void dt_cross_backward_naive(int B, int D, int R, const float *x0, const float *x,
                             const float *W, const float *U, const float *V, const float *t,
                             const float *u, const float *dy, float *dx0, float *dx, float *dW,
                             float *dU, float *dV, float *db)
{
    for (int i = 0; i < B; i++) {
        for (int d = 0; d < D; d++) {
            size_t id = (size_t)i * D + d;
            float du = dy[id] * x0[id];
            dx0[id] += dy[id] * u[id];
            db[d] += du;
            dx[id] = dy[id];
        }
        for (int d = 0; d < D; d++) {
            float du = dy[(size_t)i * D + d] * x0[(size_t)i * D + d];
            if (R == 0) {
                for (int k = 0; k < D; k++) {
                    dW[(size_t)d * D + k] += du * x[(size_t)i * D + k];
                    dx[(size_t)i * D + k] += du * W[(size_t)d * D + k];
                }
                continue;
            }
            for (int r = 0; r < R; r++) {
                dU[(size_t)d * R + r] += du * t[(size_t)i * R + r];
                float dtr = du * U[(size_t)d * R + r];
                for (int k = 0; k < D; k++) {
                    dV[(size_t)r * D + k] += dtr * x[(size_t)i * D + k];
                    dx[(size_t)i * D + k] += dtr * V[(size_t)r * D + k];
                }
            }
        }
    }
}
