/* Features: TensorFlow's Fingerprint64 and FingerprintCat64 (src/features/fingerprint.c), against
 * values TensorFlow and Keras publish, values pinned at every length where the hash changes
 * branch, and FarmHash itself: libfarmhash's Fingerprint64 run as a separate program
 * (tests/progs/farmhash_judge.cc) on a few hundred byte strings. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtrain/rng.h"
#include "../src/features/fingerprint.h"
#include "test.h"

static uint64_t fp_str(const char *s) { return dt_fingerprint64(s, strlen(s)); }

TEST(fingerprint64_known_values)
{
    /* TensorFlow's own fingerprint tests. */
    CHECK(fp_str("Hello") == 15404698994557526151ULL);
    CHECK(fp_str("World") == 18308117990299812472ULL);
    /* The empty string hashes to FarmHash's third multiplier, and a NULL pointer is fine. */
    CHECK(dt_fingerprint64("", 0) == 0x9ae16a3b2f90404fULL);
    CHECK(dt_fingerprint64(NULL, 0) == 0x9ae16a3b2f90404fULL);
}

/* The example of Keras's Hashing layer documentation: Hashing(num_bins=3) on A..E. */
TEST(fingerprint_bucket_matches_keras_hashing)
{
    CHECK(dt_fingerprint_bucket("A", 1, 3) == 1);
    CHECK(dt_fingerprint_bucket("B", 1, 3) == 0);
    CHECK(dt_fingerprint_bucket("C", 1, 3) == 1);
    CHECK(dt_fingerprint_bucket("D", 1, 3) == 1);
    CHECK(dt_fingerprint_bucket("E", 1, 3) == 2);
}

/* The example of tf.strings.to_hash_bucket_fast's documentation. */
TEST(fingerprint_bucket_matches_to_hash_bucket_fast)
{
    CHECK(dt_fingerprint_bucket("Hello", 5, 3) == 0);
    CHECK(dt_fingerprint_bucket("TensorFlow", 10, 3) == 2);
    CHECK(dt_fingerprint_bucket("2.x", 3, 3) == 2);
}

/* TensorFlow's hashed cross of three string features, one each, as its sparse_cross_op tests pin
 * it. tf.sparse.cross_hashed (the SparseCross op, also behind crossed_column and Keras
 * HashedCrossing) starts from a hash key; the newer SparseCrossHashed op (Keras's list-input
 * Hashing without strong_hash) has no key and starts from the first feature's fingerprint. Both
 * take the result modulo INT64_MAX when there are no buckets, so that it stays non-negative. */
TEST(fingerprint_cat64_matches_tensorflow_sparse_cross)
{
    const uint64_t default_key = 0xDECAFCAFFEULL, int64_max = 0x7fffffffffffffffULL;
    const uint64_t f1 = fp_str("batch1-FC1-F1"), f2 = fp_str("batch1-FC2-F1"),
                   f3 = fp_str("batch1-FC3-F1");

    uint64_t h = default_key;
    h = dt_fingerprint_cat64(h, f1);
    h = dt_fingerprint_cat64(h, f2);
    h = dt_fingerprint_cat64(h, f3);
    CHECK(h % int64_max == 1971693436396284976ULL);
    CHECK(h % 100 == 83);

    uint64_t h_key1 = dt_fingerprint_cat64(
        dt_fingerprint_cat64(dt_fingerprint_cat64(default_key + 1, f1), f2), f3);
    CHECK(h_key1 % int64_max == 4847552627144134031ULL);

    uint64_t h_nokey = dt_fingerprint_cat64(dt_fingerprint_cat64(f1, f2), f3);
    CHECK(h_nokey % int64_max == 9186962005966787372ULL);
    CHECK(h_nokey % 100 == 79);

    /* Order matters: a cross of (a, b) is not one of (b, a). */
    CHECK(dt_fingerprint_cat64(f1, f2) != dt_fingerprint_cat64(f2, f1));
}

/* Lengths on both sides of every branch (0..3 bytes, 4..7, 8..16, 17..32, 33..64, the 64-byte
 * loop and its last-block overlap), on the bytes 7, 38, 69, ... (i * 31 + 7), with the values
 * libfarmhash gives. */
TEST(fingerprint64_at_every_branch_boundary)
{
    static const struct {
        size_t n;
        uint64_t fp;
    } cases[] = {
        {0, 11160318154034397263ULL},    {1, 6305636504242451570ULL},
        {2, 172658089014669113ULL},      {3, 6846658912458629505ULL},
        {4, 15920609078983942396ULL},    {5, 14022352984523573845ULL},
        {7, 6078383079216981503ULL},     {8, 15079902322784532122ULL},
        {9, 14543372515319665015ULL},    {15, 14066997000821131917ULL},
        {16, 15686757420722829688ULL},   {17, 18426422322569481577ULL},
        {31, 7034730737438268021ULL},    {32, 6557825886676886425ULL},
        {33, 15509195725936039944ULL},   {48, 6221035263919484914ULL},
        {63, 18383750520318060361ULL},   {64, 6210884751478203641ULL},
        {65, 6510967642095903190ULL},    {127, 9179598096963267461ULL},
        {128, 7120966749005495781ULL},   {129, 15628949882102983394ULL},
        {192, 15387633737199003054ULL},  {193, 3717088956640192673ULL},
        {1000, 9835797070652436353ULL},
    };
    uint8_t buf[1000];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(i * 31 + 7);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_MSG(dt_fingerprint64(buf, cases[i].n) == cases[i].fp, "length %zu", cases[i].n);
}

/* The loads are unaligned: the same bytes give the same value at every address. */
TEST(fingerprint64_does_not_depend_on_alignment)
{
    uint8_t src[200], buf[208];
    dt_rng r;
    dt_rng_seed(&r, 11);
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)dt_rng_next(&r);
    for (size_t n = 0; n <= sizeof src; n++) {
        uint64_t want = dt_fingerprint64(src, n);
        for (size_t off = 1; off < 8; off++) {
            memcpy(buf + off, src, n);
            CHECK_MSG(dt_fingerprint64(buf + off, n) == want, "length %zu at offset %zu", n, off);
        }
    }
}

/* --- libfarmhash as the judge --- */

#define JUDGE_MAX_CASES 400

typedef struct {
    size_t off, n;
} judge_case;

/* The cases' bytes, packed one after another (so most start at odd addresses). */
typedef struct {
    uint8_t *bytes;
    size_t n_bytes, cap;
    judge_case cases[JUDGE_MAX_CASES];
    int n_cases;
} judge_set;

static uint8_t *judge_add(judge_set *s, size_t n)
{
    if (s->n_cases == JUDGE_MAX_CASES || s->n_bytes + n > s->cap)
        abort(); /* the table below outgrew the sizes: a bug in this test */
    s->cases[s->n_cases++] = (judge_case){s->n_bytes, n};
    uint8_t *p = s->bytes + s->n_bytes;
    s->n_bytes += n;
    return p;
}

/* Random bytes at every length 0..130 twice (every branch and the first loop rounds), printable
 * ASCII as feature values look, and a few long inputs of many 64-byte rounds. */
static void judge_fill(judge_set *s)
{
    dt_rng r;
    dt_rng_seed(&r, 20240601);
    for (int rep = 0; rep < 2; rep++)
        for (size_t n = 0; n <= 130; n++) {
            uint8_t *p = judge_add(s, n);
            for (size_t i = 0; i < n; i++)
                p[i] = (uint8_t)dt_rng_next(&r);
        }
    for (int k = 0; k < 60; k++) {
        size_t n = (size_t)dt_rng_below(&r, 200);
        uint8_t *p = judge_add(s, n);
        for (size_t i = 0; i < n; i++)
            p[i] = (uint8_t)(' ' + dt_rng_below(&r, 95));
    }
    static const size_t long_lens[] = {191, 192, 193, 255, 256, 257, 1000, 4095, 4096, 4097};
    for (size_t k = 0; k < sizeof long_lens / sizeof long_lens[0]; k++) {
        uint8_t *p = judge_add(s, long_lens[k]);
        for (size_t i = 0; i < long_lens[k]; i++)
            p[i] = (uint8_t)dt_rng_next(&r);
    }
}

/* Runs the judge on every case and compares; every problem is a failure, never a skip, so that a
 * machine without the judge cannot pass this test unseen. */
TEST(fingerprint64_matches_libfarmhash)
{
    const char *judge = getenv("DTRAIN_FARMHASH_JUDGE");
    if (!judge || !*judge)
        judge = "build/tests/farmhash_judge";
    if (access(judge, X_OK) != 0) {
        CHECK_MSG(0, "the FarmHash judge %s is missing: build it with `make %s` (it needs g++ and "
                     "libfarmhash-dev), or point DTRAIN_FARMHASH_JUDGE at it", judge, judge);
        return;
    }
    const char *in_path = test_path("farmhash_judge.in");
    if (strchr(judge, '\'') || strchr(in_path, '\'')) {
        CHECK_MSG(0, "cannot quote the judge's path %s for the shell", judge);
        return;
    }

    judge_set *s = calloc(1, sizeof *s);
    CHECK(s != NULL);
    if (!s)
        return;
    s->cap = 1 << 16;
    s->bytes = malloc(s->cap);
    CHECK(s->bytes != NULL);
    FILE *in = NULL, *out = NULL;
    if (!s->bytes)
        goto done;
    judge_fill(s);

    in = fopen(in_path, "w");
    CHECK_MSG(in != NULL, "cannot write %s", in_path);
    if (!in)
        goto done;
    for (int c = 0; c < s->n_cases; c++) {
        const uint8_t *p = s->bytes + s->cases[c].off;
        for (size_t i = 0; i < s->cases[c].n; i++)
            fprintf(in, "%02x", p[i]);
        fputc('\n', in);
    }
    int write_failed = ferror(in);
    write_failed |= fclose(in) != 0;
    CHECK_MSG(!write_failed, "cannot write %s", in_path);
    if (write_failed)
        goto done;

    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' < '%s'", judge, in_path);
    fflush(stdout);
    out = popen(cmd, "r");
    CHECK_MSG(out != NULL, "cannot run the FarmHash judge %s", judge);
    if (!out)
        goto done;
    char line[64];
    int n_read = 0, n_wrong = 0;
    while (fgets(line, sizeof line, out)) {
        if (n_read == s->n_cases) {
            CHECK_MSG(0, "the judge printed more lines than the %d cases", s->n_cases);
            break;
        }
        judge_case jc = s->cases[n_read++];
        char *end;
        uint64_t want = strtoull(line, &end, 10);
        uint64_t got = dt_fingerprint64(s->bytes + jc.off, jc.n);
        if (end == line || (*end != '\n' && *end != '\0')) {
            CHECK_MSG(0, "the judge's line %d is not a number: %s", n_read, line);
            n_wrong++;
        } else if (got != want && ++n_wrong <= 10) {
            CHECK_MSG(0, "case %d (%zu bytes): dt_fingerprint64 %llu, libfarmhash %llu", n_read,
                      jc.n, (unsigned long long)got, (unsigned long long)want);
        }
    }
    int status = pclose(out);
    CHECK_MSG(status == 0, "the FarmHash judge %s failed (%s %d)", judge,
              WIFSIGNALED(status) ? "signal" : "exit status",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    CHECK_MSG(n_read == s->n_cases, "the judge answered %d of %d cases", n_read, s->n_cases);
    CHECK_MSG(n_wrong == 0, "%d of %d fingerprints differ from libfarmhash's", n_wrong,
              s->n_cases);
    CHECK(s->n_cases >= 300);
done:
    free(s->bytes);
    free(s);
}
