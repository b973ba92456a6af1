/* A float as printf's "%.9g" writes it (9 significant digits, the shortest form that reads back
 * as the same float), without printf: scores are written a million a second, and printf's
 * general path (its arbitrary-precision digits, its locale) is the largest part of formatting
 * them. */
#ifndef DT_SERVE_FLOAT_TEXT_H
#define DT_SERVE_FLOAT_TEXT_H

#include <stddef.h>

/* Room for any float's text and its NUL. */
#define DT_FLOAT_TEXT_MAX 32

/* Writes x's "%.9g" text, byte for byte snprintf's in the C locale, and a NUL into out; returns
 * its length. */
size_t dt_float_text(float x, char out[DT_FLOAT_TEXT_MAX]);

#endif
