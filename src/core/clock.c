/* Monotonic time and resource figures (see clock.h). */
#include "clock.h"

#include <errno.h>
#include <sys/resource.h>
#include <time.h>

double dt_clock_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void dt_sleep(double seconds)
{
    struct timespec t = {.tv_sec = (time_t)seconds,
                         .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

double dt_peak_rss_mb(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_maxrss / 1024.0; /* Linux reports KiB */
}
