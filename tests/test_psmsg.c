/* The parameter server's messages: every type round-trips through encode and decode; every
 * truncation, a flipped byte anywhere, and each out-of-range field is DT_ERR_FORMAT naming the
 * peer and the byte. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/ps/psmsg.h"
#include "test.h"

static const int64_t ids[3] = {7, 0, 1099511627775};
static const float vals[6] = {0.5f, -1.0f, 2.0f, 3.0f, -0.25f, 1e-3f};

/* One message of each type. */
static void encode_all(dt_psbuf *b, size_t *ends)
{
    dt_psmsg m[11] = {
        {.type = DT_PSMSG_PING, .request_id = 1},
        {.type = DT_PSMSG_PONG, .request_id = 2},
        {.type = DT_PSMSG_STOP, .request_id = 3},
        {.type = DT_PSMSG_PULL_ROWS, .request_id = 4, .table = 1, .n = 3},
        {.type = DT_PSMSG_ROWS, .request_id = 5, .table = 1, .n = 3, .dim = 2},
        {.type = DT_PSMSG_PUSH_ROWS, .request_id = 6, .table = 2, .n = 3, .dim = 2, .step = 99,
         .lr_scale = 0.5f},
        {.type = DT_PSMSG_PULL_DENSE, .request_id = 7, .table = 3, .offset = 10, .count = 6},
        {.type = DT_PSMSG_DENSE, .request_id = 8, .table = 3, .offset = 10, .count = 6},
        {.type = DT_PSMSG_PUSH_DENSE, .request_id = 9, .table = 3, .offset = 0, .count = 6,
         .step = 5, .lr_scale = 1.0f},
        {.type = DT_PSMSG_ACK, .request_id = 10, .clock = 12345},
        {.type = DT_PSMSG_ERROR, .request_id = 11, .status = -4, .text = "shard 2 is restoring",
         .text_len = 20},
    };
    for (int k = 0; k < 11; k++) {
        CHECK_OK(dt_psmsg_encode(&m[k], ids, vals, b));
        ends[k] = b->len;
    }
}

TEST(psmsg_every_type_round_trips)
{
    dt_psbuf b = {0};
    size_t ends[11];
    encode_all(&b, ends);
    size_t at = 0;
    for (int k = 0; k < 11; k++) {
        dt_psmsg m;
        CHECK_OK(dt_psmsg_decode(b.data + at, ends[k] - at, "ps:0", &m));
        CHECK(m.type == (dt_psmsg_type)(k + 1) && m.request_id == (uint64_t)(k + 1));
        if (m.ids)
            for (int i = 0; i < 3; i++)
                CHECK(dt_psmsg_id(&m, (size_t)i) == ids[i]);
        if (m.values) {
            size_t nv = m.n ? (size_t)m.n * m.dim : (size_t)m.count;
            CHECK(nv == 6);
            for (size_t i = 0; i < nv; i++)
                CHECK(dt_psmsg_value(&m, i) == vals[i]);
        }
        if (m.type == DT_PSMSG_PUSH_ROWS)
            CHECK(m.step == 99 && m.lr_scale == 0.5f && m.dim == 2 && m.table == 2);
        if (m.type == DT_PSMSG_ACK)
            CHECK(m.clock == 12345);
        if (m.type == DT_PSMSG_ERROR)
            CHECK(m.status == -4 && m.text_len == 20 && memcmp(m.text, "shard 2 is restoring", 20) == 0);
        at = ends[k];
    }
    dt_psbuf_free(&b);
}

TEST(psmsg_truncations_and_flipped_bytes_are_named)
{
    dt_psbuf b = {0};
    size_t ends[11];
    encode_all(&b, ends);
    size_t lo = ends[4], hi = ends[5]; /* the PUSH_ROWS message */
    uint8_t *msg = b.data + lo;
    size_t n = hi - lo;
    dt_psmsg m;
    for (size_t cut = 0; cut < n; cut++)
        CHECK_MSG(dt_psmsg_decode(msg, cut, "worker:1", &m) == DT_ERR_FORMAT &&
                  strstr(dt_last_error(), "worker:1: ps message, byte"), "cut %zu: %s", cut,
                  dt_last_error());
    /* A flipped header byte is named; the payload's bytes are the transport's to authenticate
     * (test_session.c: a changed one fails its MAC). */
    for (size_t i = 0; i < DT_PSMSG_HEADER_BYTES; i++) {
        msg[i] ^= 0x20;
        CHECK_MSG(dt_psmsg_decode(msg, n, "worker:1", &m) == DT_ERR_FORMAT, "byte %zu flipped", i);
        msg[i] ^= 0x20;
    }
    CHECK_OK(dt_psmsg_decode(msg, n, "worker:1", &m));
    dt_psbuf_free(&b);
}

/* Well-formed frames (valid checksums) whose fields are out of range. */
TEST(psmsg_out_of_range_fields_are_refused)
{
    dt_psbuf b = {0};
    dt_psmsg m;
    int64_t neg[1] = {-5};
    float nan1[2] = {NAN, 1.0f};
    dt_psmsg pull = {.type = DT_PSMSG_PULL_ROWS, .n = 1};
    CHECK_OK(dt_psmsg_encode(&pull, neg, NULL, &b));
    CHECK(dt_psmsg_decode(b.data, b.len, "w", &m) == DT_ERR_FORMAT &&
          strstr(dt_last_error(), "a negative id"));
    b.len = 0;
    dt_psmsg push = {.type = DT_PSMSG_PUSH_DENSE, .count = 2, .lr_scale = 1.0f};
    CHECK_OK(dt_psmsg_encode(&push, NULL, nan1, &b));
    CHECK(dt_psmsg_decode(b.data, b.len, "w", &m) == DT_ERR_FORMAT &&
          strstr(dt_last_error(), "not finite"));
    b.len = 0;
    dt_psmsg huge = {.type = DT_PSMSG_ROWS, .n = DT_PSMSG_MAX_ROWS + 1, .dim = 1};
    CHECK(dt_psmsg_encode(&huge, NULL, NULL, &b) == DT_ERR_INVALID);
    dt_psbuf_free(&b);
}

/* A TABLE message carries a shard's definition whole; a shard index outside the shards, a
 * non-finite parameter or an unprintable name is refused naming its byte. */
TEST(psmsg_table_definition_round_trips_and_is_checked)
{
    dt_psmsg m = {.type = DT_PSMSG_TABLE, .request_id = 5, .table = 3 << 16 | 2, .dim = 32,
                  .rows_total = 1000, .n_shards = 5, .shard = 2, .strategy = 1, .optimizer = 2,
                  .init_stddev = 0.01f, .seed = 77, .text = "fm_v", .text_len = 4};
    for (int k = 0; k < DT_PSMSG_TABLE_PARAMS; k++)
        m.params[k] = 0.5f * (float)k;
    dt_psbuf b = {0};
    CHECK(dt_psmsg_encode(&m, NULL, NULL, &b) == DT_OK);
    dt_psmsg d;
    CHECK(dt_psmsg_decode(b.data, b.len, "peer", &d) == DT_OK);
    CHECK(d.type == DT_PSMSG_TABLE && d.table == m.table && d.dim == 32 && d.rows_total == 1000);
    CHECK(d.n_shards == 5 && d.shard == 2 && d.strategy == 1 && d.optimizer == 2 && d.seed == 77);
    CHECK(memcmp(d.params, m.params, sizeof m.params) == 0 && d.init_stddev == 0.01f);
    CHECK(d.text_len == 4 && memcmp(d.text, "fm_v", 4) == 0);
    struct { const char *what; dt_psmsg bad; } cases[] = {
        {"a shard index", m}, {"optimizer parameter", m}, {"not printable", m}};
    cases[0].bad.shard = 5;
    cases[1].bad.params[3] = NAN;
    cases[2].bad.text = "fm v";
    for (int i = 0; i < 3; i++) {
        b.len = 0;
        CHECK(dt_psmsg_encode(&cases[i].bad, NULL, NULL, &b) == DT_OK);
        CHECK(dt_psmsg_decode(b.data, b.len, "peer", &d) == DT_ERR_FORMAT);
        CHECK_MSG(strstr(dt_last_error(), cases[i].what) && strstr(dt_last_error(), "byte "),
                  "%s", dt_last_error());
    }
    dt_psbuf_free(&b);
}

/* A RING message carries the workers' ring ports (none, one, or every worker's); port 0 and a
 * count beyond the payload are refused. */
TEST(psmsg_ring_ports_round_trip_and_are_checked)
{
    const uint16_t ports[3] = {4001, 65535, 1};
    dt_psbuf b = {0};
    dt_psmsg d;
    for (uint32_t n = 0; n <= 3; n++) {
        b.len = 0;
        dt_psmsg m = {.type = DT_PSMSG_RING, .request_id = 9, .n = n, .ports_host = ports};
        CHECK_OK(dt_psmsg_encode(&m, NULL, NULL, &b));
        CHECK_OK(dt_psmsg_decode(b.data, b.len, "worker:0", &d));
        CHECK(d.type == DT_PSMSG_RING && d.n == n);
        for (uint32_t i = 0; i < n; i++)
            CHECK(dt_psmsg_port(&d, i) == ports[i]);
    }
    const uint16_t zero[2] = {4001, 0};
    b.len = 0;
    dt_psmsg bad = {.type = DT_PSMSG_RING, .n = 2, .ports_host = zero};
    CHECK_OK(dt_psmsg_encode(&bad, NULL, NULL, &b));
    CHECK(dt_psmsg_decode(b.data, b.len, "worker:0", &d) == DT_ERR_FORMAT);
    CHECK_MSG(strstr(dt_last_error(), "port 0") && strstr(dt_last_error(), "byte 34"), "%s",
              dt_last_error());
    dt_psmsg many = {.type = DT_PSMSG_RING, .n = DT_PSMSG_MAX_RING + 1, .ports_host = ports};
    CHECK(dt_psmsg_encode(&many, NULL, NULL, &b) == DT_ERR_INVALID);
    dt_psbuf_free(&b);
}

/* STEP and STEPS (a sparse cluster's global step) round trip; a kind above LEAVE, a negative
 * floor and a ready flag above 1 are refused, naming the byte. */
TEST(psmsg_step_round_trips_and_is_checked)
{
    dt_psbuf b = {0};
    dt_psmsg d, m = {.type = DT_PSMSG_STEP, .request_id = 5, .target = DT_PSMSG_STEP_READY,
                     .n = 7, .step = 1200};
    CHECK_OK(dt_psmsg_encode(&m, NULL, NULL, &b));
    CHECK_OK(dt_psmsg_decode(b.data, b.len, "worker:0", &d));
    CHECK(d.type == DT_PSMSG_STEP && d.target == DT_PSMSG_STEP_READY && d.n == 7 &&
          d.step == 1200);
    b.len = 0;
    dt_psmsg r = {.type = DT_PSMSG_STEPS, .request_id = 5, .clock = 1207, .done = 1, .rows = 3};
    CHECK_OK(dt_psmsg_encode(&r, NULL, NULL, &b));
    CHECK_OK(dt_psmsg_decode(b.data, b.len, "ps:0", &d));
    CHECK(d.type == DT_PSMSG_STEPS && d.clock == 1207 && d.done == 1 && d.rows == 3);
    dt_psmsg bad[3] = {m, m, r};
    bad[0].target = 4;
    bad[1].step = -1;
    bad[2].done = 2;
    for (int i = 0; i < 3; i++) {
        b.len = 0;
        CHECK_OK(dt_psmsg_encode(&bad[i], NULL, NULL, &b));
        CHECK(dt_psmsg_decode(b.data, b.len, "worker:0", &d) == DT_ERR_FORMAT);
        CHECK_MSG(strstr(dt_last_error(), "byte 28") && strstr(dt_last_error(), "worker:0"),
                  "%s", dt_last_error());
    }
    dt_psbuf_free(&b);
}

/* SAVE names the checkpoint's step and the directory its shard goes to; an empty directory or
 * one with a control byte is refused. */
TEST(psmsg_save_round_trips_and_is_checked)
{
    dt_psbuf b = {0};
    dt_psmsg d, m = {.type = DT_PSMSG_SAVE, .request_id = 3, .step = 938, .n_shards = 3,
                     .text = "/models/ctr", .text_len = 11};
    CHECK_OK(dt_psmsg_encode(&m, NULL, NULL, &b));
    CHECK_OK(dt_psmsg_decode(b.data, b.len, "chief:0", &d));
    CHECK(d.type == DT_PSMSG_SAVE && d.step == 938 && d.n_shards == 3 && d.text_len == 11 &&
          memcmp(d.text, "/models/ctr", 11) == 0);
    dt_psmsg bad[2] = {m, m};
    bad[0].text_len = 0;
    bad[1].text = "/models\nctr";
    for (int i = 0; i < 2; i++) {
        b.len = 0;
        CHECK_OK(dt_psmsg_encode(&bad[i], NULL, NULL, &b));
        CHECK(dt_psmsg_decode(b.data, b.len, "chief:0", &d) == DT_ERR_FORMAT);
    }
    CHECK(strstr(dt_last_error(), "not printable") && strstr(dt_last_error(), "byte 51"));
    m.n_shards = 0;
    b.len = 0;
    CHECK_OK(dt_psmsg_encode(&m, NULL, NULL, &b));
    CHECK(dt_psmsg_decode(b.data, b.len, "chief:0", &d) == DT_ERR_FORMAT);
    CHECK(strstr(dt_last_error(), "a ps count outside 1..65535"));
    dt_psbuf_free(&b);
}
