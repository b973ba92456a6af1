/* Input columns carried beside the scores (internal to src/serve): a row parser that parses as
 * another one does and appends the named columns' text to each parsed row's raw bytes,
 * tab-separated (a column a row lacks is empty). CSV columns by the header's names, Criteo's by
 * label, I1..I13, C1..C26, a tf.Example's by feature key (a list's values joined by spaces). */
#ifndef DTRAIN_SERVE_KEEP_H
#define DTRAIN_SERVE_KEEP_H

#include "dtrain/sources.h"

typedef struct dt_keep dt_keep;

/* columns: comma-separated names. inner is copied; its ctx must outlive the keeper. */
dt_status dt_keep_new(const dt_row_parser *inner, const char *columns, dt_keep **out);
void dt_keep_free(dt_keep *k);
int dt_keep_count(const dt_keep *k);
const char *dt_keep_name(const dt_keep *k, int i);
/* The parser to give the pipeline; k must outlive it. */
dt_row_parser dt_keep_parser(dt_keep *k);

#endif
