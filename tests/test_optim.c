/* Optimizers: Keras's update rules checked by hand on known values, slot naming, schedules. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/optim.h"
#include "test.h"

/* One parameter p = 1 with gradient 0.5, stepped `steps` times. */
static float run_steps(dt_optim_config *cfg, int steps, dt_optim *keep)
{
    dt_arena params;
    dt_arena_init(&params);
    int dims[1] = {1};
    CHECK_OK(dt_arena_add(&params, "w", 1, dims, NULL));
    CHECK_OK(dt_arena_commit(&params));
    params.data[0] = 1.0f;
    float grads[16] = {0.5f};
    dt_optim o;
    dt_optim_init(&o);
    CHECK_OK(dt_optim_setup(&o, cfg, &params));
    for (int i = 0; i < steps; i++)
        dt_optim_step(&o, NULL, params.data, grads, params.n_elems);
    float p = params.data[0];
    dt_arena_free(&params);
    if (keep)
        *keep = o;
    else
        dt_optim_free(&o);
    return p;
}

TEST(sgd_step)
{
    dt_optim_config c;
    dt_optim_config_default(&c, DT_OPT_SGD);
    CHECK_NEAR(c.lr, 0.01, 1e-9);
    c.lr = 0.1f;
    CHECK_NEAR(run_steps(&c, 1, NULL), 0.95, 1e-7);
    CHECK_NEAR(run_steps(&c, 2, NULL), 0.90, 1e-7);
}

TEST(momentum_and_nesterov_steps)
{
    dt_optim_config c;
    dt_optim_config_default(&c, DT_OPT_MOMENTUM);
    c.lr = 0.1f;
    /* v1 = -0.05, p1 = 0.95; v2 = 0.9 v1 - 0.05 = -0.095, p2 = 0.855 */
    CHECK_NEAR(run_steps(&c, 1, NULL), 0.95, 1e-7);
    CHECK_NEAR(run_steps(&c, 2, NULL), 0.855, 1e-6);
    c.nesterov = true;
    /* p1 = 1 + 0.9 (-0.05) - 0.05 = 0.905; v2 = -0.095, p2 = 0.905 + 0.9 (-0.095) - 0.05 */
    CHECK_NEAR(run_steps(&c, 1, NULL), 0.905, 1e-6);
    CHECK_NEAR(run_steps(&c, 2, NULL), 0.905 - 0.0855 - 0.05, 1e-6);
}

TEST(adam_steps_and_slots)
{
    dt_optim_config c;
    dt_optim_config_default(&c, DT_OPT_ADAM);
    CHECK_NEAR(c.lr, 0.001, 1e-9);
    CHECK_NEAR(c.epsilon, 1e-7, 1e-12);
    c.lr = 0.1f;
    /* Step 1: m = 0.05, v = 0.00025, lr_t = 0.1 sqrt(0.001) / 0.1: the update is lr * m/sqrt(v)
     * scaled, about 0.1 (Adam's first step moves each weight by about lr). */
    double m = 0.05, v = 0.00025, lr_t = 0.1 * sqrt(1 - 0.999) / (1 - 0.9);
    double p1 = 1.0 - lr_t * m / (sqrt(v) + 1e-7);
    CHECK_NEAR(p1, 0.9, 1e-5);
    CHECK_NEAR(run_steps(&c, 1, NULL), p1, 1e-6);
    m = 0.9 * m + 0.1 * 0.5;
    v = 0.999 * v + 0.001 * 0.25;
    lr_t = 0.1 * sqrt(1 - 0.999 * 0.999) / (1 - 0.81);
    dt_optim o;
    CHECK_NEAR(run_steps(&c, 2, &o), p1 - lr_t * m / (sqrt(v) + 1e-7), 1e-6);
    CHECK(o.iterations == 2);
    CHECK(dt_arena_find(&o.state, "adam/m/w") == 0);
    CHECK(dt_arena_find(&o.state, "adam/v/w") == 1);
    dt_optim_free(&o);
}

TEST(adagrad_step_starts_from_the_initial_accumulator)
{
    dt_optim_config c;
    dt_optim_config_default(&c, DT_OPT_ADAGRAD);
    c.lr = 0.1f;
    /* a = 0.1 + 0.25 = 0.35; p = 1 - 0.1 * 0.5 / sqrt(0.35) */
    CHECK_NEAR(run_steps(&c, 1, NULL), 1.0 - 0.05 / (sqrt(0.35) + 1e-7), 1e-6);
}

TEST(learning_rate_schedules)
{
    dt_optim o;
    dt_optim_init(&o);
    dt_optim_config_default(&o.cfg, DT_OPT_SGD);
    o.cfg.lr = 1.0f;
    o.cfg.schedule = DT_LR_STEP;
    o.cfg.decay_steps = 10;
    o.cfg.decay_rate = 0.5f;
    int64_t at[] = {0, 9, 10, 25};
    double step_expect[] = {1.0, 1.0, 0.5, 0.25};
    for (int i = 0; i < 4; i++) {
        o.iterations = at[i];
        CHECK_NEAR(dt_optim_current_lr(&o), step_expect[i], 1e-7);
    }
    o.cfg.schedule = DT_LR_COSINE;
    o.cfg.decay_steps = 100;
    int64_t cat[] = {0, 50, 100, 150};
    double cos_expect[] = {1.0, 0.5, 0.0, 0.0};
    for (int i = 0; i < 4; i++) {
        o.iterations = cat[i];
        CHECK_NEAR(dt_optim_current_lr(&o), cos_expect[i], 1e-7);
    }
    o.cfg.alpha = 0.1f;
    o.iterations = 100;
    CHECK_NEAR(dt_optim_current_lr(&o), 0.1, 1e-7);
}

TEST(optimizer_config_errors_name_the_field)
{
    dt_optim_config c;
    dt_optim_config_default(&c, DT_OPT_ADAM);
    c.beta2 = 1.0f;
    CHECK_ERR(dt_optim_config_check(&c), DT_ERR_INVALID, "beta2");
    dt_optim_config_default(&c, DT_OPT_SGD);
    c.lr = -1.0f;
    CHECK_ERR(dt_optim_config_check(&c), DT_ERR_INVALID, "lr");
    dt_optim_config_default(&c, DT_OPT_SGD);
    c.schedule = DT_LR_COSINE;
    CHECK_ERR(dt_optim_config_check(&c), DT_ERR_INVALID, "decay_steps");
    dt_opt_kind k;
    CHECK_ERR(dt_opt_kind_parse("rmsprop", &k), DT_ERR_INVALID, "rmsprop");
    CHECK_OK(dt_opt_kind_parse("adagrad", &k));
    CHECK(k == DT_OPT_ADAGRAD);
}

/* Two optimizers of one configuration over params' layout, for comparing two ways of stepping. */
static void two_optimizers(const dt_optim_config *c, const dt_arena *params, dt_optim *a,
                           dt_optim *b)
{
    dt_optim_init(a);
    dt_optim_init(b);
    CHECK_OK(dt_optim_setup(a, c, params));
    CHECK_OK(dt_optim_setup(b, c, params));
}

TEST(threaded_step_equals_serial_step)
{
    /* Large enough that the update is split over threads. */
    dt_arena params;
    dt_arena_init(&params);
    int dims[1] = {100003};
    CHECK_OK(dt_arena_add(&params, "w", 1, dims, NULL));
    CHECK_OK(dt_arena_commit(&params));
    size_t n = params.n_elems;
    float *p1 = malloc(n * 4), *p2 = malloc(n * 4), *g = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        p1[i] = p2[i] = (float)sin((double)i);
        g[i] = (float)cos((double)i * 0.7);
    }
    dt_pool *pool;
    CHECK_OK(dt_pool_create(2, &pool));
    dt_optim_config c;
    dt_optim_config_default(&c, DT_OPT_ADAM);
    dt_optim a, b;
    two_optimizers(&c, &params, &a, &b);
    for (int s = 0; s < 3; s++) {
        dt_optim_step(&a, NULL, p1, g, n);
        dt_optim_step(&b, pool, p2, g, n);
    }
    CHECK(memcmp(p1, p2, n * 4) == 0);
    dt_optim_free(&a);
    dt_optim_free(&b);
    dt_pool_destroy(pool);
    dt_arena_free(&params);
    free(p1), free(p2), free(g);
}

/* Two copies of the same parameters, and gradients, for comparing two ways of stepping. */
static void same_start(float *p1, float *p2, float *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        p1[i] = p2[i] = (float)sin((double)i * 1.3);
        g[i] = (float)cos((double)i * 0.37) * 0.1f;
    }
}

TEST(vector_updates_equal_scalar_updates_bit_for_bit)
{
    dt_arena params;
    dt_arena_init(&params);
    int dims[1] = {1003}; /* not a multiple of 8: the tail takes the scalar path */
    CHECK_OK(dt_arena_add(&params, "w", 1, dims, NULL));
    CHECK_OK(dt_arena_commit(&params));
    size_t n = 1003;
    for (int kind = DT_OPT_SGD; kind <= DT_OPT_ADAGRAD; kind++)
        for (int nesterov = 0; nesterov <= (kind == DT_OPT_MOMENTUM); nesterov++) {
            float p1[1003], p2[1003], g[1003];
            same_start(p1, p2, g, n);
            dt_optim_config c;
            dt_optim_config_default(&c, (dt_opt_kind)kind);
            c.nesterov = nesterov;
            dt_optim a, b;
            two_optimizers(&c, &params, &a, &b);
            b.scalar_only = true;
            for (int s = 0; s < 4; s++) {
                dt_optim_step(&a, NULL, p1, g, n);
                dt_optim_step(&b, NULL, p2, g, n);
            }
            CHECK_MSG(memcmp(p1, p2, sizeof p1) == 0, "%s%s: vector and scalar differ",
                      dt_opt_kind_name((dt_opt_kind)kind), nesterov ? " (nesterov)" : "");
            CHECK(p1[0] != (float)sin(0.0) || p1[5] != (float)sin(6.5)); /* it did move */
            dt_optim_free(&a);
            dt_optim_free(&b);
        }
    dt_arena_free(&params);
}

/* A step taken in parts, as ranks sharing the update take it (each over the range it owns, with
 * ranges that start anywhere, not on a vector's boundary), equals the whole step bit for bit,
 * slots included, for every optimizer and a schedule that changes the rate each step. */
TEST(step_in_ranges_equals_whole_step_bit_for_bit)
{
    dt_arena params;
    dt_arena_init(&params);
    int dims[1] = {70001}; /* over the threshold at which one range is split over the pool */
    CHECK_OK(dt_arena_add(&params, "w", 1, dims, NULL));
    CHECK_OK(dt_arena_commit(&params));
    size_t n = params.n_elems;
    float *p1 = malloc(n * 4), *p2 = malloc(n * 4), *g = malloc(n * 4);
    dt_pool *pool;
    CHECK_OK(dt_pool_create(2, &pool));
    const size_t cuts[] = {0, 3, 4100, 4101, n - 11, n}; /* n: 70001 and the arena's padding */
    for (int kind = DT_OPT_SGD; kind <= DT_OPT_ADAGRAD; kind++) {
        same_start(p1, p2, g, n);
        dt_optim_config c;
        dt_optim_config_default(&c, (dt_opt_kind)kind);
        c.schedule = DT_LR_COSINE;
        c.decay_steps = 10;
        dt_optim a, b;
        two_optimizers(&c, &params, &a, &b);
        for (int s = 0; s < 3; s++) {
            dt_optim_step(&a, NULL, p1, g, n);
            /* The ranges in an order of their own, the largest split over the pool. */
            for (int k = 4; k >= 0; k--)
                dt_optim_update_range(&b, k == 3 ? pool : NULL, p2, g + cuts[k], cuts[k],
                                      cuts[k + 1]);
            dt_optim_count_step(&b);
        }
        CHECK_MSG(memcmp(p1, p2, n * 4) == 0, "%s: the parameters differ",
                  dt_opt_kind_name((dt_opt_kind)kind));
        CHECK_MSG(a.state.n_elems == b.state.n_elems &&
                      memcmp(a.state.data, b.state.data, a.state.n_elems * 4) == 0,
                  "%s: the slots differ", dt_opt_kind_name((dt_opt_kind)kind));
        CHECK(a.iterations == 3 && b.iterations == 3);
        CHECK(p1[0] != (float)sin(0.0)); /* it did move */
        dt_optim_free(&a);
        dt_optim_free(&b);
    }
    dt_pool_destroy(pool);
    dt_arena_free(&params);
    free(p1), free(p2), free(g);
}
