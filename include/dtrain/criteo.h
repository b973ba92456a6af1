/* Criteo's click logs as they are published (Kaggle Display Advertising Challenge and Criteo
 * Terabyte): one example per line, tab-separated, a label (0 or 1), 13 integer columns (counts;
 * negative values occur) and 26 categorical columns (8 hex digits in the published files; any
 * bytes but a tab are taken), any column but the label possibly empty.
 *
 * Each line becomes one CTR row of 39 (id, value) fields, the usual preprocessing:
 *   numeric column i (0..12):      id i, value log(1 + max(x, 0)); an empty column gives 0
 *   categorical column j (0..25):  id 13 + dt_hash_bucket(j, token, hash_buckets - 13)
 *                                  (hash.h), value 1; an empty column hashes the empty token,
 *                                  a bucket of its own per field
 * so a table of hash_buckets rows holds every id, and no vocabulary pass is needed.
 *
 * Errors are DT_ERR_FORMAT naming the 1-based byte column and the Criteo column ("I3", "C7"):
 * "column 17 (I3): '4x' is not an integer", "column 1: label 2 is not 0 or 1", "column 210: 39
 * columns, Criteo rows have 40". */
#ifndef DTRAIN_CRITEO_H
#define DTRAIN_CRITEO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/rows.h"
#include "dtrain/status.h"

#define DT_CRITEO_NUMERIC 13
#define DT_CRITEO_CATEGORICAL 26
#define DT_CRITEO_FIELDS (DT_CRITEO_NUMERIC + DT_CRITEO_CATEGORICAL)

/* Parses one line (no '\n'; a trailing '\r' is ignored) into one row of out (n_dense 0) with
 * ids below hash_buckets (> 13). DT_END, appending nothing, for a blank line. On an error
 * appends nothing. */
DT_API dt_status dt_criteo_parse_line(const char *line, size_t len, int64_t hash_buckets,
                                      dt_rowbuf *out);

#endif
