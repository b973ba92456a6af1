/* What the input layer offers the layers that score data (serve's predictions, train's
 * evaluations) besides its public header: not part of the public API. */
#ifndef DTRAIN_DATA_INPUT_INT_H
#define DTRAIN_DATA_INPUT_INT_H

#include "dtrain/input.h"

/* *io = *given (the data's own options: its format's keys, compression, parsing), or the
 * defaults when given is NULL, with batch_size as the batch. */
void dt_input_options_for_batch(dt_input_options *io, const dt_input_options *given,
                                int batch_size);

#endif
