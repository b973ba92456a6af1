/* Runs the registered tests: `unit [--counts FILE] [substring]`. Prints one line per test and a
 * summary; with --counts, writes "passed failed" to FILE for tests/run.sh. */
#include <ftw.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/nn/gemm.h"
#include "test.h"

#define MAX_TESTS 512

struct test_entry {
    const char *name;
    test_fn fn;
};

static struct test_entry tests[MAX_TESTS];
static int n_tests;
static int current_failures;
static char tmpdir[256];

void test_register(const char *name, test_fn fn)
{
    if (n_tests == MAX_TESTS) {
        fprintf(stderr, "too many tests\n");
        abort();
    }
    tests[n_tests].name = name;
    tests[n_tests].fn = fn;
    n_tests++;
}

int dt_test_failures(void) { return current_failures; }

void test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stdout, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    current_failures++;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

const char *test_tmpdir(void)
{
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/dtrain-test-XXXXXX");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            abort();
        }
    }
    return tmpdir;
}

const char *test_path(const char *name)
{
    static char buf[8][512];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", test_tmpdir(), name);
    return p;
}

void test_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct test_entry *)a)->name, ((const struct test_entry *)b)->name);
}

int main(int argc, char **argv)
{
    const char *counts = NULL, *filter = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--counts") == 0 && i + 1 < argc)
            counts = argv[++i];
        else
            filter = argv[i];
    }
    /* OpenBLAS on one thread, as the dtrain command sets it; the SIGBUS guard is left to the
     * tests that want it (a forked child), so the rest read files as a library user's program
     * does. */
    dt_gemm_setup();
    qsort(tests, (size_t)n_tests, sizeof tests[0], by_name);
    int passed = 0, failed = 0;
    for (int i = 0; i < n_tests; i++) {
        if (filter && !strstr(tests[i].name, filter))
            continue;
        current_failures = 0;
        tests[i].fn();
        fflush(stdout);
        if (current_failures) {
            printf("FAIL %s\n", tests[i].name);
            failed++;
        } else {
            printf("ok   %s\n", tests[i].name);
            passed++;
        }
        fflush(stdout);
    }
    if (tmpdir[0])
        nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    printf("unit: %d passed, %d failed\n", passed, failed);
    if (counts) {
        FILE *f = fopen(counts, "w");
        if (f) {
            fprintf(f, "%d %d\n", passed, failed);
            fclose(f);
        }
    }
    return failed ? 1 : 0;
}
