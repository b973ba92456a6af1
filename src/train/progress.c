/* Keras-style progress output (see progress.h). */
#include "progress.h"

#include <math.h>
#include <unistd.h>

#include "../core/clock.h"

#define BAR_WIDTH 30

void dt_progress_init(dt_progress *p, FILE *out, bool bar)
{
    p->out = out;
    p->bar = bar;
    p->epoch = p->epochs = 0;
    p->total = 0;
    p->t_begin = p->t_drawn = 0.0;
}

bool dt_progress_bar_wanted(FILE *out) { return isatty(fileno(out)) == 1; }

void dt_progress_epoch_begin(dt_progress *p, int epoch, int epochs, int64_t total_steps)
{
    p->epoch = epoch;
    p->epochs = epochs;
    p->total = total_steps;
    p->t_begin = dt_clock_now();
    p->t_drawn = 0.0;
    if (epochs == INT32_MAX) /* training runs to a step count over as many passes as it takes */
        fprintf(p->out, "Epoch %d\n", epoch);
    else
        fprintf(p->out, "Epoch %d/%d\n", epoch, epochs);
    fflush(p->out);
}

static void draw_bar(const dt_progress *p, int64_t step)
{
    if (p->total <= 0) {
        /* An input of unknown length: Keras's "N/Unknown". */
        fprintf(p->out, "%lld/Unknown", (long long)step);
        return;
    }
    int digits = snprintf(NULL, 0, "%lld", (long long)p->total);
    int filled = p->total > 0 ? (int)(BAR_WIDTH * step / p->total) : BAR_WIDTH;
    fprintf(p->out, "%*lld/%lld [", digits, (long long)step, (long long)p->total);
    for (int i = 0; i < BAR_WIDTH; i++)
        fputc(i < filled ? '=' : (i == filled && step < p->total ? '>' : '.'), p->out);
    fputc(']', p->out);
}

static void format_duration(char *buf, size_t cap, double seconds)
{
    if (seconds >= 3600)
        snprintf(buf, cap, "%d:%02d:%02d", (int)seconds / 3600, (int)seconds / 60 % 60,
                 (int)seconds % 60);
    else if (seconds >= 60)
        snprintf(buf, cap, "%d:%02d", (int)seconds / 60, (int)seconds % 60);
    else
        snprintf(buf, cap, "%.0fs", floor(seconds));
}

static void format_per_step(char *buf, size_t cap, double seconds)
{
    if (seconds >= 1.0)
        snprintf(buf, cap, "%.0fs/step", seconds);
    else if (seconds >= 1e-3)
        snprintf(buf, cap, "%.0fms/step", seconds * 1e3);
    else
        snprintf(buf, cap, "%.0fus/step", seconds * 1e6);
}

void dt_progress_step(dt_progress *p, int64_t step, double loss, double accuracy)
{
    if (!p->bar)
        return;
    double now = dt_clock_now();
    if (now - p->t_drawn < 0.1 && step < p->total)
        return;
    p->t_drawn = now;
    double elapsed = now - p->t_begin;
    char eta[32];
    format_duration(eta, sizeof eta, step > 0 ? elapsed / (double)step * (double)(p->total - step) : 0.0);
    fputc('\r', p->out);
    draw_bar(p, step);
    if (p->total > 0)
        fprintf(p->out, " - ETA: %s", eta);
    fprintf(p->out, " - loss: %.4f - accuracy: %.4f\033[K", loss, accuracy);
    fflush(p->out);
}

void dt_progress_epoch_end(dt_progress *p, int64_t steps, double loss, double accuracy,
                           const char *extra)
{
    double elapsed = dt_clock_now() - p->t_begin;
    char dur[32], per_step[32];
    if (p->total <= 0)
        p->total = steps; /* the epoch has shown its length */
    format_duration(dur, sizeof dur, elapsed);
    format_per_step(per_step, sizeof per_step, steps > 0 ? elapsed / (double)steps : 0.0);
    if (p->bar) {
        fputc('\r', p->out);
        draw_bar(p, steps);
        fprintf(p->out, " - %s - loss: %.4f - accuracy: %.4f%s - %s\033[K\n", dur, loss, accuracy,
                extra ? extra : "", per_step);
    } else {
        fprintf(p->out, "%lld/%lld - %s - loss: %.4f - accuracy: %.4f%s - %s/epoch - %s\n",
                (long long)steps, (long long)p->total, dur, loss, accuracy, extra ? extra : "",
                dur, per_step);
    }
    fflush(p->out);
}
