/* This machine's limits, the roofline the benchmarks are read against: memcpy bandwidth over
 * 64 MiB, OpenBLAS sgemm GFLOP/s at a few shapes (the thread count is OpenBLAS's:
 * OPENBLAS_NUM_THREADS) and the round trip of a cache line between two threads. Prints
 * `memcpy 64MiB: X GB/s`, `sgemm M=.. N=.. K=..: X GFLOP/s` and `cache-line round trip: X ns`;
 * `limits round-trip` prints the last alone.
 * build: cc -O2 -o limits limits.c -lopenblas */
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The best of several timed rounds: the machine is shared, and the best is the closest to what
 * the hardware can do. */
static double memcpy_gbps(void)
{
    size_t n = (size_t)64 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b)
        return 0.0;
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 1e30;
    for (int r = 0; r < 10; r++) {
        double t0 = now();
        memcpy(b, a, n);
        double t = now() - t0;
        if (t < best)
            best = t;
    }
    volatile char sink = b[n / 2];
    (void)sink;
    free(a);
    free(b);
    return (double)n / best / 1e9;
}

static double sgemm_gflops(int m, int n, int k)
{
    float *a = malloc(sizeof(float) * (size_t)m * k), *b = malloc(sizeof(float) * (size_t)k * n),
          *c = malloc(sizeof(float) * (size_t)m * n);
    if (!a || !b || !c)
        return 0.0;
    for (size_t i = 0; i < (size_t)m * k; i++)
        a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)k * n; i++)
        b[i] = (float)(i % 5) * 0.1f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
    double flop = 2.0 * m * n * k, best = 1e30;
    int reps = (int)(4e9 / flop) + 1;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        for (int i = 0; i < reps; i++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n,
                        0.0f, c, n);
        double t = (now() - t0) / reps;
        if (t < best)
            best = t;
    }
    free(a);
    free(b);
    free(c);
    return flop / best / 1e9;
}

/* One line bounced between two threads: each waits for the other's write before its own. About
 * 45 ns between cores that share a cache; several times that between the chips of a processor,
 * which is where a VM's vCPUs may sit for a while, and then every parallel region that hands
 * data from one core to the other pays it. */
enum { BOUNCES = 200000 };
static volatile long line __attribute__((aligned(64)));

static void *bounce_back(void *arg)
{
    (void)arg;
    for (long i = 0; i < BOUNCES; i++) {
        while (line != 2 * i + 1)
            ;
        line = 2 * i + 2;
    }
    return NULL;
}

static double round_trip_ns(void)
{
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        pthread_t t;
        line = 0;
        if (pthread_create(&t, NULL, bounce_back, NULL) != 0)
            return 0.0;
        double t0 = now();
        for (long i = 0; i < BOUNCES; i++) {
            line = 2 * i + 1;
            while (line != 2 * i + 2)
                ;
        }
        double t1 = now();
        pthread_join(t, NULL);
        if (t1 - t0 < best)
            best = t1 - t0;
    }
    return best / BOUNCES * 1e9;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "round-trip") == 0) {
        printf("cache-line round trip: %.0f ns\n", round_trip_ns());
        return 0;
    }
    printf("memcpy 64MiB: %.2f GB/s\n", memcpy_gbps());
    printf("cache-line round trip: %.0f ns\n", round_trip_ns());
    /* A square shape near the peak, and the tutorial CNN's and DeepFM's dense shapes. */
    static const int shapes[][3] = {{1024, 1024, 1024}, {64, 64, 5408}, {1024, 128, 1248},
                                    {512, 512, 512}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        printf("sgemm M=%d N=%d K=%d: %.1f GFLOP/s\n", shapes[i][0], shapes[i][1], shapes[i][2],
               sgemm_gflops(shapes[i][0], shapes[i][1], shapes[i][2]));
    return 0;
}
