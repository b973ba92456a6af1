/* All-reduce through shared memory for ranks on one host (see shm.h). */
#include "shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <sched.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/log.h"
#include "../core/clock.h"

#define SHM_MAGIC 0x314d485354445f31ull /* "1_DTSHM1" little-endian */
#define SHM_VERSION 1u
#define CHUNK_ELEMS ((size_t)1 << 20) /* floats per rank per round: 4 MiB */
/* Elements reduced and updated at a time, so the sums are still in this core's cache when the
 * update reads them (and the updated params when they are copied into res). */
#define UPDATE_SLICE ((size_t)16384)
/* How long a waiting rank spins before it sleeps. A sleeping rank wakes tens of microseconds
 * after the peer it waited for arrives (more in a virtual machine), and lock-step workers wait
 * every step: with a core each, spinning costs nothing, and 2 ms covers most waits. With more
 * ranks than cores, a spinning rank would take the core a peer needs: it sleeps almost at once. */
#define SPIN_SECONDS 2e-3
#define SPIN_SECONDS_OVERSUBSCRIBED 5e-6
#define NAP_NS 2000000L               /* a sleep between checks of the peers and the deadline */
#define OP_SETUP 100                  /* the setup's frames, apart from the collectives' ops */
#define PAGE 4096

enum { ARRIVED, REDUCED };

/* One rank's counters, each on its own cache line: the last round whose data it copied in
 * (ARRIVED) and whose block it reduced (REDUCED). */
struct ctl {
    _Alignas(64) _Atomic uint64_t at[2];
    uint8_t pad[64 - 2 * sizeof(uint64_t)];
};

struct hdr {
    uint64_t magic;
    uint32_t version, size;
    uint8_t nonce[16];
    _Alignas(64) _Atomic uint32_t wake; /* the futex: bumped when a counter moves and someone sleeps */
    _Atomic uint32_t sleepers;
};

struct dt_shm_group {
    dt_transport *t;
    int rank, size;
    uint8_t *base;
    size_t len;
    struct hdr *h;
    struct ctl *ctl; /* size of them */
    float *in;       /* size x CHUNK_ELEMS: each rank's copy of the round's data */
    float *res;      /* CHUNK_ELEMS: the reduced round, each block written by its owner */
    uint64_t round;
    double spin;     /* seconds a wait spins before it sleeps */
    /* The shared tensors (dt_shm_map_tensors), in their own segment: */
    uint8_t *tbase;
    size_t tlen, t_params, t_grads; /* bytes; floats of params and of each rank's gradients */
    float *tparams;  /* the one copy of the parameters */
    float **tgrads;  /* size of them: each rank's gradients */
    float *sum;      /* UPDATE_SLICE floats: the sums of a slice, for the update */
    const float *tinit; /* rank 0: the parameters the shared copy starts from */
};

/* The shared tensors' segment: this header in its first page, then the params, then each
 * rank's gradients, each starting on a page. */
struct tensor_hdr {
    uint64_t magic;
    uint32_t version, size;
    uint8_t nonce[16];
    uint64_t n_params, n_grads;
};

/* What rank 0 offers every rank, and the answers. */
struct offer {
    char name[64];  /* "" when rank 0 could not create a segment */
    uint8_t nonce[16];
    char boot_id[40];
    uint32_t size;
    uint32_t zero;
    uint64_t n_params, n_grads; /* a tensor segment's; 0 for the group's */
};

static size_t ctl_offset(void) { return PAGE; }
static size_t data_offset(int size)
{
    return (ctl_offset() + (size_t)size * sizeof(struct ctl) + PAGE - 1) / PAGE * PAGE;
}
static size_t segment_bytes(int size)
{
    return data_offset(size) + ((size_t)size + 1) * CHUNK_ELEMS * sizeof(float);
}

static void map_parts(dt_shm_group *g)
{
    g->h = (struct hdr *)g->base;
    g->ctl = (struct ctl *)(g->base + ctl_offset());
    g->in = (float *)(g->base + data_offset(g->size));
    g->res = g->in + (size_t)g->size * CHUNK_ELEMS;
}

/* This boot of this machine: two ranks with the same one share /dev/shm. "" if unknown. */
static void read_boot_id(char out[40])
{
    memset(out, 0, 40);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f)
        return;
    if (!fgets(out, 40, f))
        out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

static int futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *timeout)
{
    return (int)syscall(SYS_futex, (uint32_t *)word, op, val, timeout, NULL, 0);
}

/* ---- setup ---- */

/* A name lives in /dev/shm from its creation until every rank has mapped it, a few
 * milliseconds; a creator killed in between leaves it. Names are "dtrain-<creator's pid>-<32 hex
 * digits>": those of this user whose process no longer exists on this host are removed. */
static void remove_stale_names(FILE *log)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char *end;
        if (strncmp(e->d_name, "dtrain-", 7) != 0)
            continue;
        long pid = strtol(e->d_name + 7, &end, 10);
        if (end == e->d_name + 7 || *end != '-' || strlen(end + 1) != 32 ||
            strspn(end + 1, "0123456789abcdef") != 32 || pid <= 0 || pid == (long)getpid())
            continue;
        struct stat sb;
        if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(sb.st_mode) || sb.st_uid != geteuid() || kill((pid_t)pid, 0) == 0 ||
            errno != ESRCH)
            continue;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        if (shm_unlink(name) == 0)
            dt_log_to(log, DT_LOG_INFO, "dtrain: removed /dev/shm%s, left by a process that "
                      "stopped while setting up shared memory", name);
    }
    if (d)
        closedir(d);
}

/* A fresh segment of len bytes, every page allocated, under a random name written to o->name
 * (with a random nonce in o->nonce); NULL when it cannot be had. */
static uint8_t *create_named(struct offer *o, size_t len)
{
    uint8_t rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd ||
        getrandom(o->nonce, sizeof o->nonce, 0) != (ssize_t)sizeof o->nonce)
        return NULL;
    int k = snprintf(o->name, sizeof o->name, "/dtrain-%d-", (int)getpid());
    for (int i = 0; i < 16; i++)
        k += snprintf(o->name + k, sizeof o->name - (size_t)k, "%02x", rnd[i]);
    int fd = shm_open(o->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
        o->name[0] = '\0';
        return NULL;
    }
    /* Every page allocated now: a /dev/shm too small for it (a container's 64 MiB, say) is
     * found here, and the ranks keep to TCP, instead of a SIGBUS at the first touch past it. */
    void *p = posix_fallocate(fd, 0, (off_t)len) == 0
                  ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED) {
        shm_unlink(o->name);
        o->name[0] = '\0';
        return NULL;
    }
    return p;
}

/* The offered segment of len bytes, mapped, when it is on this machine and of that size. */
static uint8_t *open_named(const struct offer *o, const char *boot_id, size_t len)
{
    if (!o->name[0] || !boot_id[0] || strncmp(o->boot_id, boot_id, sizeof o->boot_id) != 0 ||
        memchr(o->name, '\0', sizeof o->name) == NULL)
        return NULL;
    int fd = shm_open(o->name, O_RDWR, 0);
    if (fd < 0)
        return NULL;
    struct stat sb;
    void *p = fstat(fd, &sb) == 0 && (size_t)sb.st_size == len
                  ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

/* Rank 0's segment for the group: created, its header written. */
static int create_segment(dt_shm_group *g, struct offer *o)
{
    g->len = segment_bytes(g->size);
    if (!(g->base = create_named(o, g->len)))
        return 0;
    map_parts(g);
    g->h->magic = SHM_MAGIC;
    g->h->version = SHM_VERSION;
    g->h->size = (uint32_t)g->size;
    memcpy(g->h->nonce, o->nonce, sizeof o->nonce);
    return 1;
}

/* Another rank's side: the segment opened and checked against the offer. */
static int join_segment(dt_shm_group *g, const struct offer *o, const char *boot_id)
{
    if (o->size != (uint32_t)g->size)
        return 0;
    g->len = segment_bytes(g->size);
    if (!(g->base = open_named(o, boot_id, g->len)))
        return 0;
    map_parts(g);
    if (g->h->magic != SHM_MAGIC || g->h->version != SHM_VERSION ||
        g->h->size != (uint32_t)g->size || memcmp(g->h->nonce, o->nonce, sizeof o->nonce) != 0) {
        munmap(g->base, g->len);
        g->base = NULL;
        return 0;
    }
    return 1;
}

/* ---- the shared tensors' segment ---- */

static size_t page_up(size_t bytes) { return (bytes + PAGE - 1) / PAGE * PAGE; }

static size_t tensors_bytes(const dt_shm_group *g, size_t n_params, size_t n_grads)
{
    return PAGE + page_up(n_params * sizeof(float)) +
           (size_t)g->size * page_up(n_grads * sizeof(float));
}

static void map_tensors(dt_shm_group *g, size_t n_params, size_t n_grads)
{
    g->tparams = (float *)(g->tbase + PAGE);
    for (int r = 0; r < g->size; r++)
        g->tgrads[r] = (float *)(g->tbase + PAGE + page_up(n_params * sizeof(float)) +
                                 (size_t)r * page_up(n_grads * sizeof(float)));
}

static int create_tensors(dt_shm_group *g, struct offer *o)
{
    g->tlen = tensors_bytes(g, o->n_params, o->n_grads);
    if (!(g->tbase = create_named(o, g->tlen)))
        return 0;
    struct tensor_hdr *h = (struct tensor_hdr *)g->tbase;
    h->magic = SHM_MAGIC;
    h->version = SHM_VERSION;
    h->size = (uint32_t)g->size;
    memcpy(h->nonce, o->nonce, sizeof o->nonce);
    h->n_params = o->n_params;
    h->n_grads = o->n_grads;
    map_tensors(g, o->n_params, o->n_grads);
    memcpy(g->tparams, g->tinit, o->n_params * sizeof *g->tparams);
    return 1;
}

static int join_tensors(dt_shm_group *g, const struct offer *o, const char *boot_id)
{
    if (o->size != (uint32_t)g->size || o->n_params != g->t_params || o->n_grads != g->t_grads)
        return 0;
    g->tlen = tensors_bytes(g, o->n_params, o->n_grads);
    if (!(g->tbase = open_named(o, boot_id, g->tlen)))
        return 0;
    const struct tensor_hdr *h = (const struct tensor_hdr *)g->tbase;
    if (h->magic != SHM_MAGIC || h->version != SHM_VERSION || h->size != (uint32_t)g->size ||
        memcmp(h->nonce, o->nonce, sizeof o->nonce) != 0 || h->n_params != o->n_params ||
        h->n_grads != o->n_grads) {
        munmap(g->tbase, g->tlen);
        g->tbase = NULL;
        return 0;
    }
    map_tensors(g, o->n_params, o->n_grads);
    return 1;
}

/* Rank 0: offers a segment (the group's, or with tensors the shared tensors' of g->t_params and
 * g->t_grads floats) to every rank, gathers the answers, tells everyone the outcome. */
static dt_status lead_setup(dt_shm_group *g, dt_xfer *x, bool tensors, int *use)
{
    struct offer o;
    memset(&o, 0, sizeof o);
    read_boot_id(o.boot_id);
    o.size = (uint32_t)g->size;
    o.n_params = tensors ? g->t_params : 0;
    o.n_grads = tensors ? g->t_grads : 0;
    if (!tensors)
        remove_stale_names(g->t->log);
    int ok = o.boot_id[0] && (tensors ? create_tensors(g, &o) : create_segment(g, &o));
    dt_status st = DT_OK;
    for (int r = 1; r < g->size && st == DT_OK; r++)
        st = dt_transport_exchange(g->t, x, r, &o, sizeof o, -1, NULL, 0);
    for (int r = 1; r < g->size && st == DT_OK; r++) {
        uint64_t answer = 0;
        st = dt_transport_exchange(g->t, x, -1, NULL, 0, r, &answer, sizeof answer);
        ok = ok && answer == 1;
    }
    uint64_t verdict = st == DT_OK && ok;
    for (int r = 1; r < g->size && st == DT_OK; r++)
        st = dt_transport_exchange(g->t, x, r, &verdict, sizeof verdict, -1, NULL, 0);
    if (o.name[0])
        shm_unlink(o.name); /* mapped by all who use it: the name is of no more use */
    *use = st == DT_OK && verdict == 1;
    return st;
}

static dt_status follow_setup(dt_shm_group *g, dt_xfer *x, bool tensors, int *use)
{
    struct offer o;
    char boot_id[40];
    read_boot_id(boot_id);
    dt_status st = dt_transport_exchange(g->t, x, -1, NULL, 0, 0, &o, sizeof o);
    if (st)
        return st;
    uint64_t answer = (uint64_t)(tensors ? join_tensors(g, &o, boot_id)
                                         : join_segment(g, &o, boot_id)),
             verdict = 0;
    if ((st = dt_transport_exchange(g->t, x, 0, &answer, sizeof answer, -1, NULL, 0)) ||
        (st = dt_transport_exchange(g->t, x, -1, NULL, 0, 0, &verdict, sizeof verdict)))
        return st;
    *use = verdict == 1;
    return DT_OK;
}

dt_status dt_shm_group_open(dt_transport *t, double timeout, dt_shm_group **out)
{
    *out = NULL;
    if (t->size < 2)
        return DT_OK;
    dt_shm_group *g = calloc(1, sizeof *g);
    if (!g)
        return dt_error(DT_ERR_NOMEM, "no memory for a shared-memory group");
    g->t = t, g->rank = t->rank, g->size = t->size;
    cpu_set_t cpus;
    int n_cpus = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    g->spin = g->size <= n_cpus ? SPIN_SECONDS : SPIN_SECONDS_OVERSUBSCRIBED;
    dt_xfer x = {.name = "shared-memory setup", .op = OP_SETUP, .start = dt_clock_now()};
    x.deadline = x.start + timeout;
    int use = 0;
    dt_status st = g->rank == 0 ? lead_setup(g, &x, false, &use) : follow_setup(g, &x, false, &use);
    if (st || !use) {
        dt_shm_group_close(g);
        return st;
    }
    *out = g;
    return DT_OK;
}

void dt_shm_group_close(dt_shm_group *g)
{
    if (!g)
        return;
    if (g->base)
        munmap(g->base, g->len);
    if (g->tbase)
        munmap(g->tbase, g->tlen);
    free(g->tgrads);
    free(g->sum);
    free(g);
}

dt_status dt_shm_map_tensors(dt_shm_group *g, dt_xfer *x, const float *params, size_t n_params,
                             size_t n_grads, float **shared_params, float **shared_grads)
{
    *shared_params = *shared_grads = NULL;
    if (g->tbase && (g->t_params != n_params || g->t_grads != n_grads))
        return DT_OK; /* one set of shared tensors per group */
    if (g->tbase) {
        /* Mapped before: rank 0's parameters copied in again, and no rank reads them before. */
        if (g->rank == 0)
            memcpy(g->tparams, params, n_params * sizeof *params);
        float none = 0.0f;
        dt_status st = dt_shm_allreduce(g, x, &none, 1, DT_REDUCE_SUM);
        if (st)
            return st;
    } else {
        if (!g->tgrads && !(g->tgrads = calloc((size_t)g->size, sizeof *g->tgrads)))
            return dt_error(DT_ERR_NOMEM, "no memory for shared tensors");
        if (!g->sum && !(g->sum = malloc(UPDATE_SLICE * sizeof *g->sum)))
            return dt_error(DT_ERR_NOMEM, "no memory for shared tensors");
        g->t_params = n_params, g->t_grads = n_grads, g->tinit = params;
        int use = 0;
        dt_status st = g->rank == 0 ? lead_setup(g, x, true, &use) : follow_setup(g, x, true, &use);
        if (st || !use) {
            if (g->tbase)
                munmap(g->tbase, g->tlen);
            g->tbase = NULL;
            return st;
        }
    }
    /* Rank 0's parameters are everyone's: it wrote them before it sent its offer (or before the
     * barrier), so the others read them after. */
    *shared_params = g->tparams;
    *shared_grads = g->tgrads[g->rank];
    return DT_OK;
}

/* ---- meeting at the counters ---- */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    for (int i = 0; i < 32; i++)
        __builtin_ia32_pause();
#endif
}

static _Atomic uint64_t *counter(dt_shm_group *g, int r, int which) { return &g->ctl[r].at[which]; }

/* The first rank whose counter has not reached round, or -1. */
static int first_behind(dt_shm_group *g, int which, uint64_t round)
{
    for (int r = 0; r < g->size; r++)
        if (atomic_load_explicit(counter(g, r, which), memory_order_acquire) < round)
            return r;
    return -1;
}

static void publish(dt_shm_group *g, int which, uint64_t round)
{
    /* Sequentially consistent, as the sleepers' count is: either a waiter sees this round, or
     * this rank sees the waiter and wakes it. */
    atomic_store(counter(g, g->rank, which), round);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load(&g->h->sleepers) > 0) {
        atomic_fetch_add(&g->h->wake, 1);
        futex(&g->h->wake, FUTEX_WAKE, INT_MAX, NULL);
    }
}

/* Checks the ranks still behind: a closed connection or an ABORT frame, the deadline, and a
 * stall warning once. */
static dt_status check_waiting(dt_shm_group *g, dt_xfer *x, int which, uint64_t round)
{
    for (int r = 0; r < g->size; r++) {
        if (r == g->rank || atomic_load(counter(g, r, which)) >= round)
            continue;
        dt_status st = dt_transport_check_peer(g->t, x, r);
        if (st)
            return st;
    }
    double now = dt_clock_now();
    int r = first_behind(g, which, round);
    if (r < 0)
        return DT_OK;
    if (now >= x->deadline)
        return dt_error(DT_ERR_TIMEOUT, "%s #%u: timed out after %.0f s waiting for %s", x->name,
                        x->seq, now - x->start, g->t->peers[r].name);
    if (x->stall_warn > 0 && !x->stall_logged && now - x->start >= x->stall_warn) {
        x->stall_logged = true;
        dt_log_to(g->t->log, DT_LOG_WARN, "dtrain: warning: %s #%u has waited %.0f s for %s",
                  x->name, x->seq, now - x->start, g->t->peers[r].name);
    }
    return DT_OK;
}

/* Waits until every rank's counter reaches round: spinning a little, then sleeping on the futex
 * in naps, checking the peers and the deadline between them. */
static dt_status wait_for(dt_shm_group *g, dt_xfer *x, int which, uint64_t round)
{
    double spin_end = dt_clock_now() + g->spin;
    while (first_behind(g, which, round) >= 0) {
        if (dt_clock_now() < spin_end) {
            cpu_relax();
            continue;
        }
        dt_status st = check_waiting(g, x, which, round);
        if (st)
            return st;
        uint32_t w = atomic_load(&g->h->wake);
        atomic_fetch_add(&g->h->sleepers, 1);
        /* The count, then the counters: against publish's counter, then the count. */
        atomic_thread_fence(memory_order_seq_cst);
        if (first_behind(g, which, round) >= 0) {
            struct timespec nap = {0, NAP_NS};
            futex(&g->h->wake, FUTEX_WAIT, w, &nap);
        }
        atomic_fetch_sub(&g->h->sleepers, 1);
    }
    return DT_OK;
}

/* ---- all-reduce ---- */

/* The sum of two ranks' blocks, into res and into this rank's own data at once. Addition
 * commutes bitwise, so mine + other is the rank-order sum whichever rank this is. In blocks of
 * 16 with restrict pointers, so the compiler vectorizes it. */
static void add_into_both(float *restrict res, float *restrict mine, const float *restrict other,
                          size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (size_t j = 0; j < 16; j++)
            res[i + j] = mine[i + j] = mine[i + j] + other[i + j];
    for (; i < n; i++)
        res[i] = mine[i] = mine[i] + other[i];
}

/* mine += other: the two ranks' sum into this rank's data alone (see add_into_both). */
static void add_into(float *restrict mine, const float *restrict other, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (size_t j = 0; j < 16; j++)
            mine[i + j] += other[i + j];
    for (; i < n; i++)
        mine[i] += other[i];
}

/* Rank r's operand for this rank's block at b_off. */
static const float *operand(const dt_shm_group *g, int r, const float *mine, size_t b_off)
{
    return r == g->rank ? mine : g->in + (size_t)r * CHUNK_ELEMS + b_off;
}

/* This rank's block of the round, reduced in rank order into res and into its own data: its
 * own operand is read from data itself (only it needs that block), the others' from their
 * copies. */
static void reduce_block(dt_shm_group *g, float *mine, size_t b_off, size_t b_n, dt_reduce_op op)
{
    float *res = g->res + b_off;
    if (g->size == 2 && (op == DT_REDUCE_SUM || op == DT_REDUCE_MEAN)) {
        add_into_both(res, mine, operand(g, 1 - g->rank, mine, b_off), b_n);
    } else {
        memcpy(res, operand(g, 0, mine, b_off), b_n * sizeof *res);
        for (int r = 1; r < g->size; r++)
            dt_reduce_f32(res, operand(g, r, mine, b_off), b_n, op);
        memcpy(mine, res, b_n * sizeof *res);
    }
    if (op == DT_REDUCE_MEAN) {
        for (size_t i = 0; i < b_n; i++)
            res[i] /= (float)g->size;
        memcpy(mine, res, b_n * sizeof *res);
    }
}

/* What a round does with this rank's block, between copying in and copying out. */
typedef enum { ROUND_REDUCE, ROUND_UPDATE, ROUND_SHARE } round_kind;

typedef struct {
    round_kind kind;
    dt_reduce_op op;
    float *data;   /* the operands (REDUCE, UPDATE), or the values to share (SHARE) */
    float *params; /* UPDATE: the values the owners update and share */
    dt_update_fn update;
    void *ctx;
} round_job;

/* This rank's block [b_off, b_off + b_n) of the round at off: reduced, updated or copied into
 * res, where the other ranks read it. */
static void own_block(dt_shm_group *g, const round_job *j, size_t off, size_t b_off, size_t b_n)
{
    size_t at = off + b_off;
    switch (j->kind) {
    case ROUND_REDUCE:
        reduce_block(g, j->data + at, b_off, b_n, j->op);
        break;
    case ROUND_UPDATE:
        for (size_t s = 0; s < b_n; s += UPDATE_SLICE) {
            size_t k = b_n - s < UPDATE_SLICE ? b_n - s : UPDATE_SLICE;
            /* The sums go to this rank's own gradients only: res then takes the params. */
            if (g->size == 2)
                add_into(j->data + at + s, operand(g, 1 - g->rank, NULL, b_off + s), k);
            else
                reduce_block(g, j->data + at + s, b_off + s, k, DT_REDUCE_SUM);
            j->update(j->ctx, at + s, at + s + k, j->data + at + s);
            memcpy(g->res + b_off + s, j->params + at + s, k * sizeof *g->res);
        }
        break;
    case ROUND_SHARE:
        memcpy(g->res + b_off, j->data + at, b_n * sizeof *g->res);
        break;
    }
}

/* One round over data[off, off + len): every rank copies in the blocks others own (REDUCE,
 * UPDATE), does its own block, and copies the others' results out (into params for UPDATE). */
static dt_status run_round(dt_shm_group *g, dt_xfer *x, const round_job *j, size_t off, size_t len)
{
    uint64_t round = ++g->round;
    size_t b_off, b_n;
    dt_comm_block(len, g->size, g->rank, &b_off, &b_n);
    size_t after = b_off + b_n, rest = len - after;
    /* Copied in: every block but this rank's own, which only it reads. The inputs of the round
     * before are free: every rank has reduced its block of them. */
    if (j->kind != ROUND_SHARE) {
        float *in = g->in + (size_t)g->rank * CHUNK_ELEMS;
        memcpy(in, j->data + off, b_off * sizeof *in);
        memcpy(in + after, j->data + off + after, rest * sizeof *in);
    }
    publish(g, ARRIVED, round);
    dt_status st = wait_for(g, x, ARRIVED, round);
    if (st)
        return st;
    /* Into res: its readers of the round before are done, as every rank has arrived. */
    if (b_n > 0)
        own_block(g, j, off, b_off, b_n);
    publish(g, REDUCED, round);
    if ((st = wait_for(g, x, REDUCED, round)))
        return st;
    float *out = j->kind == ROUND_UPDATE ? j->params : j->data;
    memcpy(out + off, g->res, b_off * sizeof *out);
    memcpy(out + off + after, g->res + after, rest * sizeof *out);
    return DT_OK;
}

/* Rounds of at most CHUNK_ELEMS: a rank owns its dt_comm_block of each round. */
static dt_status run_rounds(dt_shm_group *g, dt_xfer *x, const round_job *j, size_t n)
{
    for (size_t off = 0; off < n; off += CHUNK_ELEMS) {
        dt_status st = run_round(g, x, j, off, n - off < CHUNK_ELEMS ? n - off : CHUNK_ELEMS);
        if (st)
            return st;
    }
    return DT_OK;
}

dt_status dt_shm_allreduce(dt_shm_group *g, dt_xfer *x, float *data, size_t n, dt_reduce_op op)
{
    round_job j = {ROUND_REDUCE, op, data, NULL, NULL, NULL};
    return run_rounds(g, x, &j, n);
}

/* sum[0, k) = the ranks' shared gradients at [at, at + k), added in rank order. */
static void sum_slice(const dt_shm_group *g, size_t at, size_t k)
{
    const float *a = g->tgrads[0] + at;
    if (g->size == 2) {
        const float *b = g->tgrads[1] + at;
        size_t i = 0;
        for (; i + 16 <= k; i += 16)
            for (size_t j = 0; j < 16; j++)
                g->sum[i + j] = a[i + j] + b[i + j];
        for (; i < k; i++)
            g->sum[i] = a[i] + b[i];
        return;
    }
    memcpy(g->sum, a, k * sizeof *g->sum);
    for (int r = 1; r < g->size; r++)
        dt_reduce_f32(g->sum, g->tgrads[r] + at, k, DT_REDUCE_SUM);
}

/* The sharded step on the shared tensors, without a copy: once every rank's gradients are in,
 * each rank sums its blocks from all of them, slice by slice, and updates the one copy of the
 * parameters there. A rank owns what it owns in the copying rounds (its dt_comm_block of every
 * CHUNK_ELEMS), so dt_shm_share_owned gathers the same blocks after either. No rank writes its
 * gradients again before all have passed the second meeting (the next step clears them after
 * it), nor the parameters before all have arrived at the next step's first (so none is reading
 * them). */
static dt_status update_in_place(dt_shm_group *g, dt_xfer *x, size_t n, dt_update_fn update,
                                 void *ctx)
{
    uint64_t round = ++g->round;
    publish(g, ARRIVED, round);
    dt_status st = wait_for(g, x, ARRIVED, round);
    if (st)
        return st;
    for (size_t off = 0; off < n; off += CHUNK_ELEMS) {
        size_t b_off, b_n;
        dt_comm_block(n - off < CHUNK_ELEMS ? n - off : CHUNK_ELEMS, g->size, g->rank, &b_off,
                      &b_n);
        for (size_t s = 0; s < b_n; s += UPDATE_SLICE) {
            size_t at = off + b_off + s, k = b_n - s < UPDATE_SLICE ? b_n - s : UPDATE_SLICE;
            sum_slice(g, at, k);
            update(ctx, at, at + k, g->sum);
        }
    }
    publish(g, REDUCED, round);
    return wait_for(g, x, REDUCED, round);
}

dt_status dt_shm_allreduce_update(dt_shm_group *g, dt_xfer *x, float *grads, float *params,
                                  size_t n, dt_update_fn update, void *ctx)
{
    if (g->tbase && params == g->tparams && grads == g->tgrads[g->rank] && n == g->t_params &&
        n <= g->t_grads)
        return update_in_place(g, x, n, update, ctx);
    round_job j = {ROUND_UPDATE, DT_REDUCE_SUM, grads, params, update, ctx};
    return run_rounds(g, x, &j, n);
}

dt_status dt_shm_share_owned(dt_shm_group *g, dt_xfer *x, float *data, size_t n)
{
    round_job j = {ROUND_SHARE, DT_REDUCE_SUM, data, NULL, NULL, NULL};
    return run_rounds(g, x, &j, n);
}

/* Within one round, dt_comm_block gives each rank exactly its n_bytes: sharing the owned blocks
 * of size x n_bytes is the all-gather, copied as bytes (never added). */
dt_status dt_shm_allgather(dt_shm_group *g, dt_xfer *x, const void *send, size_t n_bytes,
                           void *recv)
{
    size_t w = n_bytes / sizeof(float), n = w * (size_t)g->size;
    if (n_bytes % sizeof(float) != 0 || n == 0 || n > CHUNK_ELEMS)
        return DT_ERR_UNSUPPORTED;
    float small[1024], *buf = n <= 1024 ? small : malloc(n * sizeof *buf);
    if (!buf)
        return dt_error(DT_ERR_NOMEM, "no memory for an all-gather of %zu bytes", n_bytes);
    memcpy(buf + (size_t)g->rank * w, send, n_bytes);
    dt_status st = dt_shm_share_owned(g, x, buf, n);
    if (st == DT_OK)
        memcpy(recv, buf, n * sizeof *buf);
    if (buf != small)
        free(buf);
    return st;
}
