/* The dynamic tables of a columns model (internal to src/model): each dynamic table keyed by
 * its slots' keys through a key map (keymap.h). Tables read through the same slots share one
 * map (a column's linear weights and its embedding; a shared embedding and the columns' own
 * tables), so that a key has one row in all of them and a batch's entries can be turned into
 * rows once: the rest of the model then reads rows as it reads a fixed table's ids.
 *
 * A dynamic column's key comes in two entries of its slot (features.h, dt_feature_key_hi/lo);
 * the view of a batch holds one entry per key, its id the key's row (0, the zero row, for a key
 * not admitted or not known). */
#ifndef DTRAIN_MODEL_COLS_KEYS_H
#define DTRAIN_MODEL_COLS_KEYS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/keymap.h"
#include "dtrain/model_spec.h"
#include "dtrain/rows.h"
#include "dtrain/table.h"

typedef struct dt_col_keys dt_col_keys;

/* The maps of spec's dynamic tables, each table's rows in spec set to its map's capacity (what
 * its dt_table is then created with); *out NULL when no table is dynamic. A map under max_rows
 * holds `shards` times as many (a parameter-server coordinator reading its ps tasks' tables
 * back). Local (a parameter-server worker, whose ps tasks hold the maps): no map; a batch's keys
 * take the rows 0, 1, ... in key order, group by group, and the worker pulls their rows
 * (dt_col_keys_local). DT_ERR_INVALID naming the tables for two tables of one map under
 * different policies, or more tables than a map takes. */
dt_status dt_col_keys_create(dt_columns_spec *spec, int shards, bool local, dt_col_keys **out);
void dt_col_keys_destroy(dt_col_keys *k);
/* Attaches the created tables (tables[t] for spec's table t) to their maps. */
dt_status dt_col_keys_attach(dt_col_keys *k, dt_table *tables);
/* Table t's draws of new rows: seed (its fixed twin's, so that key j starts as row j would). */
void dt_col_keys_set_seed(dt_col_keys *k, int t, uint64_t seed);

/* Whether table t is dynamic (keyed, with a map or local). */
bool dt_col_keys_dynamic(const dt_col_keys *k, int t);
/* The map of table t, or NULL for a fixed table (and for every table when local). */
dt_keymap *dt_col_keys_map(const dt_col_keys *k, int t);
/* Local: the keys of table t's rows in the last view (row j holds keys[j]), or NULL for a fixed
 * table. */
const int64_t *dt_col_keys_local(const dt_col_keys *k, int t);
/* Uses owner's maps (a model sharing another's variables: an evaluation's). */
void dt_col_keys_share(dt_col_keys *k, const dt_col_keys *owner);

/* The view of e with each key turned into its row: counted and admitted at step when training
 * (dt_keymap_resolve), looked up when not; local, its index among the batch's distinct keys of
 * its group. Valid until the next call. DT_ERR_INVALID naming the
 * example and slot for a key whose second half is missing or past its bits; DT_ERR_NOMEM as
 * dt_keymap_resolve. */
dt_status dt_col_keys_view(dt_col_keys *k, const dt_elem *e, bool training, int64_t step,
                           const dt_elem **out);
/* After the tables' update at step: a page of eviction where a pass is due or under way. */
void dt_col_keys_updated(dt_col_keys *k, int64_t step);
/* The step of a restored checkpoint (whose save ran a whole eviction pass). */
void dt_col_keys_set_pass_step(dt_col_keys *k, int64_t step);

#endif
