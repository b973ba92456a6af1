/* Keras's BackupAndRestore, the saving half: a checkpoint in backup_dir at each epoch's end
 * (backup_freq 0) or every backup_freq steps, from which a rerun resumes exactly (the loop
 * restores it, before model_dir's). Removed when training completes, as Keras removes it. Only
 * the chief writes it. */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callback.h"

typedef struct {
    dt_ckpt_manager mgr;
} backup;

static bool saves_after(void *self, dt_fit_ctx *c, int64_t step)
{
    (void)self;
    return c->cfg->backup_freq > 0 && step % c->cfg->backup_freq == 0;
}

static dt_status step_end(void *self, dt_fit_ctx *c)
{
    backup *b = self;
    if (!saves_after(self, c, c->pos.step))
        return DT_OK;
    dt_status st = dt_fit_save(&b->mgr, false, c->cfg, dt_replica_count(c->replica), c->m, c->o,
                               &c->pos, false, c->result);
    return st ? dt_error_prefix(st, "backup at step %" PRId64, c->pos.step) : DT_OK;
}

static dt_status between_epochs(void *self, dt_fit_ctx *c, const dt_fit_position *next)
{
    backup *b = self;
    if (c->cfg->backup_freq > 0)
        return DT_OK;
    dt_status st = dt_fit_save(&b->mgr, false, c->cfg, dt_replica_count(c->replica), c->m, c->o,
                               next, false, c->result);
    return st ? dt_error_prefix(st, "backup after epoch %" PRId64, next->epoch) : DT_OK;
}

/* Removes the backup's files, those a killed run left half-written included, and its directory
 * when nothing else is left in it. */
static void remove_backup(dt_ckpt_manager *b)
{
    char path[4400];
    DIR *d = opendir(b->dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        bool ours = (strncmp(e->d_name, "ckpt-", 5) == 0 && strstr(e->d_name, ".safetensors")) ||
                    strcmp(e->d_name, "checkpoint") == 0 ||
                    strncmp(e->d_name, "checkpoint.tmp.", 15) == 0;
        if (ours) {
            snprintf(path, sizeof path, "%s/%s", b->dir, e->d_name);
            remove(path);
        }
    }
    if (d)
        closedir(d);
    remove(b->dir); /* fails, harmlessly, when the user keeps other files there */
}

static dt_status close_cb(void *self, bool completed)
{
    backup *b = self;
    if (completed) /* as Keras: a finished run's backup is of no more use */
        remove_backup(&b->mgr);
    dt_ckpt_manager_close(&b->mgr);
    free(b);
    return DT_OK;
}

static const dt_callback_ops ops = {.name = "backup", .saves_after = saves_after,
                                    .step_end = step_end, .between_epochs = between_epochs,
                                    .close = close_cb};

dt_status dt_backup_callback(const dt_fit_ctx *c, dt_callback *out)
{
    *out = (dt_callback){0};
    if (!c->cfg->backup_dir || !dt_replica_is_chief(c->replica))
        return DT_OK;
    backup *b = calloc(1, sizeof *b);
    if (!b)
        return dt_error(DT_ERR_NOMEM, "no memory for the backup");
    /* One backup is enough: a save is atomic, and the previous goes only once the new is
     * listed. */
    dt_status st = dt_ckpt_manager_open(&b->mgr, c->cfg->backup_dir, 1, 0.0, c->cfg->log);
    if (st) {
        free(b);
        return dt_error_prefix(st, "backup");
    }
    *out = (dt_callback){&ops, b};
    return DT_OK;
}
