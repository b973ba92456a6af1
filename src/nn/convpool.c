/* Fused conv + ReLU + max pool (see convpool.h): shape checks, CPU dispatch and the
 * split over threads; the arithmetic is in convpool_avx2.c. */
#include "convpool.h"

#include <string.h>

#include "../core/cpu.h"
#include "convpool_avx2.h"

static bool cpu_has_avx2_fma(void) { return dt_cpu_has(DT_CPU_AVX2_FMA); }

bool dt_convpool_supported(const dt_conv_geom *cg, const dt_pool_geom *pg)
{
    bool conv_ok = cg->KH == 3 && cg->KW == 3 && cg->C == 1 && cg->SH == 1 && cg->SW == 1 &&
                   cg->pad_top == 0 && cg->pad_left == 0 && cg->OC % 8 == 0;
    /* Valid pooling only: "same" pooling of an odd conv output pads at the bottom and right
     * (pad_top stays 0) and makes one more pooled row, whose window the kernel cannot read. */
    bool pool_ok = pg->PH == 2 && pg->PW == 2 && pg->SH == 2 && pg->SW == 2 &&
                   pg->pad_top == 0 && pg->pad_left == 0 && pg->OH == pg->H / 2 &&
                   pg->OW == pg->W / 2 && pg->H == cg->OH && pg->W == cg->OW && pg->C == cg->OC;
    return conv_ok && pool_ok && cpu_has_avx2_fma();
}

size_t dt_convpool_mask_words(const dt_pool_geom *pg, int B)
{
    return (size_t)B * pg->OH * pg->OW * (pg->C / 8);
}

/* Per thread: a partial weight gradient (9 x OC) and bias gradient (OC), padded to 16 floats. */
static size_t part_elems(const dt_conv_geom *cg) { return ((size_t)10 * cg->OC + 15) / 16 * 16; }

size_t dt_convpool_scratch_elems(const dt_conv_geom *cg, int n_threads)
{
    return part_elems(cg) * (size_t)n_threads;
}

struct convpool_job {
    const dt_conv_geom *cg;
    const dt_pool_geom *pg;
    int B;
    const float *x, *w, *b, *y, *dy;
    float *y_out, *scratch;
    uint32_t *mask_out;
    const uint32_t *mask;
};

static void forward_task(void *ctx, int task, int n_tasks)
{
    const struct convpool_job *j = ctx;
    long lo, hi;
    dt_pool_slice(j->B, task, n_tasks, &lo, &hi);
#if DT_X86 /* elsewhere dt_convpool_supported is false: nothing calls this */
    dt_convpool_forward_avx2(lo, hi, j->cg->H, j->cg->W, j->pg->OH, j->pg->OW, j->cg->OC, j->x,
                             j->w, j->b, j->y_out, j->mask_out);
#else
    (void)j, (void)lo, (void)hi;
#endif
}

void dt_convpool_forward(dt_pool *pool, const dt_conv_geom *cg, const dt_pool_geom *pg, int B,
                         const float *x, const float *w, const float *b, float *y, uint32_t *mask)
{
    struct convpool_job j = {.cg = cg, .pg = pg, .B = B, .x = x, .w = w, .b = b, .y_out = y,
                             .mask_out = mask};
    dt_pool_run(pool, forward_task, &j, dt_pool_size(pool));
}

static void backward_task(void *ctx, int task, int n_tasks)
{
    const struct convpool_job *j = ctx;
    long lo, hi;
    dt_pool_slice(j->B, task, n_tasks, &lo, &hi);
    float *dw_part = j->scratch + part_elems(j->cg) * task;
#if DT_X86
    dt_convpool_backward_avx2(lo, hi, j->cg->H, j->cg->W, j->pg->OH, j->pg->OW, j->cg->OC, j->x,
                              j->y, j->mask, j->dy, dw_part, dw_part + 9 * j->cg->OC);
#else
    (void)dw_part, (void)lo, (void)hi;
#endif
}

void dt_convpool_backward(dt_pool *pool, const dt_conv_geom *cg, const dt_pool_geom *pg, int B,
                          const float *x, const float *y, const uint32_t *mask, const float *dy,
                          float *dw, float *db, float *scratch)
{
    int n_tasks = dt_pool_size(pool);
    struct convpool_job j = {.cg = cg, .pg = pg, .B = B, .x = x, .y = y, .dy = dy,
                             .scratch = scratch, .mask = mask};
    dt_pool_run(pool, backward_task, &j, n_tasks);
    /* Partials are added in task order: the result depends on the thread count only. */
    for (int t = 0; t < n_tasks; t++) {
        const float *part = scratch + part_elems(cg) * t;
        for (int i = 0; i < 9 * cg->OC; i++)
            dw[i] += part[i];
        for (int oc = 0; oc < cg->OC; oc++)
            db[oc] += part[9 * cg->OC + oc];
    }
}
