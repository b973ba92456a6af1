/* SageMaker's contract with a training container, kept by dtrain train when the sagemaker
 * resolver gives the cluster (see sagemaker.h). ROOT is /opt/ml, or DTRAIN_SAGEMAKER_ROOT. */
#include "sagemaker.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dtrain/cluster.h"

static bool active;
static char channel_format[32] = "libsvm"; /* the data_format hyperparameter: the channels' */

static const char *root(void)
{
    const char *r = getenv("DTRAIN_SAGEMAKER_ROOT");
    return r && *r ? r : "/opt/ml";
}

/* The value of --NAME in argv (as "--NAME V" or "--NAME=V"), or NULL. */
static const char *flag_value(int argc, char **argv, const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || strncmp(a + 2, name, n) != 0)
            continue;
        if (a[2 + n] == '=')
            return a + 3 + n;
        if (a[2 + n] == '\0')
            return i + 1 < argc ? argv[i + 1] : "";
    }
    return NULL;
}

/* Whether the sagemaker resolver gives this process's cluster: named (flag or variable), or
 * detected with no TF_CONFIG. */
static bool sagemaker_in_use(int argc, char **argv)
{
    const char *name = flag_value(argc, argv, "cluster-resolver");
    if (!name)
        name = getenv("DTRAIN_CLUSTER_RESOLVER");
    dt_resolver r = DT_RESOLVER_AUTO;
    if (name && *name && dt_resolver_parse(name, &r)) {
        dt_error_clear();
        return false; /* the flag's own check reports it */
    }
    if (r != DT_RESOLVER_AUTO)
        return r == DT_RESOLVER_SAGEMAKER;
    char *json = NULL;
    dt_resolver used = DT_RESOLVER_TF_CONFIG;
    if (dt_cluster_resolve(DT_RESOLVER_AUTO, NULL, &json, &used))
        dt_error_clear(); /* the run itself reports it */
    free(json);
    return used == DT_RESOLVER_SAGEMAKER;
}

/* A hyperparameter's value as a flag's text: strings as they are (SageMaker writes them so),
 * numbers and booleans as JSON writes them. */
static char *value_text(const cJSON *v)
{
    if (cJSON_IsString(v))
        return strdup(v->valuestring);
    if (cJSON_IsBool(v))
        return strdup(cJSON_IsTrue(v) ? "true" : "false");
    return cJSON_IsNumber(v) ? cJSON_PrintUnformatted(v) : NULL;
}

static dt_status add_arg(int *argc, char ***argv, int *cap, char *arg)
{
    if (!arg)
        return dt_error(DT_ERR_NOMEM, "no memory for the hyperparameters");
    if (*argc + 1 >= *cap) {
        int n = *cap * 2;
        char **p = realloc(*argv, (size_t)n * sizeof *p);
        if (!p) {
            free(arg);
            return dt_error(DT_ERR_NOMEM, "no memory for the hyperparameters");
        }
        *argv = p, *cap = n;
    }
    (*argv)[(*argc)++] = arg;
    (*argv)[*argc] = NULL;
    return DT_OK;
}

/* hyperparameters.json's entries the command line does not give, as flags. */
static dt_status add_hyperparameters(int argc, char **argv, int *n, char ***out, int *cap)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/input/config/hyperparameters.json", root());
    FILE *f = fopen(path, "rb");
    if (!f)
        return DT_OK;
    char *text = malloc((1 << 20) + 1);
    size_t len = text ? fread(text, 1, (size_t)1 << 20, f) : 0;
    fclose(f);
    cJSON *hp = text ? (text[len] = '\0', cJSON_Parse(text)) : NULL;
    free(text);
    if (!cJSON_IsObject(hp)) {
        cJSON_Delete(hp);
        return dt_error(DT_ERR_INVALID, "%s: not a JSON object", path);
    }
    dt_status st = DT_OK;
    for (const cJSON *e = hp->child; e && st == DT_OK; e = e->next) {
        if (strncmp(e->string, "sagemaker_", 10) == 0)
            continue; /* the platform's own, not the program's */
        if (strcmp(e->string, "data_format") == 0) { /* the channels', not a flag */
            if (!cJSON_IsString(e) || !*e->valuestring ||
                strlen(e->valuestring) >= sizeof channel_format) {
                st = dt_error(DT_ERR_INVALID, "%s: data_format: a format such as libsvm, csv, "
                              "criteo or tfrecord", path);
                break;
            }
            snprintf(channel_format, sizeof channel_format, "%s", e->valuestring);
            continue;
        }
        char name[128];
        snprintf(name, sizeof name, "%s", e->string);
        for (char *p = name; *p; p++)
            *p = *p == '_' ? '-' : *p;
        if (flag_value(argc, argv, name))
            continue; /* the command line's wins */
        char *value = value_text(e);
        if (!value) {
            st = dt_error(DT_ERR_INVALID, "%s: \"%s\" is not a string, number or boolean", path,
                          e->string);
            break;
        }
        char *flag = malloc(strlen(name) + 3);
        if (flag)
            sprintf(flag, "--%s", name);
        if ((st = add_arg(n, out, cap, flag)) == DT_OK)
            st = add_arg(n, out, cap, value);
        else
            free(value);
    }
    cJSON_Delete(hp);
    return st;
}

static bool is_dir(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0 && S_ISDIR(s.st_mode);
}

/* The channels as data when the flags name none: --data from SM_CHANNEL_TRAIN (or _TRAINING),
 * --test-data from SM_CHANNEL_TEST (or _EVAL, _VALIDATION), every file of the channel's
 * directory, in the format of --data-format (a hyperparameter; libsvm when none). */
static dt_status add_channels(int *n, char ***out, int *cap)
{
    static const char *const train[] = {"SM_CHANNEL_TRAIN", "SM_CHANNEL_TRAINING", NULL};
    static const char *const test[] = {"SM_CHANNEL_TEST", "SM_CHANNEL_EVAL",
                                       "SM_CHANNEL_VALIDATION", NULL};
    const char *const *vars[2] = {train, test};
    const char *flags[2] = {"data", "test-data"};
    dt_status st = DT_OK;
    for (int k = 0; k < 2 && st == DT_OK; k++) {
        if (flag_value(*n, *out, flags[k]))
            continue;
        const char *dir = NULL;
        for (int i = 0; vars[k][i] && !(dir && *dir); i++)
            dir = getenv(vars[k][i]);
        if (!dir || !*dir)
            continue;
        size_t len = strlen(dir) + sizeof channel_format + 4;
        char *flag = malloc(strlen(flags[k]) + 3), *value = malloc(len);
        if (flag)
            sprintf(flag, "--%s", flags[k]);
        if (value)
            snprintf(value, len, "%s:%s/*", channel_format, dir);
        if ((st = add_arg(n, out, cap, flag)) == DT_OK)
            st = add_arg(n, out, cap, value);
        else
            free(value);
    }
    return st;
}

dt_status cli_sagemaker_args(int argc, char **argv, int *argc_out, char ***argv_out)
{
    *argc_out = argc, *argv_out = NULL;
    if (!(active = sagemaker_in_use(argc, argv)))
        return DT_OK;
    int cap = argc + 16, n = 0;
    char **out = malloc((size_t)cap * sizeof *out);
    if (!out)
        return dt_error(DT_ERR_NOMEM, "no memory for the hyperparameters");
    dt_status st = DT_OK;
    for (int i = 0; i < argc && st == DT_OK; i++)
        st = add_arg(&n, &out, &cap, strdup(argv[i]));
    if (st == DT_OK)
        st = add_hyperparameters(argc, argv, &n, &out, &cap);
    if (st == DT_OK)
        st = add_channels(&n, &out, &cap);
    /* Checkpoints where SageMaker syncs them, else straight into the model it uploads. */
    if (st == DT_OK && !flag_value(n, out, "model-dir")) {
        char ckpt[4200];
        snprintf(ckpt, sizeof ckpt, "%s/checkpoints", root());
        const char *dir = is_dir(ckpt) ? ckpt : getenv("SM_MODEL_DIR");
        if (dir && *dir && (st = add_arg(&n, &out, &cap, strdup("--model-dir"))) == DT_OK)
            st = add_arg(&n, &out, &cap, strdup(dir));
    }
    if (st) {
        cli_sagemaker_free(n, out);
        return st;
    }
    *argc_out = n, *argv_out = out;
    return DT_OK;
}

void cli_sagemaker_free(int argc, char **argv)
{
    for (int i = 0; argv && i < argc; i++)
        free(argv[i]);
    free(argv);
}

void cli_sagemaker_failure(const char *reason)
{
    if (!active)
        return;
    char path[4200];
    snprintf(path, sizeof path, "%s/output", root());
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/output/failure", root());
    FILE *f = fopen(path, "w");
    if (!f)
        return; /* the reason is on stderr too, which SageMaker keeps in the job's log */
    fprintf(f, "%.1024s", reason);
    fclose(f);
}
