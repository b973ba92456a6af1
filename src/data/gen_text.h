/* Text output of the data generators (gen_ctr.c, gen_census.c): numbers written straight into
 * a line being built, without printf's locale and format parsing on millions of fields.
 * Internal to src/data. */
#ifndef DTRAIN_DATA_GEN_TEXT_H
#define DTRAIN_DATA_GEN_TEXT_H

#include <stdint.h>

/* v in decimal at p; returns the end. At most 20 characters, no terminator. */
static inline char *dt_put_decimal(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do
        tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n)
        *p++ = tmp[--n];
    return p;
}

#endif
