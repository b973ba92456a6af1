/* Fuzz target: Criteo TSV lines on arbitrary bytes. Checked, beyond the sanitizers: a line is
 * one row or an error that appends nothing; every row has 39 fields, the numeric ones with ids
 * 0..12 and finite values >= 0, the categorical ones with ids in [13, buckets) and value 1, and
 * a label of 0 or 1. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dtrain/criteo.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const int64_t buckets = 14 + (int64_t)(size % 1000);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        int before = b.n;
        dt_status st = dt_criteo_parse_line(p, len, buckets, &b);
        REQUIRE(st == DT_OK || st == DT_END || st == DT_ERR_FORMAT);
        REQUIRE(b.n == before + (st == DT_OK));
        p += len + (nl != NULL);
    }
    for (int r = 0; r < b.n; r++) {
        REQUIRE(b.labels[r] == 0.0f || b.labels[r] == 1.0f);
        REQUIRE(b.sp_row[r + 1] - b.sp_row[r] == DT_CRITEO_FIELDS);
        for (int f = 0; f < DT_CRITEO_FIELDS; f++) {
            int64_t k = b.sp_row[r] + f, id = b.sp_ids[k];
            float v = b.sp_vals[k];
            if (f < DT_CRITEO_NUMERIC)
                REQUIRE(id == f && isfinite(v) && v >= 0.0f);
            else
                REQUIRE(id >= DT_CRITEO_NUMERIC && id < buckets && v == 1.0f);
        }
    }
    dt_rowbuf_free(&b);
    return 0;
}
