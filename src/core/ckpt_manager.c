/* TF's checkpoint manager over a directory of safetensors checkpoints (see
 * include/dtrain/checkpoint.h): ckpt-<step>.safetensors files and the "checkpoint" state file
 * TF's CheckpointManager writes, saves that keep max_to_keep of them (and one every
 * keep_checkpoint_every_n_hours), sharded checkpoints' files beside their manifest, and the latest
 * valid checkpoint opened or mapped, falling back to older ones. The files themselves are
 * safetensors.c's. */
#include "dtrain/checkpoint.h"
#include "fileio.h"
#include "dtrain/log.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STATE_NAME "checkpoint"
#define PATH_CAP 4096
/* A state file is a few lines per checkpoint; anything this big is not one. */
#define MAX_STATE_BYTES ((off_t)16 << 20)

int64_t dt_ckpt_step_of_name(const char *name)
{
    static const char prefix[] = "ckpt-", suffix[] = ".safetensors";
    if (!name || strncmp(name, prefix, sizeof prefix - 1) != 0)
        return -1;
    const char *p = name + sizeof prefix - 1;
    /* Leading zeros are refused: "ckpt-007" would not be the file the manager names step 7. */
    if (!isdigit((unsigned char)*p) || (p[0] == '0' && isdigit((unsigned char)p[1])))
        return -1;
    int64_t v = 0;
    for (; isdigit((unsigned char)*p); p++) {
        int digit = *p - '0';
        if (v > (INT64_MAX - digit) / 10)
            return -1;
        v = v * 10 + digit;
    }
    return strcmp(p, suffix) == 0 ? v : -1;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The checkpoint list of a directory: what the state file says, or a scan. */
struct ckpt_list {
    int n, cap;
    int64_t *steps;
    double *ts;
    double last_preserved;
    int has_last_preserved;
};

static void list_free(struct ckpt_list *l)
{
    free(l->steps);
    free(l->ts);
    memset(l, 0, sizeof *l);
}

static int list_find(const struct ckpt_list *l, int64_t step)
{
    for (int i = 0; i < l->n; i++)
        if (l->steps[i] == step)
            return i;
    return -1;
}

static void list_remove(struct ckpt_list *l, int i)
{
    memmove(l->steps + i, l->steps + i + 1, (size_t)(l->n - i - 1) * sizeof *l->steps);
    memmove(l->ts + i, l->ts + i + 1, (size_t)(l->n - i - 1) * sizeof *l->ts);
    l->n--;
}

static dt_status list_push(struct ckpt_list *l, int64_t step, double ts)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        int64_t *steps = realloc(l->steps, (size_t)cap * sizeof *steps);
        if (steps)
            l->steps = steps;
        double *t = steps ? realloc(l->ts, (size_t)cap * sizeof *t) : NULL;
        if (!t)
            return dt_error(DT_ERR_NOMEM, "checkpoint list: out of memory");
        l->ts = t;
        l->cap = cap;
    }
    l->steps[l->n] = step;
    l->ts[l->n++] = ts;
    return DT_OK;
}

static dt_status build_path(char *out, size_t cap, const char *dir, const char *name)
{
    if ((size_t)snprintf(out, cap, "%s/%s", dir, name) >= cap)
        return dt_error(DT_ERR_INVALID, "%s/%s: path too long", dir, name);
    return DT_OK;
}

static void ckpt_name(char *out, size_t cap, int64_t step)
{
    snprintf(out, cap, "ckpt-%lld.safetensors", (long long)step);
}

/* The step of a quoted state-file path ("ckpt-5.safetensors", or TF-style with a directory). */
static int64_t step_of_quoted(const char *v)
{
    size_t n = strlen(v);
    if (n < 2 || v[0] != '"' || v[n - 1] != '"')
        return -1;
    char name[PATH_CAP];
    if (n - 2 >= sizeof name)
        return -1;
    memcpy(name, v + 1, n - 2);
    name[n - 2] = '\0';
    const char *base = strrchr(name, '/');
    return dt_ckpt_step_of_name(base ? base + 1 : name);
}

static int parse_double(const char *v, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(d))
        return 0;
    *out = d;
    return 1;
}

/* Parsed lines so far; the lists are checked against each other once all are read. */
struct state_parse {
    struct ckpt_list paths;
    double *ts;
    int n_ts, cap_ts;
    int64_t latest;
};

static dt_status push_ts(struct state_parse *s, double t)
{
    if (s->n_ts == s->cap_ts) {
        int cap = s->cap_ts ? s->cap_ts * 2 : 16;
        double *grown = realloc(s->ts, (size_t)cap * sizeof *grown);
        if (!grown)
            return dt_error(DT_ERR_NOMEM, "checkpoint state: out of memory");
        s->ts = grown;
        s->cap_ts = cap;
    }
    s->ts[s->n_ts++] = t;
    return DT_OK;
}

/* One "key: value" line; lines of other keys are ignored, as TF's text format readers would
 * skip fields they do not know. DT_ERR_FORMAT for a known key with a bad value. */
static dt_status parse_state_line(struct state_parse *s, char *line, const char *file, int lineno)
{
    char *colon = strchr(line, ':');
    if (!colon)
        return DT_OK;
    *colon = '\0';
    char *key = line, *v = colon + 1;
    while (isspace((unsigned char)*key))
        key++;
    while (isspace((unsigned char)*v))
        v++;
    for (size_t n = strlen(v); n && isspace((unsigned char)v[n - 1]);)
        v[--n] = '\0';
    int64_t step;
    double t;
    if (strcmp(key, "model_checkpoint_path") == 0 || strcmp(key, "all_model_checkpoint_paths") == 0) {
        if ((step = step_of_quoted(v)) < 0)
            return dt_error(DT_ERR_FORMAT, "%s: line %d: %s %s is not a quoted ckpt-<step>.safetensors",
                            file, lineno, key, v);
        if (key[0] == 'm')
            s->latest = step;
        else if (list_find(&s->paths, step) >= 0)
            return dt_error(DT_ERR_FORMAT, "%s: line %d: step %lld listed twice", file, lineno,
                            (long long)step);
        else
            return list_push(&s->paths, step, 0);
    } else if (strcmp(key, "all_model_checkpoint_timestamps") == 0 ||
               strcmp(key, "last_preserved_timestamp") == 0) {
        if (!parse_double(v, &t))
            return dt_error(DT_ERR_FORMAT, "%s: line %d: %s '%s' is not a number", file, lineno,
                            key, v);
        if (key[0] == 'a')
            return push_ts(s, t);
        s->paths.last_preserved = t;
        s->paths.has_last_preserved = 1;
    }
    return DT_OK;
}

/* Checks the lists agree and puts the latest last. Old TF state files have no timestamps: they
 * then all get now, as TF's manager does. */
static dt_status finish_state(struct state_parse *s, const char *file, double now)
{
    struct ckpt_list *l = &s->paths;
    if (s->n_ts != 0 && s->n_ts != l->n)
        return dt_error(DT_ERR_FORMAT, "%s: %d checkpoint paths but %d timestamps", file, l->n,
                        s->n_ts);
    for (int i = 0; i < l->n; i++)
        l->ts[i] = s->n_ts ? s->ts[i] : now;
    if (s->latest >= 0) {
        int i = list_find(l, s->latest);
        double t = i >= 0 ? l->ts[i] : now;
        if (i >= 0)
            list_remove(l, i);
        return list_push(l, s->latest, t);
    }
    return DT_OK;
}

/* Reads dir's state file into *out. DT_END when there is none, DT_ERR_FORMAT when it is
 * malformed, DT_ERR_IO when it cannot be read. */
static dt_status read_state(const char *dir, double now, struct ckpt_list *out)
{
    char file[PATH_CAP];
    dt_status st = build_path(file, sizeof file, dir, STATE_NAME);
    if (st)
        return st;
    FILE *f = fopen(file, "re");
    if (!f)
        return errno == ENOENT ? DT_END : dt_error(DT_ERR_IO, "%s: %s", file, strerror(errno));
    struct state_parse s = {.latest = -1};
    struct stat sb;
    char *line = NULL;
    size_t cap = 0;
    if (fstat(fileno(f), &sb) != 0 || sb.st_size > MAX_STATE_BYTES) {
        st = dt_error(DT_ERR_FORMAT, "%s: not a state file (too large or unreadable)", file);
        goto fail;
    }
    for (int lineno = 1; getline(&line, &cap, f) >= 0; lineno++)
        if ((st = parse_state_line(&s, line, file, lineno)))
            goto fail;
    if (ferror(f)) {
        st = dt_error(DT_ERR_IO, "%s: read: %s", file, strerror(errno));
        goto fail;
    }
    if ((st = finish_state(&s, file, now)))
        goto fail;
    *out = s.paths;
    s.paths = (struct ckpt_list){0};
fail:
    free(line);
    free(s.ts);
    list_free(&s.paths);
    fclose(f);
    return st;
}

static int by_step(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Every ckpt-<step>.safetensors of dir, by increasing step, with its mtime as its timestamp.
 * Temporary files ("*.tmp.*") never match the name. */
static dt_status scan_dir(const char *dir, struct ckpt_list *out)
{
    DIR *d = opendir(dir);
    if (!d)
        return dt_error(DT_ERR_IO, "%s: opendir: %s", dir, strerror(errno));
    dt_status st = DT_OK;
    struct ckpt_list l = {0};
    for (struct dirent *e; (e = readdir(d));) {
        int64_t step = dt_ckpt_step_of_name(e->d_name);
        if (step >= 0 && (st = list_push(&l, step, 0)))
            goto fail;
    }
    if (l.n > 1)
        qsort(l.steps, (size_t)l.n, sizeof *l.steps, by_step);
    for (int i = 0; i < l.n; i++) {
        char path[PATH_CAP], name[64];
        struct stat sb;
        ckpt_name(name, sizeof name, l.steps[i]);
        l.ts[i] = build_path(path, sizeof path, dir, name) == DT_OK && stat(path, &sb) == 0
                      ? (double)sb.st_mtim.tv_sec + (double)sb.st_mtim.tv_nsec * 1e-9
                      : 0;
    }
    *out = l;
    l = (struct ckpt_list){0};
fail:
    list_free(&l);
    closedir(d);
    return st;
}

static int ckpt_exists(const char *dir, int64_t step)
{
    char path[PATH_CAP], name[64];
    struct stat sb;
    ckpt_name(name, sizeof name, step);
    return build_path(path, sizeof path, dir, name) == DT_OK && stat(path, &sb) == 0;
}

static dt_status mkdir_p(const char *dir)
{
    char buf[PATH_CAP];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return dt_error(DT_ERR_INVALID, "%s: path too long", dir);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return dt_error(DT_ERR_IO, "%s: mkdir: %s", buf, strerror(errno));
        if (!(*p = saved))
            break;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return dt_error(DT_ERR_IO, "%s: not a directory", dir);
    return DT_OK;
}

/* The manager's lists from the state file; a malformed one is rebuilt from the directory. */
static dt_status load_list(const dt_ckpt_manager *m, double now, struct ckpt_list *l)
{
    dt_status st = read_state(m->dir, now, l);
    if (st == DT_ERR_FORMAT) {
        if (m->log)
            dt_log_to(m->log, DT_LOG_WARN, "dtrain: warning: %s; listing the ckpt-*.safetensors "
                      "files of %s instead", dt_last_error(), m->dir);
        st = scan_dir(m->dir, l);
    }
    if (st == DT_END)
        st = DT_OK;
    if (st)
        return st;
    for (int i = l->n - 1; i >= 0; i--)
        if (!ckpt_exists(m->dir, l->steps[i]))
            list_remove(l, i);
    if (!l->has_last_preserved)
        l->last_preserved = now;
    return DT_OK;
}

static void manager_take(dt_ckpt_manager *m, struct ckpt_list *l)
{
    free(m->steps);
    free(m->timestamps);
    m->steps = l->steps;
    m->timestamps = l->ts;
    m->n_kept = l->n;
    m->last_preserved = l->last_preserved;
    *l = (struct ckpt_list){0};
}

/* A save writes "<name>.tmp.<pid>.<host>" and renames it; a run killed in between leaves the
 * file. Those of processes of this host that no longer exist are removed when the directory's
 * writer opens it (fileio.h); another host's are its own to remove (the ps tasks sweep their
 * shard files' on their hosts: dt_ps_sweep_temps). */
static void remove_stale_temps(const dt_ckpt_manager *m)
{
    DIR *d = opendir(m->dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t target_len;
        if ((strncmp(e->d_name, "ckpt-", 5) != 0 && strncmp(e->d_name, "checkpoint", 10) != 0) ||
            !dt_file_replace_orphan(e->d_name, &target_len))
            continue;
        char path[PATH_CAP + 256];
        snprintf(path, sizeof path, "%s/%s", m->dir, e->d_name);
        if (unlink(path) == 0 && m->log)
            dt_log_to(m->log, DT_LOG_INFO, "dtrain: removed %s, left by a run that stopped while "
                      "saving", path);
    }
    if (d)
        closedir(d);
}

dt_status dt_ckpt_manager_open(dt_ckpt_manager *m, const char *dir, int max_to_keep,
                               double keep_checkpoint_every_n_hours, FILE *log)
{
    memset(m, 0, sizeof *m);
    if (!dir || !*dir)
        return dt_error(DT_ERR_INVALID, "checkpoint manager: empty directory");
    if (max_to_keep < 0 || !(keep_checkpoint_every_n_hours >= 0) ||
        !isfinite(keep_checkpoint_every_n_hours))
        return dt_error(DT_ERR_INVALID, "%s: max_to_keep %d and keep_checkpoint_every_n_hours %g "
                        "must be >= 0", dir, max_to_keep, keep_checkpoint_every_n_hours);
    /* Room for "/ckpt-<19 digits>.safetensors.tmp.<pid>" after the directory. */
    if (strlen(dir) + 64 >= sizeof m->dir)
        return dt_error(DT_ERR_INVALID, "%s: path too long", dir);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    for (size_t n = strlen(m->dir); n > 1 && m->dir[n - 1] == '/';)
        m->dir[--n] = '\0';
    m->max_to_keep = max_to_keep;
    m->keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours;
    m->log = log;
    struct ckpt_list l = {0};
    dt_status st = mkdir_p(m->dir);
    if (st || (st = load_list(m, wall_now(), &l)))
        return st;
    manager_take(m, &l);
    remove_stale_temps(m);
    return DT_OK;
}

void dt_ckpt_manager_close(dt_ckpt_manager *m)
{
    free(m->steps);
    free(m->timestamps);
    m->steps = NULL;
    m->timestamps = NULL;
    m->n_kept = 0;
}

/* The shortest decimal that reads back as t, so the state file stays legible. */
static void format_time(char *out, size_t cap, double t)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, t);
        if (strtod(out, NULL) == t)
            return;
    }
}

static dt_status write_state(const dt_ckpt_manager *m)
{
    char path[PATH_CAP], name[64], t[40];
    dt_status st = build_path(path, sizeof path, m->dir, STATE_NAME);
    if (st)
        return st;
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f)
        return dt_error(DT_ERR_NOMEM, "%s: out of memory", path);
    if (m->n_kept) {
        ckpt_name(name, sizeof name, m->steps[m->n_kept - 1]);
        fprintf(f, "model_checkpoint_path: \"%s\"\n", name);
    }
    for (int i = 0; i < m->n_kept; i++) {
        ckpt_name(name, sizeof name, m->steps[i]);
        fprintf(f, "all_model_checkpoint_paths: \"%s\"\n", name);
    }
    for (int i = 0; i < m->n_kept; i++) {
        format_time(t, sizeof t, m->timestamps[i]);
        fprintf(f, "all_model_checkpoint_timestamps: %s\n", t);
    }
    format_time(t, sizeof t, m->last_preserved);
    fprintf(f, "last_preserved_timestamp: %s\n", t);
    if (fclose(f) != 0 || !text) {
        free(text);
        return dt_error(DT_ERR_NOMEM, "%s: out of memory", path);
    }
    dt_file_part part = {text, n};
    st = dt_file_write_atomic(path, &part, 1);
    free(text);
    return st;
}

void dt_ckpt_shard_name(char *out, size_t cap, int64_t step, int k, int n)
{
    snprintf(out, cap, "ckpt-%lld.ps-%d-of-%d.safetensors", (long long)step, k, n);
}

enum { MAX_SHARD_FILES = 4096, SHARD_NAME_CAP = 200 };

bool dt_ckpt_is_sharded(const dt_ckpt *c) { return dt_ckpt_meta_get(c, "ps_shards") != NULL; }

void dt_ckpt_close_shards(dt_ckpt **files, int n)
{
    for (int i = 0; i < n; i++)
        dt_ckpt_close(files[i]);
    free(files);
}

/* The manifest's "ps_shards" list names files in its own directory: a name there is a plain
 * file name, never a path, so a manifest cannot point outside it. */
dt_status dt_ckpt_open_shards(const dt_ckpt *manifest, dt_ckpt ***files_out, int *n_out)
{
    const char *list = dt_ckpt_meta_get(manifest, "ps_shards"), *path = dt_ckpt_path(manifest);
    *files_out = NULL, *n_out = 0;
    if (!list)
        return dt_error(DT_END, "%s: not a sharded checkpoint (no __metadata__.ps_shards)", path);
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path + 1) : 0;
    dt_ckpt **files = calloc(MAX_SHARD_FILES, sizeof *files);
    if (!files)
        return dt_error(DT_ERR_NOMEM, "no memory to open %s's shard files", path);
    int n = 0;
    dt_status st = DT_OK;
    for (const char *p = list; *p && st == DT_OK;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0 || len > SHARD_NAME_CAP || memchr(p, '/', len) || n == MAX_SHARD_FILES) {
            st = dt_error(DT_ERR_FORMAT, "%s: __metadata__.ps_shards: an empty or overlong "
                          "name, a path, or more than %d files", path, MAX_SHARD_FILES);
            break;
        }
        char file[PATH_CAP + SHARD_NAME_CAP + 2];
        snprintf(file, sizeof file, "%.*s%.*s", dir_len, path, (int)len, p);
        st = dt_ckpt_open(file, &files[n]);
        if (st)
            st = dt_error_prefix(st, "%s names its shard file", path);
        else
            n++;
        p = end ? end + 1 : p + len;
    }
    if (st == DT_OK && n == 0)
        st = dt_error(DT_ERR_FORMAT, "%s: __metadata__.ps_shards names no file", path);
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", dt_last_error());
        dt_ckpt_close_shards(files, n);
        return dt_error(st, "%s", msg);
    }
    *files_out = files, *n_out = n;
    return DT_OK;
}

/* A sharded checkpoint's shard files, deleted with its manifest. */
static void remove_shards(const dt_ckpt_manager *m, int64_t step)
{
    DIR *d = opendir(m->dir);
    if (!d)
        return;
    char prefix[64], path[PATH_CAP];
    int n = snprintf(prefix, sizeof prefix, "ckpt-%lld.ps-", (long long)step);
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, prefix, (size_t)n) != 0 || len < 12 ||
            strcmp(e->d_name + len - 12, ".safetensors") != 0)
            continue;
        if (build_path(path, sizeof path, m->dir, e->d_name) == DT_OK && unlink(path) != 0 &&
            errno != ENOENT && m->log)
            dt_log_to(m->log, DT_LOG_WARN, "dtrain: warning: %s: unlink: %s", path,
                      strerror(errno));
    }
    closedir(d);
}

/* TF's sweep: the oldest beyond max_to_keep leave the list; each one's file is deleted unless it
 * is the first at least keep_checkpoint_every_n_hours after the last one preserved. */
static void sweep(dt_ckpt_manager *m)
{
    if (!m->max_to_keep)
        return;
    struct ckpt_list l = {m->n_kept, m->n_kept, m->steps, m->timestamps, 0, 0};
    while (l.n > m->max_to_keep) {
        int64_t step = l.steps[0];
        double t = l.ts[0];
        list_remove(&l, 0);
        if (m->keep_checkpoint_every_n_hours > 0 &&
            t >= m->last_preserved + m->keep_checkpoint_every_n_hours * 3600.0) {
            m->last_preserved = t;
            continue;
        }
        char path[PATH_CAP], name[64];
        ckpt_name(name, sizeof name, step);
        if (build_path(path, sizeof path, m->dir, name) == DT_OK && unlink(path) != 0 &&
            errno != ENOENT && m->log)
            dt_log_to(m->log, DT_LOG_WARN, "dtrain: warning: %s: unlink: %s", path,
                      strerror(errno));
        remove_shards(m, step);
    }
    m->n_kept = l.n;
}

dt_status dt_ckpt_manager_save(dt_ckpt_manager *m, int64_t step, const dt_arena *const *arenas,
                               int n_arenas, const dt_ckpt_meta *meta, int n_meta,
                               char *path_out, size_t path_cap)
{
    return dt_ckpt_manager_save_ex(m, step, arenas, n_arenas, NULL, 0, meta, n_meta, path_out,
                                   path_cap);
}

dt_status dt_ckpt_manager_save_ex(dt_ckpt_manager *m, int64_t step,
                                  const dt_arena *const *arenas, int n_arenas,
                                  const dt_ckpt_tensor *extra, int n_extra,
                                  const dt_ckpt_meta *meta, int n_meta, char *path_out,
                                  size_t path_cap)
{
    char path[PATH_CAP], name[64];
    if (step < 0)
        return dt_error(DT_ERR_INVALID, "%s: step %lld is negative", m->dir, (long long)step);
    ckpt_name(name, sizeof name, step);
    dt_status st = build_path(path, sizeof path, m->dir, name);
    if (st)
        return st;
    if (path_out && strlen(path) >= path_cap)
        return dt_error(DT_ERR_INVALID, "%s: longer than the %zu-byte buffer for it", path, path_cap);
    if ((st = dt_ckpt_save_ex(path, arenas, n_arenas, extra, n_extra, meta, n_meta)))
        return st;
    if (path_out)
        snprintf(path_out, path_cap, "%s", path);
    struct ckpt_list l = {m->n_kept, m->n_kept, m->steps, m->timestamps, m->last_preserved, 1};
    int i = list_find(&l, step);
    if (i >= 0)
        list_remove(&l, i);
    st = list_push(&l, step, wall_now());
    m->steps = l.steps, m->timestamps = l.ts, m->n_kept = l.n;
    if (st)
        return st;
    sweep(m);
    return write_state(m);
}

/* ---- open the latest ---- */

/* dt_ckpt_open's messages begin with the path already: it is not repeated. */
static void warn_skip(FILE *log, const char *path, int more)
{
    if (!log)
        return;
    const char *msg = dt_last_error();
    size_t n = strlen(path);
    int named = strncmp(msg, path, n) == 0 && msg[n] == ':';
    dt_log_to(log, DT_LOG_WARN, "dtrain: warning: %s%s%s; %s", named ? "" : path,
              named ? "" : ": ", msg,
              more ? "trying an older checkpoint" : "no older checkpoint to try");
}

/* The steps to try, newest first: the state file's list from its latest, then the directory's
 * other checkpoints by decreasing step. */
static dt_status candidates(const char *dir, FILE *log, struct ckpt_list *out)
{
    struct ckpt_list state = {0}, scan = {0};
    dt_status st = read_state(dir, 0, &state);
    if (st == DT_ERR_NOMEM)
        goto fail;
    /* A broken or unreadable state file still leaves the checkpoints themselves. */
    if (st != DT_OK && st != DT_END && log)
        dt_log_to(log, DT_LOG_WARN, "dtrain: warning: %s; trying the ckpt-*.safetensors files "
                  "of %s", dt_last_error(), dir);
    if ((st = scan_dir(dir, &scan)))
        goto fail;
    for (int i = state.n - 1; i >= 0; i--)
        if ((st = list_push(out, state.steps[i], 0)))
            goto fail;
    for (int i = scan.n - 1; i >= 0; i--)
        if (list_find(out, scan.steps[i]) < 0 && (st = list_push(out, scan.steps[i], 0)))
            goto fail;
fail:
    list_free(&state);
    list_free(&scan);
    return st;
}

static dt_status open_latest(const char *dir, FILE *log, bool map, int64_t before,
                             dt_ckpt **out)
{
    *out = NULL;
    struct ckpt_list l = {0};
    struct stat sb;
    dt_status st = DT_END;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        goto fail;
    if ((st = candidates(dir, log, &l)))
        goto fail;
    st = DT_END;
    for (int i = 0; i < l.n && st == DT_END; i++) {
        if (l.steps[i] >= before)
            continue;
        char path[PATH_CAP], name[64];
        ckpt_name(name, sizeof name, l.steps[i]);
        if (build_path(path, sizeof path, dir, name) != DT_OK)
            continue;
        dt_status s = map ? dt_ckpt_map(path, out) : dt_ckpt_open(path, out);
        if (s == DT_OK)
            st = DT_OK;
        else if (s == DT_ERR_NOMEM)
            st = s;
        else
            warn_skip(log, path, i + 1 < l.n);
    }
fail:
    list_free(&l);
    if (st == DT_END)
        return dt_error(DT_END, "%s: no valid checkpoint", dir);
    return st;
}

dt_status dt_ckpt_open_latest(const char *dir, FILE *log, dt_ckpt **out)
{
    return open_latest(dir, log, false, INT64_MAX, out);
}

dt_status dt_ckpt_open_latest_before(const char *dir, int64_t before_step, FILE *log,
                                     dt_ckpt **out)
{
    return open_latest(dir, log, false, before_step, out);
}

dt_status dt_ckpt_map_latest(const char *dir, FILE *log, dt_ckpt **out)
{
    return open_latest(dir, log, true, INT64_MAX, out);
}
