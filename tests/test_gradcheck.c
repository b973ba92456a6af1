/* Finite-difference gradient checks: for every layer and every loss, the gradients backward
 * writes into the gradient arena match central differences of the loss. Each model is small and
 * uses every layer's options (padding, strides, activations); the checks go through the whole
 * model, so a wrong input gradient in a later layer shows in an earlier layer's parameters. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/model.h"
#include "dtrain/rng.h"
#include "test.h"

#define B 4

/* Mean loss of the batch at the current parameters. The dropout sequence restarts each call so
 * every evaluation sees the same masks. */
static double mean_loss(dt_model *m, const float *x, const int32_t *labels, bool training)
{
    dt_model_set_dropout_seed(m, 99);
    dt_model_forward(m, B, x, training);
    return dt_model_loss(m, B, labels, 1.0f / B, false, NULL) / B;
}

/* training false: the gradients of the inference forward (dropout the identity), taken after a
 * training forward has left its masks behind, which the backward must not apply. */
static void gradcheck_mode(const char *json, uint64_t seed, const dt_model_options *opts,
                           bool training)
{
    dt_model_spec spec;
    dt_model *m = NULL;
    CHECK_OK(dt_model_spec_from_json(json, "gradcheck", &spec));
    CHECK_OK(dt_model_create(&spec, B, NULL, opts, &m));
    if (!m)
        return;
    dt_model_init_params(m, seed);
    dt_arena *p = dt_model_params(m), *g = dt_model_grads(m);
    /* Non-zero biases, so that bias gradients and activations away from 0 are exercised. */
    dt_rng r;
    dt_rng_seed(&r, seed + 1);
    for (int v = 0; v < p->n_views; v++)
        if (strstr(p->views[v].name, "/bias"))
            for (size_t k = 0; k < p->views[v].n_elems; k++)
                dt_arena_view_data(p, v)[k] = 0.4f * (dt_rng_uniform(&r) - 0.5f);
    size_t n_in = dt_model_input_elems(m) * B;
    float *x = malloc(n_in * sizeof *x);
    for (size_t i = 0; i < n_in; i++)
        x[i] = dt_rng_uniform(&r);
    int K = dt_model_num_outputs(m);
    int32_t labels[B];
    for (int i = 0; i < B; i++)
        labels[i] = (int32_t)dt_rng_below(&r, K == 1 ? 2 : (uint64_t)K);

    dt_model_set_dropout_seed(m, 99);
    dt_model_forward(m, B, x, true);
    if (!training)
        dt_model_forward(m, B, x, false);
    dt_model_loss(m, B, labels, 1.0f / B, true, NULL);
    dt_model_zero_grads(m);
    dt_model_backward(m, B);

    const float eps = 1e-3f;
    for (int v = 0; v < p->n_views; v++) {
        float *w = dt_arena_view_data(p, v), *gw = dt_arena_view_data(g, v);
        size_t n = p->views[v].n_elems;
        double scale = 1e-3;
        for (size_t k = 0; k < n; k++)
            scale = fmax(scale, fabs(gw[k]));
        /* Up to 40 elements per tensor, spread over it. */
        size_t step = n > 40 ? n / 40 : 1;
        int bad = 0;
        for (size_t k = 0; k < n; k += step) {
            float saved = w[k];
            w[k] = saved + eps;
            double up = mean_loss(m, x, labels, training);
            w[k] = saved - eps;
            double down = mean_loss(m, x, labels, training);
            w[k] = saved;
            double fd = (up - down) / (2.0 * eps);
            if (fabs(fd - gw[k]) > 2e-2 * scale + 1e-4 && bad++ < 3)
                test_fail(__FILE__, __LINE__, "%s: %s[%zu]: backward %.6g, finite difference %.6g",
                          spec.name, p->views[v].name, k, gw[k], fd);
        }
    }
    free(x);
    dt_model_destroy(m);
}

static void gradcheck_model(const char *json, uint64_t seed, const dt_model_options *opts)
{
    gradcheck_mode(json, seed, opts, true);
}

/* DeepFM's MLP shape (dense, dropout, ...) fused and not, backward after an inference forward,
 * and dropout of rate 0 while training: a dropout that drops nothing is passed over. */
static const char *const dense_dropouts =
    "{\"name\": \"mlp\", \"input_shape\": [1, 1, 6], \"loss\": \"binary_crossentropy\", "
    "\"layers\": [{\"type\": \"dense\", \"units\": 5, \"activation\": \"relu\"},"
    "{\"type\": \"dropout\", \"rate\": 0.5},"
    "{\"type\": \"dense\", \"units\": 4, \"activation\": \"tanh\"},"
    "{\"type\": \"dropout\", \"rate\": 0},"
    "{\"type\": \"dense\", \"units\": 3, \"activation\": \"sigmoid\"},"
    "{\"type\": \"dropout\", \"rate\": 0.4},"
    "{\"type\": \"dense\", \"units\": 1}]}";

TEST(gradcheck_dropouts_training_and_inference)
{
    dt_model_options unfused = {.no_fuse = true};
    gradcheck_mode(dense_dropouts, 11, NULL, true);
    gradcheck_mode(dense_dropouts, 12, &unfused, true);
    gradcheck_mode(dense_dropouts, 13, NULL, false);
    gradcheck_mode(dense_dropouts, 14, &unfused, false);
}

TEST(gradcheck_conv_pool_padding_strides_dropout)
{
    gradcheck_model("{\"name\": \"convs\", \"input_shape\": [7, 6, 2], \"layers\": ["
                    "{\"type\": \"conv2d\", \"filters\": 3, \"kernel_size\": [3, 2], \"strides\": [2, 1],"
                    " \"padding\": \"same\", \"activation\": \"tanh\"},"
                    "{\"type\": \"max_pooling2d\", \"pool_size\": 2, \"strides\": 1, \"padding\": \"same\"},"
                    "{\"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 2, \"activation\": \"sigmoid\"},"
                    "{\"type\": \"flatten\"},"
                    "{\"type\": \"dense\", \"units\": 5, \"activation\": \"relu\"},"
                    "{\"type\": \"dropout\", \"rate\": 0.3},"
                    "{\"type\": \"dense\", \"units\": 3}]}",
                    1, NULL);
}

TEST(gradcheck_activation_layers_and_binary_crossentropy)
{
    gradcheck_model("{\"name\": \"acts\", \"input_shape\": [3, 3, 1], \"loss\": \"binary_crossentropy\","
                    " \"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 6},"
                    "{\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 5}, {\"type\": \"sigmoid\"},"
                    "{\"type\": \"dense\", \"units\": 4}, {\"type\": \"tanh\"},"
                    "{\"type\": \"dense\", \"units\": 3}]}",
                    2, NULL);
}

TEST(gradcheck_single_output_binary_crossentropy)
{
    gradcheck_model("{\"name\": \"binary\", \"input_shape\": [2, 3, 2], \"loss\": \"binary_crossentropy\","
                    " \"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 4,"
                    " \"activation\": \"tanh\"}, {\"type\": \"dense\", \"units\": 1}]}",
                    3, NULL);
}

TEST(gradcheck_mean_squared_error)
{
    gradcheck_model("{\"name\": \"mse\", \"input_shape\": [2, 2, 3], \"loss\": \"mse\","
                    " \"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 4,"
                    " \"activation\": \"sigmoid\"}, {\"type\": \"dense\", \"units\": 3}]}",
                    4, NULL);
}

static const char *const tutorial_like =
    "{\"name\": \"small_cnn\", \"input_shape\": [10, 12, 1], \"layers\": ["
    "{\"type\": \"conv2d\", \"filters\": 8, \"kernel_size\": 3, \"activation\": \"relu\"},"
    "{\"type\": \"max_pooling2d\"}, {\"type\": \"flatten\"},"
    "{\"type\": \"dense\", \"units\": 6, \"activation\": \"relu\"}, {\"type\": \"dense\", \"units\": 4}]}";

TEST(gradcheck_fused_conv_relu_pool)
{
    gradcheck_model(tutorial_like, 5, NULL);
}

TEST(gradcheck_unfused_conv_relu_pool)
{
    dt_model_options opts = {.no_fuse = true};
    gradcheck_model(tutorial_like, 5, &opts);
}

/* Batch normalisation in training mode, between dense layers and as the first layer. */
TEST(gradcheck_batch_normalization)
{
    gradcheck_model("{\"input_shape\": [1, 1, 6], \"layers\": ["
                    "{\"type\": \"batch_normalization\"},"
                    "{\"type\": \"dense\", \"units\": 5, \"activation\": \"relu\"},"
                    "{\"type\": \"batch_normalization\", \"momentum\": 0.9, \"epsilon\": 0.01},"
                    "{\"type\": \"dense\", \"units\": 3}]}", 21, NULL);
}

/* Batch normalisation's moving averages: one training forward moves them by (1 - momentum)
 * toward the batch's mean and biased variance; inference normalises with them. */
TEST(batch_normalization_moving_averages_and_inference)
{
    dt_model_spec spec;
    dt_model *m = NULL;
    CHECK_OK(dt_model_spec_from_json("{\"input_shape\": [1, 1, 2], \"layers\": ["
                                     "{\"type\": \"batch_normalization\", \"momentum\": 0.75},"
                                     "{\"type\": \"dense\", \"units\": 2}]}", "bn", &spec));
    CHECK_OK(dt_model_create(&spec, B, NULL, NULL, &m));
    if (!m)
        return;
    dt_model_init_params(m, 3);
    const float x[B * 2] = {1, 10, 2, 20, 3, 30, 6, 40};
    dt_model_forward(m, B, x, true);
    dt_arena *state = dt_model_state(m);
    const float *mm = dt_arena_view_data(state, dt_arena_find(state, "batch_normalization/moving_mean"));
    const float *mv = dt_arena_view_data(state, dt_arena_find(state, "batch_normalization/moving_variance"));
    /* Feature 0: mean 3, biased variance 3.5; feature 1: mean 25, variance 125. */
    CHECK_NEAR(mm[0], 0.25 * 3.0, 1e-6);
    CHECK_NEAR(mv[0], 0.75 + 0.25 * 3.5, 1e-6);
    CHECK_NEAR(mm[1], 0.25 * 25.0, 1e-6);
    CHECK_NEAR(mv[1], 0.75 + 0.25 * 125.0, 1e-5);
    /* Inference with gamma 1, beta 0: the dense layer sees (x - mm) / sqrt(mv + 0.001). */
    dt_arena *params = dt_model_params(m);
    const float *k = dt_arena_view_data(params, dt_arena_find(params, "dense/kernel"));
    const float *b = dt_arena_view_data(params, dt_arena_find(params, "dense/bias"));
    const float *y = dt_model_forward(m, B, x, false);
    for (int i = 0; i < B; i++) {
        double h0 = (x[2 * i] - mm[0]) / sqrt(mv[0] + 0.001), h1 = (x[2 * i + 1] - mm[1]) / sqrt(mv[1] + 0.001);
        CHECK_NEAR(y[2 * i], h0 * k[0] + h1 * k[2] + b[0], 1e-5);
        CHECK_NEAR(y[2 * i + 1], h0 * k[1] + h1 * k[3] + b[1], 1e-5);
    }
    dt_model_destroy(m);
}
