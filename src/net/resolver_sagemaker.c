/* The sagemaker resolver: the cluster of a SageMaker training job, as SageMaker's TensorFlow
 * toolkit writes it for its parameter-server distribution.
 *
 * The hosts and this one come from ROOT/input/config/resourceconfig.json ("hosts",
 * "current_host"; ROOT is /opt/ml, or DTRAIN_SAGEMAKER_ROOT), else SM_HOSTS and SM_CURRENT_HOST.
 * The first host is the master (TF 1.x's chief) at port 2222, the others workers at 2222 (or
 * DTRAIN_PORT_BASE, the ps then one above it); with the ps distribution on (hyperparameters.json's "sagemaker_parameter_server_enabled", or
 * SM_HPS's) and more than one host, every host also runs a ps at 2223, as the toolkit places
 * them. The process is its host's ps task when DTRAIN_SAGEMAKER_PS is 1 (dtrain server sets
 * it), else the master or a worker. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resolver.h"

#define CONFIG_MAX (1 << 20)
#define MAX_HOSTS 4096

static const char *root_of(dt_getenv_fn env)
{
    const char *r = env("DTRAIN_SAGEMAKER_ROOT");
    return r && *r ? r : "/opt/ml";
}

/* ROOT/input/config/NAME parsed; NULL with *st DT_END when the file does not exist. */
static cJSON *config_file(dt_getenv_fn env, const char *name, dt_status *st)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/input/config/%s", root_of(env), name);
    *st = DT_OK;
    FILE *f = fopen(path, "rb");
    if (!f) {
        *st = DT_END;
        return NULL;
    }
    char *text = malloc(CONFIG_MAX + 1);
    size_t n = text ? fread(text, 1, CONFIG_MAX + 1, f) : 0;
    fclose(f);
    cJSON *j = text && n <= CONFIG_MAX ? (text[n] = '\0', cJSON_Parse(text)) : NULL;
    free(text);
    if (!j)
        *st = dt_error(DT_ERR_INVALID, "%s: not JSON of at most %d bytes", path, CONFIG_MAX);
    return j;
}

static bool sagemaker_detect(dt_getenv_fn env)
{
    if (env("SM_CURRENT_HOST"))
        return true;
    char path[4200];
    snprintf(path, sizeof path, "%s/input/config/resourceconfig.json", root_of(env));
    FILE *f = fopen(path, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

/* A JSON true or "true" (SageMaker writes hyperparameters as strings). */
static bool truthy(const cJSON *v)
{
    return cJSON_IsTrue(v) || (cJSON_IsString(v) && strcmp(v->valuestring, "true") == 0);
}

static dt_status ps_enabled(dt_getenv_fn env, bool *on)
{
    dt_status st;
    cJSON *hp = config_file(env, "hyperparameters.json", &st);
    if (st == DT_END && env("SM_HPS"))
        hp = cJSON_Parse(env("SM_HPS")), st = hp ? DT_OK : dt_error(DT_ERR_INVALID, "SM_HPS: not JSON");
    *on = hp && truthy(cJSON_GetObjectItemCaseSensitive(hp, "sagemaker_parameter_server_enabled"));
    cJSON_Delete(hp);
    return st == DT_END ? DT_OK : st;
}

/* The hosts and this one's index among them. */
static dt_status hosts_of(dt_getenv_fn env, cJSON **hosts, int *me)
{
    dt_status st;
    cJSON *rc = config_file(env, "resourceconfig.json", &st);
    const char *where = "resourceconfig.json";
    cJSON *list = NULL, *current = NULL;
    if (st == DT_END) {
        where = "SM_HOSTS and SM_CURRENT_HOST";
        list = env("SM_HOSTS") ? cJSON_Parse(env("SM_HOSTS")) : NULL;
        current = env("SM_CURRENT_HOST") ? cJSON_CreateString(env("SM_CURRENT_HOST")) : NULL;
        st = DT_OK;
    } else if (rc) {
        list = cJSON_DetachItemFromObjectCaseSensitive(rc, "hosts");
        current = cJSON_DetachItemFromObjectCaseSensitive(rc, "current_host");
    }
    cJSON_Delete(rc);
    *me = -1;
    int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0;
    for (int i = 0; st == DT_OK && i < n; i++) {
        const cJSON *h = cJSON_GetArrayItem(list, i);
        if (!cJSON_IsString(h) || !*h->valuestring || strlen(h->valuestring) >= DT_HOST_CAP - 8)
            st = dt_error(DT_ERR_INVALID, "%s: hosts[%d] is not a host name", where, i);
        else if (cJSON_IsString(current) && strcmp(h->valuestring, current->valuestring) == 0)
            *me = i;
    }
    if (st == DT_OK && (n < 1 || n > MAX_HOSTS || !cJSON_IsString(current) || *me < 0))
        st = dt_error(DT_ERR_INVALID, "%s: expected \"hosts\" (1..%d names) and \"current_host\" "
                      "among them", where, MAX_HOSTS);
    cJSON_Delete(current);
    if (st)
        cJSON_Delete(list);
    else
        *hosts = list;
    return st;
}

static bool add_hosts(cJSON *cluster, const char *job, const cJSON *hosts, int from, int port)
{
    cJSON *list = cJSON_AddArrayToObject(cluster, job);
    bool ok = list != NULL;
    for (int i = from; ok && i < cJSON_GetArraySize(hosts); i++) {
        char addr[DT_HOST_CAP + 8];
        snprintf(addr, sizeof addr, "%s:%d", cJSON_GetArrayItem(hosts, i)->valuestring, port);
        ok = cJSON_AddItemToArray(list, cJSON_CreateString(addr));
    }
    return ok;
}

static dt_status sagemaker_resolve(dt_getenv_fn env, char **tf_config)
{
    cJSON *hosts = NULL;
    int me;
    bool ps = false;
    long long port = 2222;
    dt_status st = dt_resolver_env_int(env, "DTRAIN_PORT_BASE", 65534, &port);
    if (st == DT_END)
        st = DT_OK;
    if (st || (st = hosts_of(env, &hosts, &me)) || (st = ps_enabled(env, &ps)))
        goto done;
    int n = cJSON_GetArraySize(hosts);
    bool ps_task = env("DTRAIN_SAGEMAKER_PS") && strcmp(env("DTRAIN_SAGEMAKER_PS"), "1") == 0;
    ps = ps && n > 1;
    if (ps_task && !ps) {
        st = dt_error(DT_ERR_INVALID, "a ps task, but the job has %s", n > 1
                      ? "no ps distribution (hyperparameter sagemaker_parameter_server_enabled)"
                      : "one host, where the toolkit runs no ps");
        goto done;
    }
    cJSON *root = cJSON_CreateObject(), *cluster = cJSON_AddObjectToObject(root, "cluster");
    cJSON *task = cJSON_AddObjectToObject(root, "task");
    bool ok = root && cluster && task && cJSON_AddStringToObject(root, "environment", "cloud");
    cJSON *master = cJSON_CreateArray();
    ok = ok && master && cJSON_AddItemToObject(cluster, "master", master);
    if (ok) {
        char addr[DT_HOST_CAP + 8];
        snprintf(addr, sizeof addr, "%s:%lld", cJSON_GetArrayItem(hosts, 0)->valuestring, port);
        ok = cJSON_AddItemToArray(master, cJSON_CreateString(addr));
    }
    ok = ok && (!ps || add_hosts(cluster, "ps", hosts, 0, (int)port + 1)) &&
         (n == 1 || add_hosts(cluster, "worker", hosts, 1, (int)port));
    const char *type = ps_task ? "ps" : me == 0 ? "master" : "worker";
    ok = ok && cJSON_AddStringToObject(task, "type", type) &&
         cJSON_AddNumberToObject(task, "index", ps_task ? me : me == 0 ? 0 : me - 1);
    *tf_config = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!*tf_config)
        st = dt_error(DT_ERR_NOMEM, "no memory for a TF_CONFIG");
done:
    cJSON_Delete(hosts);
    return st;
}

const dt_resolver_ops dt_resolver_sagemaker_ops = {DT_RESOLVER_SAGEMAKER, sagemaker_detect,
                                                   sagemaker_resolve};
