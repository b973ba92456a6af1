/* Keras-style progress for fit: on a terminal a bar redrawn in place,
 *   469/937 [==============>...............] - ETA: 2s - loss: 0.4865 - accuracy: 0.8100
 * finished by
 *   937/937 [==============================] - 4s - loss: 0.4865 - accuracy: 0.8100 - 4ms/step
 * and when the output is not a terminal one line per epoch (Keras's verbose=2):
 *   937/937 - 4s - loss: 0.4865 - accuracy: 0.8100 - 4s/epoch - 4ms/step */
#ifndef DTRAIN_PROGRESS_H
#define DTRAIN_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    FILE *out;
    bool bar;           /* redraw a bar in place (a terminal) */
    int epoch, epochs;
    int64_t total;      /* steps this epoch */
    double t_begin;     /* epoch start */
    double t_drawn;     /* last redraw */
} dt_progress;

/* bar: true for a terminal; see dt_progress_bar_wanted. */
void dt_progress_init(dt_progress *p, FILE *out, bool bar);
bool dt_progress_bar_wanted(FILE *out);

void dt_progress_epoch_begin(dt_progress *p, int epoch, int epochs, int64_t total_steps);
/* Redraws at most ten times a second; a no-op without a bar. */
void dt_progress_step(dt_progress *p, int64_t step, double loss, double accuracy);
/* extra: more " - name: value" text (validation metrics), or NULL. */
void dt_progress_epoch_end(dt_progress *p, int64_t steps, double loss, double accuracy,
                           const char *extra);

#endif
