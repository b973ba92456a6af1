/* Monotonic time and process resource figures. */
#ifndef DTRAIN_CLOCK_H
#define DTRAIN_CLOCK_H

/* Seconds on the monotonic clock: for intervals only. */
double dt_clock_now(void);
/* Sleeps for seconds (> 0), resuming after signals. */
void dt_sleep(double seconds);

/* Peak resident set size of this process in MiB (getrusage). */
double dt_peak_rss_mb(void);

#endif
