/* Guarded read-only file views (see mapview.h).
 *
 * The guard is a table of the open views' address ranges that the SIGBUS handler reads without a
 * lock: a slot is claimed by its used flag, filled, and only then published by storing its base
 * address; it is withdrawn (base cleared) before its mapping goes. A fault inside a published
 * range can only come from a thread reading that view, which holds it open, so the handler never
 * sees a slot change under it for the address it looks up. */
#include "mapview.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct guard_slot {
    atomic_int used;
    atomic_uintptr_t base; /* 0: not published */
    atomic_size_t len;
    atomic_int shrunk;
};

static struct guard_slot guards[DT_MAPVIEW_MAX];
static struct sigaction previous_bus;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static atomic_int installed; /* 1 once the handler is in place */
static size_t page_bytes;

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < DT_MAPVIEW_MAX; i++) {
        uintptr_t b = atomic_load_explicit(&guards[i].base, memory_order_acquire);
        if (b == 0 || a < b || a - b >= atomic_load_explicit(&guards[i].len, memory_order_relaxed))
            continue;
        /* The file shrank under this view: zeros take the vanished page's place, so the read
         * completes, and the view remembers it. mmap is a plain system call here. */
        void *page = (void *)(a & ~(uintptr_t)(page_bytes - 1));
        if (mmap(page, page_bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
            MAP_FAILED)
            break;
        atomic_store(&guards[i].shrunk, 1);
        return;
    }
    /* Not a view of ours: as if this handler were not there. */
    if (previous_bus.sa_flags & SA_SIGINFO) {
        previous_bus.sa_sigaction(sig, si, ctx);
    } else if (previous_bus.sa_handler != SIG_DFL && previous_bus.sa_handler != SIG_IGN) {
        previous_bus.sa_handler(sig);
    } else {
        /* The default action: back to it, and the faulting read faults again. */
        signal(SIGBUS, SIG_DFL);
    }
}

static void install_guard(void)
{
    page_bytes = (size_t)sysconf(_SC_PAGESIZE);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    atomic_store(&installed, sigaction(SIGBUS, &sa, &previous_bus) == 0);
}

dt_status dt_mapview_guard_install(void)
{
    pthread_once(&install_once, install_guard);
    return atomic_load(&installed) ? DT_OK
                                   : dt_error(DT_ERR_IO, "cannot install the SIGBUS handler that "
                                              "guards mapped files: %s", strerror(errno));
}

/* Without the guard: the bytes are read into anonymous memory instead of mapped, so a file cut
 * short under the reader shows as a short read, never a signal. */
static dt_status read_view(int fd, const char *name, uint64_t page_off, size_t file_len,
                           uint8_t *base, bool *shrunk)
{
    size_t got = 0;
    while (got < file_len) {
        ssize_t n = pread(fd, base + got, file_len - got, (off_t)(page_off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return dt_error(DT_ERR_IO, "%s: offset %llu: read: %s", name,
                            (unsigned long long)(page_off + got), strerror(errno));
        if (n == 0) {
            *shrunk = true; /* the rest stays zeros, as the guard would have made them */
            break;
        }
        got += (size_t)n;
    }
    return DT_OK;
}

static int claim_slot(void)
{
    for (int i = 0; i < DT_MAPVIEW_MAX; i++) {
        int free_slot = 0;
        if (atomic_compare_exchange_strong(&guards[i].used, &free_slot, 1))
            return i;
    }
    return -1;
}

static dt_status open_copied(int fd, const char *name, uint64_t off, size_t len,
                             uint64_t page_off, size_t file_len, size_t total, dt_mapview *v)
{
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return dt_error(DT_ERR_IO, "%s: offset %llu: %zu bytes of memory: %s", name,
                        (unsigned long long)off, len, strerror(errno));
    dt_status st = read_view(fd, name, page_off, file_len, base, &v->copied_short);
    if (st) {
        munmap(base, total);
        return st;
    }
    v->base = base, v->base_len = total;
    v->data = (const uint8_t *)base + (off - page_off);
    v->off = off, v->len = len;
    return DT_OK;
}

dt_status dt_mapview_open(int fd, const char *name, uint64_t off, size_t len, dt_mapview *v)
{
    memset(v, 0, sizeof *v);
    v->guard = -1;
    if (page_bytes == 0)
        __atomic_store_n(&page_bytes, (size_t)sysconf(_SC_PAGESIZE), __ATOMIC_RELAXED);
    uint64_t page_off = off & ~(uint64_t)(page_bytes - 1);
    size_t head = (size_t)(off - page_off);
    /* The file's pages, then the slack: reserve the whole stretch anonymously (zeros) and map
     * the file over its start, so a view that ends at a page boundary is still followed by
     * readable bytes. */
    size_t file_len = head + len;
    size_t total = (file_len + DT_MAPVIEW_SLACK + page_bytes - 1) / page_bytes * page_bytes;
    if (!atomic_load(&installed))
        return open_copied(fd, name, off, len, page_off, file_len, total, v);
    int slot = claim_slot();
    if (slot < 0)
        return dt_error(DT_ERR_IO, "%s: more than %d mapped views at once", name, DT_MAPVIEW_MAX);
    void *base = mmap(NULL, total, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED)
        goto fail;
    if (file_len > 0 && mmap(base, file_len, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd,
                             (off_t)page_off) == MAP_FAILED) {
        int e = errno;
        munmap(base, total);
        errno = e;
        goto fail;
    }
    atomic_store(&guards[slot].len, total);
    atomic_store(&guards[slot].shrunk, 0);
    atomic_store_explicit(&guards[slot].base, (uintptr_t)base, memory_order_release);
    v->base = base, v->base_len = total, v->guard = slot;
    v->data = (const uint8_t *)base + head;
    v->off = off, v->len = len;
    return DT_OK;
fail:;
    int e = errno;
    atomic_store(&guards[slot].used, 0);
    return dt_error(DT_ERR_IO, "%s: offset %llu: mmap of %zu bytes: %s", name,
                    (unsigned long long)off, len, strerror(e));
}

bool dt_mapview_shrunk(const dt_mapview *v)
{
    return v->copied_short || (v->guard >= 0 && atomic_load(&guards[v->guard].shrunk));
}

void dt_mapview_close(dt_mapview *v)
{
    if (!v->base)
        return;
    if (v->guard >= 0) {
        atomic_store(&guards[v->guard].base, 0);
        atomic_store(&guards[v->guard].used, 0);
    }
    munmap(v->base, v->base_len);
    memset(v, 0, sizeof *v);
    v->guard = -1;
}
