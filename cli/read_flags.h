/* The flags that say how test or scoring data is read (dtrain evaluate, dtrain predict): one
 * row each, pointing at the field of the library's dt_input_options it sets. */
#ifndef DTRAIN_CLI_READ_FLAGS_H
#define DTRAIN_CLI_READ_FLAGS_H

#include "dtrain/input.h"
#include "flags.h"

/* Adds the flags, writing into io, their defaults io's own (dt_input_options_default first).
 * field_help: what --field-size says (the commands read it differently). */
void cli_read_flags_add(flag_table *t, dt_input_options *io, const char *field_help);

#endif
