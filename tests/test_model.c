/* Model specs (built-ins, JSON and its errors) and model construction. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/model.h"
#include "dtrain/optim.h"
#include "test.h"

TEST(builtin_mnist_cnn_is_the_tutorial_model)
{
    dt_model_spec s;
    CHECK_OK(dt_model_spec_builtin("mnist_cnn", &s));
    CHECK(s.n_layers == 5);
    CHECK(s.layers[0].kind == DT_LAYER_CONV2D && s.layers[0].filters == 32 && s.layers[0].kernel[0] == 3);
    CHECK(s.layers[0].activation == DT_ACT_RELU && !s.layers[0].same);
    CHECK(s.layers[1].kind == DT_LAYER_MAXPOOL2D && s.layers[1].pool[0] == 2);
    CHECK(s.layers[3].units == 64 && s.layers[3].activation == DT_ACT_RELU);
    CHECK(s.layers[4].units == 10 && s.layers[4].activation == DT_ACT_NONE);
    CHECK(strcmp(s.layers[4].name, "dense_1") == 0);
    s.input_shape[0] = 28, s.input_shape[1] = 28, s.input_shape[2] = 1;
    dt_model *m;
    CHECK_OK(dt_model_create(&s, 64, NULL, NULL, &m));
    dt_arena *p = dt_model_params(m);
    /* Keras counts 347,146 parameters for this model. */
    CHECK(dt_arena_payload_elems(p) == 347146);
    const char *names[] = {"conv2d/kernel", "conv2d/bias", "dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"};
    for (int i = 0; i < 6; i++)
        CHECK_MSG(dt_arena_find(p, names[i]) == i, "%s", names[i]);
    int k = dt_arena_find(p, "conv2d/kernel");
    CHECK(p->views[k].n_dims == 4 && p->views[k].dims[0] == 3 && p->views[k].dims[3] == 32);
    k = dt_arena_find(p, "dense/kernel");
    CHECK(p->views[k].dims[0] == 5408 && p->views[k].dims[1] == 64);
    dt_model_init_params(m, 1);
    /* Glorot uniform bound for the dense kernel: sqrt(6 / (5408 + 64)). */
    float limit = sqrtf(6.0f / (5408 + 64)), lo = 0, hi = 0;
    const float *w = dt_arena_view_data(p, k);
    for (size_t i = 0; i < p->views[k].n_elems; i++)
        lo = fminf(lo, w[i]), hi = fmaxf(hi, w[i]);
    CHECK(lo >= -limit && hi <= limit && hi > 0.95f * limit && lo < -0.95f * limit);
    const float *bias = dt_arena_view_data(p, dt_arena_find(p, "dense/bias"));
    for (int i = 0; i < 64; i++)
        CHECK(bias[i] == 0.0f);
    dt_model_destroy(m);
    CHECK_ERR(dt_model_spec_builtin("resnet50", &s), DT_ERR_INVALID, "unknown model 'resnet50'");
}

TEST(json_model_parses_every_option)
{
    dt_model_spec s;
    CHECK_OK(dt_model_spec_from_json(
        "{\"name\": \"net\", \"input_shape\": [28, 28, 1], \"loss\": \"mse\", \"layers\": ["
        "{\"type\": \"Conv2D\", \"filters\": 8, \"kernel_size\": [3, 5], \"strides\": 2, \"padding\": \"same\", \"activation\": \"tanh\"},"
        "{\"type\": \"MaxPooling2D\", \"pool_size\": [3, 2]},"
        "{\"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 2, \"name\": \"second\"},"
        "{\"type\": \"flatten\"}, {\"type\": \"dropout\", \"rate\": 0.5},"
        "{\"type\": \"dense\", \"units\": 3, \"activation\": \"sigmoid\"}]}",
        "net.json", &s));
    CHECK(strcmp(s.name, "net") == 0 && s.loss == DT_LOSS_MEAN_SQUARED_ERROR);
    CHECK(s.input_shape[0] == 28 && s.input_shape[2] == 1 && s.n_layers == 6);
    CHECK(s.layers[0].kernel[0] == 3 && s.layers[0].kernel[1] == 5 && s.layers[0].strides[1] == 2);
    CHECK(s.layers[0].same && s.layers[0].activation == DT_ACT_TANH);
    CHECK(s.layers[1].pool[0] == 3 && s.layers[1].strides[0] == 3 && s.layers[1].strides[1] == 2);
    CHECK(strcmp(s.layers[0].name, "conv2d") == 0 && strcmp(s.layers[2].name, "second") == 0);
    CHECK(s.layers[4].rate == 0.5f);
    dt_model *m;
    CHECK_OK(dt_model_create(&s, 4, NULL, NULL, &m));
    CHECK(dt_model_num_outputs(m) == 3);
    CHECK(dt_arena_find(dt_model_params(m), "second/kernel") >= 0);
    dt_model_destroy(m);
}

struct bad_json {
    const char *text, *needle;
};

TEST(json_model_errors_name_the_field)
{
    static const struct bad_json cases[] = {
        {"{\"layers\": [{\"type\": \"dense\", \"units\": 10}],\n \"loss\": 3,}", "m.json: line 2, column"},
        {"[1, 2]", "m.json: expected a JSON object"},
        {"{\"layers\": []}", "m.json: layers: expected a non-empty list"},
        {"{\"layer\": []}", "m.json: layer: unknown key"},
        {"{\"layers\": [{\"units\": 3}]}", "m.json: layers[0].type: missing"},
        {"{\"layers\": [{\"type\": \"lstm\"}]}", "m.json: layers[0].type: unknown layer type 'lstm'"},
        {"{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\"}]}", "m.json: layers[1].units: expected an integer"},
        {"{\"layers\": [{\"type\": \"dense\", \"units\": 2.5}]}", "layers[0].units: expected an integer"},
        {"{\"layers\": [{\"type\": \"dense\", \"units\": 4, \"unit\": 4}]}", "layers[0].unit: not an option of a dense layer"},
        {"{\"layers\": [{\"type\": \"dense\", \"units\": 4, \"activation\": \"gelu\"}]}", "layers[0].activation: expected one of"},
        {"{\"layers\": [{\"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": [3]}]}", "layers[0].kernel_size: expected an integer or a list of two"},
        {"{\"layers\": [{\"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 3, \"padding\": \"full\"}]}", "layers[0].padding: expected \"valid\" or \"same\""},
        {"{\"layers\": [{\"type\": \"dropout\", \"rate\": 1.5}]}", "layers[0].rate: expected a number in [0, 1)"},
        {"{\"layers\": [{\"type\": \"dense\", \"units\": 4, \"name\": \"a\"}, {\"type\": \"dense\", \"units\": 4, \"name\": \"a\"}]}", "layers[1].name: 'a' is already used by layers[0]"},
        {"{\"input_shape\": [28, 28], \"layers\": [{\"type\": \"flatten\"}]}", "input_shape: expected [height, width, channels]"},
        {"{\"loss\": \"hinge\", \"layers\": [{\"type\": \"flatten\"}]}", "loss: expected"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dt_model_spec s;
        dt_status st = dt_model_spec_from_json(cases[i].text, "m.json", &s);
        CHECK_MSG(st == DT_ERR_INVALID, "case %zu accepted", i);
        CHECK_MSG(strstr(dt_last_error(), cases[i].needle) != NULL, "case %zu: '%s' lacks '%s'", i,
                  dt_last_error(), cases[i].needle);
    }
}

TEST(json_model_file_errors)
{
    dt_model_spec s;
    char path[512];
    snprintf(path, sizeof path, "%s/missing.json", test_tmpdir());
    CHECK_ERR(dt_model_spec_from_json_file(path, &s), DT_ERR_IO, "missing.json: cannot open");
    snprintf(path, sizeof path, "%s/nul.json", test_tmpdir());
    FILE *f = fopen(path, "wb");
    fwrite("{\"a\"\0}", 1, 6, f);
    fclose(f);
    CHECK_ERR(dt_model_spec_from_json_file(path, &s), DT_ERR_INVALID, "nul.json: offset 4: a NUL byte");
}

TEST(model_shape_errors_name_the_layer)
{
    dt_model_spec s;
    dt_model *m;
    CHECK_OK(dt_model_spec_from_json("{\"input_shape\": [8, 8, 1], \"layers\": [{\"type\": \"dense\", \"units\": 3}]}", "a", &s));
    CHECK_ERR(dt_model_create(&s, 4, NULL, NULL, &m), DT_ERR_INVALID, "layers[0] (dense): dense needs a flat input");
    CHECK_OK(dt_model_spec_from_json("{\"input_shape\": [4, 4, 1], \"layers\": [{\"type\": \"conv2d\", \"filters\": 2, \"kernel_size\": 5}, {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 2}]}", "b", &s));
    CHECK_ERR(dt_model_create(&s, 4, NULL, NULL, &m), DT_ERR_INVALID, "layers[0] (conv2d): the kernel is larger than the input");
    CHECK_OK(dt_model_spec_from_json("{\"input_shape\": [4, 4, 1], \"layers\": [{\"type\": \"conv2d\", \"filters\": 2, \"kernel_size\": 3}]}", "c", &s));
    CHECK_ERR(dt_model_create(&s, 4, NULL, NULL, &m), DT_ERR_INVALID, "flatten it");
    CHECK_OK(dt_model_spec_from_json("{\"input_shape\": [4, 4, 1], \"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 1}]}", "d", &s));
    CHECK_ERR(dt_model_create(&s, 4, NULL, NULL, &m), DT_ERR_INVALID, "at least 2 outputs");
    CHECK_OK(dt_model_spec_builtin("mlp", &s));
    CHECK_ERR(dt_model_create(&s, 4, NULL, NULL, &m), DT_ERR_INVALID, "input_shape is not set");
}

TEST(fused_and_unfused_models_agree)
{
    dt_model_spec s;
    CHECK_OK(dt_model_spec_builtin("mnist_cnn", &s));
    s.input_shape[0] = 28, s.input_shape[1] = 28, s.input_shape[2] = 1;
    dt_model *a, *b;
    dt_model_options unfused = {.no_fuse = true};
    CHECK_OK(dt_model_create(&s, 8, NULL, NULL, &a));
    CHECK_OK(dt_model_create(&s, 8, NULL, &unfused, &b));
    dt_model_init_params(a, 3);
    dt_model_init_params(b, 3);
    float *x = malloc(8 * 784 * sizeof *x);
    for (int i = 0; i < 8 * 784; i++)
        x[i] = (float)((i * 37) % 256) / 255.0f;
    int32_t labels[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const float *ya = dt_model_forward(a, 8, x, true);
    const float *yb = dt_model_forward(b, 8, x, true);
    for (int i = 0; i < 80; i++)
        CHECK_NEAR(ya[i], yb[i], 1e-5);
    double la = dt_model_loss(a, 8, labels, 1.0f / 8, true, NULL);
    double lb = dt_model_loss(b, 8, labels, 1.0f / 8, true, NULL);
    CHECK_NEAR(la, lb, 1e-5);
    dt_model_zero_grads(a), dt_model_zero_grads(b);
    dt_model_backward(a, 8), dt_model_backward(b, 8);
    dt_arena *ga = dt_model_grads(a), *gb = dt_model_grads(b);
    for (size_t i = 0; i < ga->n_elems; i++)
        if (fabs(ga->data[i] - gb->data[i]) > 1e-5 * fmax(1.0, fabs(gb->data[i]))) {
            CHECK_MSG(0, "gradient element %zu: %g vs %g", i, ga->data[i], gb->data[i]);
            break;
        }
    free(x);
    dt_model_destroy(a);
    dt_model_destroy(b);
}

static dt_status model_from(const char *json, int batch, dt_model **m)
{
    dt_model_spec s;
    dt_status st = dt_model_spec_from_json(json, "t.json", &s);
    if (st)
        return st;
    return dt_model_create(&s, batch, NULL, NULL, m);
}

TEST(same_pooling_over_an_odd_conv_output_is_not_fused)
{
    /* 29x29 -> conv 27x27 -> same pooling 14x14: the fused kernel must not take it. */
    const char *json = "{\"input_shape\": [29, 29, 1], \"layers\": ["
                       "{\"type\": \"conv2d\", \"filters\": 8, \"kernel_size\": 3, \"activation\": \"relu\"},"
                       "{\"type\": \"max_pooling2d\", \"padding\": \"same\"}, {\"type\": \"flatten\"},"
                       "{\"type\": \"dense\", \"units\": 3}]}";
    dt_model_spec s;
    CHECK_OK(dt_model_spec_from_json(json, "t.json", &s));
    dt_model *a = NULL, *b = NULL;
    dt_model_options unfused = {.no_fuse = true};
    CHECK_OK(dt_model_create(&s, 2, NULL, NULL, &a));
    CHECK_OK(dt_model_create(&s, 2, NULL, &unfused, &b));
    if (!a || !b)
        return;
    dt_model_init_params(a, 1);
    dt_model_init_params(b, 1);
    float x[2 * 29 * 29];
    for (int i = 0; i < 2 * 29 * 29; i++)
        x[i] = (float)((i * 17) % 255) / 255.0f;
    const float *ya = dt_model_forward(a, 2, x, false), *yb = dt_model_forward(b, 2, x, false);
    for (int i = 0; i < 6; i++)
        CHECK_NEAR(ya[i], yb[i], 1e-6);
    dt_model_destroy(a);
    dt_model_destroy(b);
}

TEST(conv_on_a_one_by_one_map_is_accepted)
{
    dt_model *m = NULL;
    CHECK_OK(model_from("{\"input_shape\": [28, 28, 1], \"layers\": ["
                        "{\"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 28},"
                        "{\"type\": \"conv2d\", \"filters\": 3, \"kernel_size\": 1},"
                        "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 2}]}", 2, &m));
    dt_model_destroy(m);
    CHECK_ERR(model_from("{\"input_shape\": [4, 4, 1], \"layers\": [{\"type\": \"flatten\"},"
                         "{\"type\": \"max_pooling2d\"}, {\"type\": \"dense\", \"units\": 2}]}", 2, &m),
              DT_ERR_INVALID, "max_pooling2d needs an (H, W, C) input, got a flat one");
}

TEST(oversized_models_fail_cleanly)
{
    dt_model *m = NULL;
    CHECK_ERR(model_from("{\"input_shape\": [65536, 65536, 1], \"layers\": [{\"type\": \"flatten\"},"
                         "{\"type\": \"dense\", \"units\": 2}]}", 1, &m),
              DT_ERR_INVALID, "layers[0] (flatten): input larger than 2^28 elements");
    /* 2^24 outputs per example at batch 10^6: hundreds of terabytes of activations on any machine. */
    CHECK_ERR(model_from("{\"input_shape\": [1, 1, 1], \"layers\": [{\"type\": \"flatten\"},"
                         "{\"type\": \"dense\", \"units\": 16777216}, {\"type\": \"dense\", \"units\": 2}]}", 1000000, &m),
              DT_ERR_INVALID, "GB for its parameters, gradients and buffers at batch 1000000; this machine has");
    CHECK_ERR(model_from("{\"input_shape\": [28, 28, 1], \"layers\": [{\"type\": \"flatten\"},"
                         "{\"type\": \"dense\", \"units\": 16000000}, {\"type\": \"dense\", \"units\": 2}]}", 1, &m),
              DT_ERR_INVALID, "more than dtrain's limit of 2^31");
}

TEST(long_layer_names_fit_every_optimizer_slot)
{
    dt_model *m = NULL;
    CHECK_OK(model_from("{\"input_shape\": [2, 2, 1], \"layers\": [{\"type\": \"flatten\"},"
                        "{\"type\": \"dense\", \"units\": 2, \"name\": \"a_layer_name_of_forty_seven_characters_long__x\"}]}",
                        2, &m));
    if (!m)
        return;
    for (int kind = DT_OPT_SGD; kind <= DT_OPT_ADAGRAD; kind++) {
        dt_optim_config c;
        dt_optim_config_default(&c, (dt_opt_kind)kind);
        dt_optim o;
        dt_optim_init(&o);
        CHECK_OK(dt_optim_setup(&o, &c, dt_model_params(m)));
        dt_optim_free(&o);
    }
    dt_model_destroy(m);
}

TEST(dropout_rate_that_rounds_to_one_is_rejected)
{
    dt_model_spec s;
    CHECK_ERR(dt_model_spec_from_json("{\"layers\": [{\"type\": \"dropout\", \"rate\": 0.99999999}]}", "d.json", &s),
              DT_ERR_INVALID, "layers[0].rate: expected a number in [0, 1)");
}
