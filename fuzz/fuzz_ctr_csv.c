/* Fuzz target: CTR CSV on arbitrary bytes. The first line is taken as the header (columns
 * label, n, c, d; n numeric, c and d categorical), the rest as data. Checked, beyond the
 * sanitizers: each line is one row or an error that appends nothing; a row has 3 fields, the
 * numeric one id 0 with a finite value, the categorical ones ids in [1, buckets) with value 1,
 * and a label of 0 or 1. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dtrain/ctr_csv.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    const char *nl = memchr(p, '\n', size);
    size_t hlen = nl ? (size_t)(nl - p) : size;
    const int64_t buckets = 2 + (int64_t)(size % 50);
    dt_ctr_csv c;
    dt_status st = dt_ctr_csv_from_header(p, hlen, "n", "c,d", "label", ',', size & 1, buckets, &c);
    if (st != DT_OK) {
        REQUIRE(st == DT_ERR_INVALID || st == DT_ERR_FORMAT);
        return 0;
    }
    REQUIRE(c.n_fields == 3 && c.n_numeric == 1);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    p += hlen + (nl != NULL);
    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        size_t len = e ? (size_t)(e - p) : (size_t)(end - p);
        int before = b.n;
        st = dt_ctr_csv_parse_line(&c, p, len, &b);
        REQUIRE(st == DT_OK || st == DT_END || st == DT_ERR_FORMAT);
        REQUIRE(b.n == before + (st == DT_OK));
        p += len + (e != NULL);
    }
    for (int r = 0; r < b.n; r++) {
        REQUIRE(b.labels[r] == 0.0f || b.labels[r] == 1.0f);
        REQUIRE(b.sp_row[r + 1] - b.sp_row[r] == 3);
        int64_t k = b.sp_row[r];
        REQUIRE(b.sp_ids[k] == 0 && isfinite(b.sp_vals[k]));
        for (int f = 1; f < 3; f++)
            REQUIRE(b.sp_ids[k + f] >= 1 && b.sp_ids[k + f] < buckets && b.sp_vals[k + f] == 1.0f);
    }
    dt_rowbuf_free(&b);
    return 0;
}
