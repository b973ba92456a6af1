/* What the data generators (gen_ctr.c, gen_census.c) share: the calibration of a teacher's
 * bias, and numbers written straight into a line being built, without printf's locale and
 * format parsing on millions of fields. Internal to src/data. */
#ifndef DTRAIN_DATA_GEN_INT_H
#define DTRAIN_DATA_GEN_INT_H

#include <stdint.h>

/* The bias b that makes the mean of sigmoid(z[i] + b) over the n logits z equal rate, by 50
 * steps of bisection in [-20, 20] (gen_ctr.c). */
double dt_gen_bias_for_rate(const double *z, int n, double rate);

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
