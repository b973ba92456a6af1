/* What the fuzz targets share: REQUIRE, an invariant that stops the run with the condition, its
 * place and the last error message when it does not hold. */
#ifndef DTRAIN_FUZZ_H
#define DTRAIN_FUZZ_H

#include <stdio.h>

#include "dtrain/status.h"

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "invariant failed: %s (%s:%d), last error: %s\n", #cond, __FILE__,    \
                    __LINE__, dt_last_error());                                                    \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

#endif
