/* The temporary files a ps task's failed writes leave behind, removed by the task itself
 * (internal to src/ps).
 *
 * A snapshot or a checkpoint's shard file is written beside its path and renamed over it
 * (core/fileio.h); a write killed in the middle (its deadline passed, the task stopped, the
 * task killed) leaves the temporary. The chief sweeps its model directory on its own host only,
 * and a ps task may run on another host, so each ps task sweeps its own files on its host: at
 * its start and after a write of its fails. Only temporaries of this task's files (its index),
 * written on this host by a process that no longer runs, are removed: never a file another
 * task, another job or another host may be writing now. */
#ifndef DTRAIN_PS_SWEEP_H
#define DTRAIN_PS_SWEEP_H

#include <stdio.h>

/* Removes from dir the orphaned temporaries of ps task ps_index's snapshot
 * (ps-<index>.snapshot) and checkpoint shard files (ckpt-<step>.ps-<index>-of-<n>.safetensors),
 * saying so on log (NULL: the library's log). Returns how many it removed. */
int dt_ps_sweep_temps(const char *dir, int ps_index, FILE *log);

#endif
