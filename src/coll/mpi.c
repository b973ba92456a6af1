/* The mpi backend's loader: dt_comm_mpi() opens the plugin libdtrain_mpi.so (built from
 * mpi/dt_mpi_plugin.c by mpicc), which alone links libmpi, so that libdtrain and the programs built
 * on it neither link nor load MPI unless they ask for the mpi communicator.
 *
 * The plugin is searched for at $DTRAIN_MPI_PLUGIN when that is set (and only there), else as
 * libdtrain_mpi.so in the directory of the running program (/proc/self/exe), in the directory of
 * the object holding this code (libdtrain.so, via dladdr), and last by its plain name, which the
 * dynamic loader looks up in LD_LIBRARY_PATH, the run paths and its cache (an installed copy).
 *
 * The plugin exports three functions (its whole interface with this file):
 *   void dt_mpi_plugin_abi(uint32_t *version, uint32_t *comm_bytes, uint32_t *ops_bytes)  what
 *       it was built against (DT_MPI_PLUGIN_ABI and the sizes of dt_comm and dt_comm_ops),
 *       checked before anything else is called: a plugin of another dtrain is refused, named;
 *   dt_status dt_mpi_plugin_create(double timeout, dt_comm **out)  the entry: initializes MPI
 *       and returns a communicator over a duplicate of MPI_COMM_WORLD, allocated with malloc;
 *   const char *dt_mpi_plugin_last_error(void)  the calling thread's error message in the plugin.
 * The second exists because the plugin cannot write into this library's error message: a program
 * linked with libdtrain.a exports no dt_error for it to call, so the plugin carries its own copy of
 * the status module, and every call into it goes through the wrappers below, which copy its
 * message into this library's dt_last_error().
 *
 * The plugin stays loaded until the process exits: Open MPI leaves handlers and threads behind
 * that must not outlive its code.
 *
 * Deadlines: MPI calls have no per-call deadline (Open MPI offers none), so the communicator's
 * timeout is recorded but not enforced; a rank that dies makes mpirun end the job, one that hangs
 * hangs the others. mpirun --timeout SECONDS (or MPIEXEC_TIMEOUT) bounds a whole job. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/comm.h"

#define PLUGIN_NAME "libdtrain_mpi.so"
#define PATH_CAP 4096
#define MSG_CAP 1024

typedef dt_status (*plugin_create_fn)(double timeout, dt_comm **out);
typedef const char *(*plugin_error_fn)(void);
typedef void (*plugin_abi_fn)(uint32_t *version, uint32_t *comm_bytes, uint32_t *ops_bytes);

/* The plugin's ABI against this library's: DT_ERR_UNSUPPORTED naming the file and both. */
static dt_status check_abi(void *lib, const char *path)
{
    plugin_abi_fn abi = (plugin_abi_fn)dlsym(lib, "dt_mpi_plugin_abi");
    if (!abi)
        return dt_error(DT_ERR_UNSUPPORTED, "mpi: %s has no ABI version (a plugin of an older "
                        "dtrain): rebuild it with this dtrain (make)", path);
    uint32_t version = 0, comm_bytes = 0, ops_bytes = 0;
    abi(&version, &comm_bytes, &ops_bytes);
    if (version != DT_MPI_PLUGIN_ABI || comm_bytes != sizeof(dt_comm) ||
        ops_bytes != sizeof(dt_comm_ops))
        return dt_error(DT_ERR_UNSUPPORTED, "mpi: %s was built for plugin ABI %u (dt_comm %u "
                        "bytes, dt_comm_ops %u), this dtrain has ABI %d (%zu, %zu): rebuild it with "
                        "this dtrain (make)", path, version, comm_bytes, ops_bytes,
                        DT_MPI_PLUGIN_ABI, sizeof(dt_comm), sizeof(dt_comm_ops));
    return DT_OK;
}

typedef struct {
    dt_comm *inner; /* the plugin's communicator */
    plugin_error_fn last_error;
} host;

/* Moves the plugin's message for a failed call into this library's. */
static dt_status relay(const host *h, dt_status st)
{
    return st == DT_OK ? DT_OK : dt_error(st, "%s", h->last_error());
}

static dt_status host_allreduce(dt_comm *c, float *data, size_t n_elems, dt_reduce_op op,
                                dt_wire_dtype wire)
{
    host *h = c->impl;
    return relay(h, dt_comm_allreduce(h->inner, data, n_elems, op, wire));
}

static dt_status host_reduce_scatter(dt_comm *c, float *data, size_t n_elems, dt_reduce_op op,
                                     dt_wire_dtype wire)
{
    host *h = c->impl;
    return relay(h, dt_comm_reduce_scatter(h->inner, data, n_elems, op, wire));
}

static dt_status host_allgather(dt_comm *c, const void *send, size_t n_bytes, void *recv)
{
    host *h = c->impl;
    return relay(h, dt_comm_allgather(h->inner, send, n_bytes, recv));
}

static dt_status host_broadcast(dt_comm *c, void *data, size_t n_bytes, int root)
{
    host *h = c->impl;
    return relay(h, dt_comm_broadcast(h->inner, data, n_bytes, root));
}

static dt_status host_barrier(dt_comm *c)
{
    host *h = c->impl;
    return relay(h, dt_comm_barrier(h->inner));
}

static void host_destroy(dt_comm *c)
{
    host *h = c->impl;
    if (!h)
        return;
    /* The plugin's destroy frees its state (and finalizes MPI if it initialized it); the struct,
     * from the same malloc, is freed by dt_comm_destroy. */
    dt_comm_destroy(h->inner);
    free(h);
    c->impl = NULL;
}

static const dt_comm_ops host_ops = {
    .name = "mpi",
    .allreduce = host_allreduce,
    .reduce_scatter = host_reduce_scatter,
    .allgather = host_allgather,
    .broadcast = host_broadcast,
    .barrier = host_barrier,
    .destroy = host_destroy,
};

/* dir/PLUGIN_NAME into out, where dir is path up to its last '/'; false if path has none. */
static bool beside(const char *path, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return false;
    int n = snprintf(out, cap, "%.*s/%s", (int)(slash - path), path, PLUGIN_NAME);
    return n > 0 && (size_t)n < cap;
}

/* Appends "; text" (or the first "text") to the list of what was tried. */
static void note(char *tried, size_t cap, const char *path, const char *why)
{
    size_t used = strlen(tried);
    if (used + 1 >= cap)
        return;
    int n = snprintf(tried + used, cap - used, "%s%s: %s", used ? "; " : "", path, why);
    if (n < 0 || (size_t)n >= cap - used) /* cut short: say so */
        memcpy(tried + cap - 4, "...", 4);
}

dt_status dt_comm_mpi(double timeout, dt_comm **out)
{
    *out = NULL;
    char paths[3][PATH_CAP];
    int n_paths = 0;
    const char *env = getenv("DTRAIN_MPI_PLUGIN");
    if (env && *env) {
        snprintf(paths[n_paths++], PATH_CAP, "%s", env);
    } else {
        char self[PATH_CAP];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len > 0) {
            self[len] = '\0';
            if (beside(self, paths[n_paths], PATH_CAP))
                n_paths++;
        }
        /* For a program linked with libdtrain.a this names the program again: skip it then. */
        Dl_info info;
        if (dladdr((void *)dt_comm_mpi, &info) && info.dli_fname &&
            beside(info.dli_fname, paths[n_paths], PATH_CAP) &&
            (n_paths == 0 || strcmp(paths[n_paths], paths[0]) != 0))
            n_paths++;
        snprintf(paths[n_paths++], PATH_CAP, "%s", PLUGIN_NAME);
    }

    char tried[MSG_CAP] = "";
    void *lib = NULL;
    const char *path = NULL;
    for (int i = 0; i < n_paths && !lib; i++) {
        path = paths[i];
        /* A path with a '/' is a file we can look for; a plain name is for the loader. */
        if (strchr(path, '/') && access(path, F_OK) != 0) {
            note(tried, sizeof tried, path, "not found");
            continue;
        }
        /* RTLD_GLOBAL: Open MPI's own components, which it dlopens, resolve symbols of libmpi
         * and libopen-pal through the global scope. */
        lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (!lib) {
            const char *why = dlerror();
            note(tried, sizeof tried, path, why ? why : "cannot be loaded");
        }
    }
    if (!lib)
        return dt_error(DT_ERR_UNSUPPORTED,
                        "mpi: cannot load the MPI plugin (tried %s); make builds %s when mpicc is "
                        "installed (apt-get install libopenmpi-dev openmpi-bin), and "
                        "DTRAIN_MPI_PLUGIN can name it",
                        tried, PLUGIN_NAME);

    dlerror();
    dt_status abi_st = check_abi(lib, path);
    if (abi_st) {
        dlclose(lib);
        return abi_st;
    }
    plugin_create_fn create = (plugin_create_fn)dlsym(lib, "dt_mpi_plugin_create");
    plugin_error_fn last_error = NULL;
    if (create)
        last_error = (plugin_error_fn)dlsym(lib, "dt_mpi_plugin_last_error");
    if (!create || !last_error) {
        const char *why = dlerror();
        dt_status st = dt_error(DT_ERR_UNSUPPORTED,
                                "mpi: %s is not a dtrain MPI plugin: %s", path,
                                why ? why : "a symbol is missing");
        dlclose(lib);
        return st;
    }

    dt_comm *inner = NULL;
    dt_status st = create(timeout, &inner);
    if (st != DT_OK)
        return dt_error(st, "%s", last_error());
    dt_comm *c = calloc(1, sizeof *c);
    host *h = calloc(1, sizeof *h);
    if (!c || !h) {
        free(c);
        free(h);
        dt_comm_destroy(inner);
        return dt_error(DT_ERR_NOMEM, "mpi: out of memory");
    }
    h->inner = inner;
    h->last_error = last_error;
    c->ops = &host_ops;
    c->rank = inner->rank;
    c->size = inner->size;
    c->timeout = inner->timeout;
    c->stall_warn = inner->stall_warn;
    c->impl = h;
    *out = c;
    return DT_OK;
}
