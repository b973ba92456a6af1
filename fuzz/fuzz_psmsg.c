/* Fuzz target: the parameter server's message decoder on arbitrary bytes. Checked, beyond the
 * sanitizers: a decoded message's views lie inside the input, its counts within the limits, its
 * pushed values finite; and re-encoding it gives the same bytes back. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/ps/psmsg.h"
#include "../src/core/crc32c.h"
#include "fuzz.h"

static void check(const uint8_t *data, size_t size);

/* The raw input, and a copy whose checksums are made right, so mutations reach the fields. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    if (size >= DT_PSMSG_HEADER_BYTES) {
        uint8_t *copy = malloc(size);
        REQUIRE(copy);
        memcpy(copy, data, size);
        uint32_t len = (uint32_t)(size - DT_PSMSG_HEADER_BYTES);
        for (int i = 0; i < 4; i++)
            copy[16 + i] = (uint8_t)(len >> (8 * i)), copy[20 + i] = 0;
        uint32_t head = dt_crc32c(copy, 24);
        for (int i = 0; i < 4; i++)
            copy[24 + i] = (uint8_t)(head >> (8 * i));
        check(copy, size);
        free(copy);
    }
    return 0;
}

static void check(const uint8_t *data, size_t size)
{
    dt_psmsg m;
    dt_status st = dt_psmsg_decode(data, size, "fuzz", &m);
    if (st != DT_OK) {
        REQUIRE(st == DT_ERR_FORMAT);
        return;
    }
    REQUIRE(m.n <= DT_PSMSG_MAX_ROWS && m.dim <= DT_PSMSG_MAX_DIM && m.text_len <= DT_PSMSG_MAX_TEXT);
    size_t n_ids = m.ids ? m.n : 0;
    size_t nv = !m.values                    ? 0
                : m.type == DT_PSMSG_ASSIGN ? (size_t)m.count * (1 + (size_t)m.slots)
                : m.type == DT_PSMSG_KEYED  ? (size_t)m.n * m.dim * (1 + (size_t)m.slots)
                : m.n                       ? (size_t)m.n * m.dim
                                            : (size_t)m.count;
    if (m.ids)
        REQUIRE(m.ids >= data && m.ids + 8 * n_ids <= data + size);
    if (m.values)
        REQUIRE(m.values >= data && m.values + 4 * nv <= data + size);
    int64_t *ids = malloc((n_ids ? n_ids : 1) * sizeof *ids);
    float *vals = malloc((nv ? nv : 1) * sizeof *vals);
    REQUIRE(ids && vals);
    for (size_t i = 0; i < n_ids; i++)
        ids[i] = dt_psmsg_id(&m, i);
    for (size_t i = 0; i < nv; i++)
        vals[i] = dt_psmsg_value(&m, i);
    uint16_t *ports = NULL;
    if (m.type == DT_PSMSG_RING) {
        REQUIRE(m.n <= DT_PSMSG_MAX_RING && m.ports >= data && m.ports + 2 * (size_t)m.n <= data + size);
        REQUIRE((ports = malloc((m.n ? m.n : 1) * sizeof *ports)));
        for (uint32_t i = 0; i < m.n; i++)
            REQUIRE((ports[i] = dt_psmsg_port(&m, i)) != 0);
        m.ports_host = ports;
    }
    uint32_t *times = NULL, *last = NULL;
    if (m.type == DT_PSMSG_PULL_KEYS || (m.type == DT_PSMSG_KEYED && m.times)) {
        REQUIRE(m.times >= data && m.times + 4 * (size_t)m.n <= data + size);
        REQUIRE((times = malloc((m.n ? m.n : 1) * sizeof *times)));
        for (uint32_t i = 0; i < m.n; i++)
            REQUIRE((times[i] = dt_psmsg_times(&m, i)) >= 1 || m.type == DT_PSMSG_KEYED);
        m.times_host = times;
    }
    if (m.type == DT_PSMSG_KEYED && m.last) {
        REQUIRE(m.last >= data && m.last + 4 * (size_t)m.n <= data + size);
        REQUIRE((last = malloc((m.n ? m.n : 1) * sizeof *last)));
        for (uint32_t i = 0; i < m.n; i++)
            REQUIRE((last[i] = dt_psmsg_last(&m, i)) >= 1);
        m.last_host = last;
    }
    if (m.type == DT_PSMSG_KEYED && m.target == DT_PSMSG_KEYED_BLOOM)
        REQUIRE((const uint8_t *)m.text >= data && (const uint8_t *)m.text + m.n <= data + size);
    dt_psbuf b = {0};
    REQUIRE(dt_psmsg_encode(&m, ids, vals, &b) == DT_OK);
    REQUIRE(b.len == size && memcmp(b.data, data, size) == 0);
    dt_psbuf_free(&b);
    free(times);
    free(last);
    free(ports);
    free(ids);
    free(vals);
}
