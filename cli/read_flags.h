/* The flags that say how test or scoring data is read (dtrain evaluate, dtrain predict): one
 * declaration of each, its default and help, and one place that turns them into input options. */
#ifndef DTRAIN_CLI_READ_FLAGS_H
#define DTRAIN_CLI_READ_FLAGS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/input.h"
#include "flags.h"

typedef struct {
    const char *features, *label_key, *compression, *label_column, *ids_key, *values_key;
    int num_features, index_base, field_size;
    int64_t hash_buckets;
    bool csv_header;
} cli_read_flags;

/* Adds the flags, writing into v. field_help: what --field-size says (its default differs). */
void cli_read_flags_add(flag_table *t, cli_read_flags *v, const char *field_help);

/* Sets io's reading options from v and checks them; the error names the flag. */
dt_status cli_read_flags_apply(const cli_read_flags *v, dt_input_options *io);

#endif
