/* A small test harness: TEST(name) { ... } registers a test; CHECK* macros record failures with
 * file:line and keep going, so one run reports every broken assertion of a test. */
#ifndef DTRAIN_TEST_H
#define DTRAIN_TEST_H

#include <math.h>
#include <stdio.h>

#include "dtrain/status.h"

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn);
void test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Failures the current test has recorded so far (a forked child reports them by its status). */
int dt_test_failures(void);

/* A fresh empty directory for this test's files, removed after the run. */
const char *test_tmpdir(void);

/* test_tmpdir()/name, in one of eight rotating buffers (valid for the next seven calls). */
const char *test_path(const char *name);

/* Writes n bytes to path, recording a failure if it cannot. */
void test_write_file(const char *path, const void *data, size_t n);

#define TEST(name)                                                                                 \
    static void name(void);                                                                        \
    __attribute__((constructor)) static void register_##name(void) { test_register(#name, name); } \
    static void name(void)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            test_fail(__FILE__, __LINE__, "%s", #cond);                                            \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            test_fail(__FILE__, __LINE__, __VA_ARGS__);                                            \
    } while (0)

/* |a - b| <= tol * max(1, |a|, |b|): relative for large values, absolute near zero. */
#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double a_ = (a), b_ = (b), m_ = fmax(1.0, fmax(fabs(a_), fabs(b_)));                       \
        if (!(fabs(a_ - b_) <= (tol) * m_))                                                        \
            test_fail(__FILE__, __LINE__, "%s = %.9g, %s = %.9g, differ by more than %g", #a, a_,  \
                      #b, b_, (double)(tol));                                                      \
    } while (0)

#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        dt_status s_ = (expr);                                                                     \
        if (s_ != DT_OK)                                                                           \
            test_fail(__FILE__, __LINE__, "%s failed (%d): %s", #expr, s_, dt_last_error());       \
    } while (0)

/* The call fails with code and its message contains needle. */
#define CHECK_ERR(expr, code, needle)                                                              \
    do {                                                                                           \
        dt_status s_ = (expr);                                                                     \
        if (s_ != (code))                                                                          \
            test_fail(__FILE__, __LINE__, "%s returned %d, expected %d (%s)", #expr, s_, (code),   \
                      dt_last_error());                                                            \
        else if (!strstr(dt_last_error(), (needle)))                                               \
            test_fail(__FILE__, __LINE__, "%s: message '%s' lacks '%s'", #expr, dt_last_error(),   \
                      (needle));                                                                   \
    } while (0)

#endif
