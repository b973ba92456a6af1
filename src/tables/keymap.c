/* Dynamic embedding tables' key maps (see include/dtrain/keymap.h). */
#include "dtrain/keymap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../core/grow.h"

/* An index entry: 0 empty, a row (1 .. 2^31 - 1), or COUNTING | a counting record. */
#define COUNTING 0x80000000u
#define INDEX_SEED 0x6b65796d61702d69ULL /* "keymap-i": not the shard hash's seed (0) */
#define BLOOM_SEED 0x626c6f6f6d2d6b31ULL
/* Rows admitted between two reads of the machine's available memory. */
#define MEMINFO_EVERY_ROWS 65536
/* What admission leaves the machine, as a fraction of its memory (and at least 256 MB). */
#define MEMORY_MARGIN 0.04
/* Histogram buckets of rows' ages for max_rows: one per step up to LINEAR_AGES, then one per
 * doubling. */
#define LINEAR_AGES 4096
#define AGE_BUCKETS (LINEAR_AGES + 40)

/* A row's key, times seen and last step (0 marks a free row): one 16-byte record, so a lookup
 * that finds the row and stamps it touches one cache line. */
typedef struct {
    int64_t key;
    uint32_t count, last;
} row_meta;

/* The index is buckets of one cache line: 12 entries and a tag byte each (0 empty, 1 a removed
 * entry, else 2 + a hash of the key mod 254), so a lookup reads one line and compares a key only
 * where the tag matches. */
#define BUCKET_SLOTS 12
typedef struct {
    uint8_t tag[BUCKET_SLOTS];
    uint32_t spare;
    uint32_t ent[BUCKET_SLOTS];
} bucket;
#define ENT(m, pos) ((m)->bk[(pos) / BUCKET_SLOTS].ent[(pos) % BUCKET_SLOTS])

enum pass_phase { PASS_NONE, PASS_AGES, PASS_ROWS, PASS_COUNTING };

struct dt_keymap {
    char name[DT_VIEW_NAME_CAP];
    dt_keymap_policy p;
    int n_tables;
    dt_table *tables[DT_KEYMAP_MAX_TABLES];
    float stddev[DT_KEYMAP_MAX_TABLES];
    uint64_t seed[DT_KEYMAP_MAX_TABLES];
    size_t row_floats; /* every attached table's floats of one row, slots included */

    int64_t cap;       /* rows, the zero row included */
    int64_t high;      /* rows [0, high) used or free */
    row_meta *meta;    /* (cap): mapped */
    uint32_t *free_rows;
    int64_t n_free, free_cap;

    bucket *bk;        /* the index: n_buckets buckets of BUCKET_SLOTS entries */
    uint64_t n_buckets, index_used, index_tomb;

    /* Exact counting: records of keys not admitted yet; clast 0 marks a free record. */
    int64_t *ckeys;
    uint32_t *ccounts, *clast, *cfree;
    int64_t c_high, c_cap, n_cfree;
    /* dt_keymap_counting's and dt_keymap_rows's packed copies. */
    int64_t *pk, *rk;
    uint32_t *pc, *pl, *rc, *rl;

    uint8_t *bloom;   /* 4-bit counters, two per byte */
    uint64_t bloom_counters;

    int64_t live, counting, admitted, evicted, waiting_full;
    int64_t rows_at_meminfo; /* high when available memory was last read */

    enum pass_phase phase;
    int64_t pass_step, last_pass_step, next; /* the pass's step and the next row or record */
    uint32_t cutoff;                         /* max_rows: rows last seen before this go */
    int64_t *ages;                           /* (AGE_BUCKETS) */
    /* dt_keymap_resolve's grouping of a batch's places by key (group_places). */
    int64_t *b_uniq, *b_rows;
    uint32_t *b_times, *b_which, *b_table;
    size_t batch_cap, batch_slots, b_n;
    /* dt_keymap_merge_rows's marks: bit i of merged[r] once table i's row r came in. */
    uint8_t *merged;
    int64_t merged_cap;
    /* Tensor names of dt_keymap_tensors: "<table>/keys" and the like. */
    char tensor_names[DT_KEYMAP_MAX_TABLES][7][DT_VIEW_NAME_CAP + 24];
};

/* ---- Hashing ---- */

uint64_t dt_keymap_hash(int64_t key, uint64_t seed)
{
    uint64_t h = (uint64_t)key ^ seed;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

int dt_keymap_shard(int64_t key, int n) { return (int)(dt_keymap_hash(key, 0) % (uint64_t)n); }

static uint64_t index_hash(int64_t key) { return dt_keymap_hash(key, INDEX_SEED); }

/* The bucket from the hash's high bits, the tag from its low ones: independent of each other. */
static uint64_t bucket_of(const dt_keymap *m, uint64_t h)
{
    return (uint64_t)(((unsigned __int128)h * m->n_buckets) >> 64);
}

static uint8_t tag_of(uint64_t h) { return (uint8_t)(2 + (h & 0xffff) % 254); }

static int64_t key_of_entry(const dt_keymap *m, uint32_t e)
{
    return e & COUNTING ? m->ckeys[e & ~COUNTING] : m->meta[e].key;
}

/* The position holding key (hash h), else where it would go: the first free slot (empty or
 * removed) of the buckets from its own up to the first with an empty slot, where an insertion
 * would have stopped. The index always has empty slots. */
static uint64_t probe_hashed(const dt_keymap *m, int64_t key, uint64_t h)
{
    uint8_t t = tag_of(h);
    uint64_t b = bucket_of(m, h), free_pos = UINT64_MAX;
    for (;;) {
        const bucket *x = &m->bk[b];
        bool empty = false;
        for (int s = 0; s < BUCKET_SLOTS; s++) {
            uint8_t g = x->tag[s];
            if (g == t && key_of_entry(m, x->ent[s]) == key)
                return b * BUCKET_SLOTS + (uint64_t)s;
            if (g <= 1 && free_pos == UINT64_MAX)
                free_pos = b * BUCKET_SLOTS + (uint64_t)s;
            empty |= g == 0;
        }
        if (empty)
            return free_pos;
        if (++b == m->n_buckets)
            b = 0;
    }
}

static uint64_t probe(const dt_keymap *m, int64_t key) { return probe_hashed(m, key, index_hash(key)); }

/* ---- Policy ---- */

void dt_keymap_policy_default(dt_keymap_policy *p)
{
    memset(p, 0, sizeof *p);
    p->bloom_hashes = 3;
}

bool dt_keymap_policy_equal(const dt_keymap_policy *a, const dt_keymap_policy *b)
{
    return (a->min_count > 1 ? a->min_count : 1) == (b->min_count > 1 ? b->min_count : 1) &&
           a->bloom_bits == b->bloom_bits && a->bloom_hashes == b->bloom_hashes &&
           a->steps_to_live == b->steps_to_live && a->l2_below == b->l2_below &&
           a->max_rows == b->max_rows && a->evict_every_steps == b->evict_every_steps &&
           a->memory_limit == b->memory_limit;
}

bool dt_keymap_policy_is_default(const dt_keymap_policy *p)
{
    dt_keymap_policy d;
    dt_keymap_policy_default(&d);
    return dt_keymap_policy_equal(p, &d);
}

dt_status dt_keymap_policy_check(const dt_keymap_policy *p)
{
    if (p->min_count < 0 || p->min_count > UINT32_MAX)
        return dt_error(DT_ERR_INVALID, "admit: `min_count` %lld outside 0..2^32 - 1",
                        (long long)p->min_count);
    if (p->bloom_bits && (p->bloom_bits < 64 || p->bloom_bits > ((int64_t)1 << 40)))
        return dt_error(DT_ERR_INVALID, "admit: `bloom_bits` %lld outside 64..2^40",
                        (long long)p->bloom_bits);
    if (p->bloom_bits && (p->bloom_hashes < 1 || p->bloom_hashes > 16))
        return dt_error(DT_ERR_INVALID, "admit: `bloom_hashes` %d outside 1..16", p->bloom_hashes);
    if (p->bloom_bits && p->min_count > 15)
        return dt_error(DT_ERR_INVALID, "admit: `min_count` %lld with a Bloom filter, whose 4-bit "
                        "counters count to 15", (long long)p->min_count);
    const char *negative = p->bloom_bits < 0 ? "bloom_bits" : p->steps_to_live < 0 ? "steps_to_live"
                         : p->max_rows < 0 ? "max_rows" : p->evict_every_steps < 0 ? "evict_every_steps"
                         : p->memory_limit < 0 ? "memory_limit" : NULL;
    if (negative)
        return dt_error(DT_ERR_INVALID, "`%s` must not be negative", negative);
    if (p->max_rows >= DT_KEYMAP_MAX_ROWS)
        return dt_error(DT_ERR_INVALID, "evict: `max_rows` %lld, at most 2^31 - 1",
                        (long long)p->max_rows);
    if (!(p->l2_below >= 0.0f) || !isfinite(p->l2_below))
        return dt_error(DT_ERR_INVALID, "evict: `l2_below` %g must be finite and not negative",
                        (double)p->l2_below);
    return DT_OK;
}

bool dt_keymap_policy_evicts(const dt_keymap_policy *p)
{
    return p->steps_to_live > 0 || p->l2_below > 0.0f || p->max_rows > 0;
}

/* /proc/meminfo's value of field (kB) in bytes, or 0. */
static uint64_t meminfo(const char *field)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            kb = strtoull(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return (uint64_t)kb * 1024;
}

static uint64_t physical_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : (uint64_t)1 << 32;
}

int64_t dt_keymap_capacity(const dt_keymap_policy *p, size_t row_bytes)
{
    int64_t rows;
    if (p->max_rows > 0)
        rows = p->max_rows + 1;
    else {
        uint64_t bytes = p->memory_limit ? (uint64_t)p->memory_limit : physical_bytes();
        rows = (int64_t)(bytes / (row_bytes + 24)) + 1;
    }
    if (rows < 2)
        rows = 2;
    return rows < DT_KEYMAP_MAX_ROWS ? rows : DT_KEYMAP_MAX_ROWS - 1;
}

/* ---- Creation ---- */

/* Two counters a byte, rounded up to 8 bytes: tensors after the filter's in a checkpoint stay
 * aligned. */
static size_t bloom_bytes(const dt_keymap *m) { return ((size_t)(m->bloom_counters + 1) / 2 + 7) & ~(size_t)7; }

static bucket *alloc_buckets(uint64_t n)
{
    bucket *b = aligned_alloc(64, (size_t)n * sizeof *b);
    if (b)
        memset(b, 0, (size_t)n * sizeof *b);
    return b;
}

static void *map_bytes(size_t n)
{
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void unmap_bytes(void *p, size_t n)
{
    if (p)
        munmap(p, n ? n : 1);
}

dt_status dt_keymap_create(const char *name, const dt_keymap_policy *p, int64_t capacity,
                           dt_keymap **out)
{
    *out = NULL;
    dt_status st = dt_keymap_policy_check(p);
    if (st)
        return dt_error_prefix(st, "table %s", name);
    if (capacity < 2 || capacity >= DT_KEYMAP_MAX_ROWS)
        return dt_error(DT_ERR_INVALID, "table %s: a capacity of %lld rows (2 .. 2^31 - 1)", name,
                        (long long)capacity);
    dt_keymap *m = calloc(1, sizeof *m);
    if (!m)
        return dt_error(DT_ERR_NOMEM, "table %s: no memory for its key map", name);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->p = *p;
    m->cap = capacity;
    m->high = 1;
    m->n_buckets = 64;
    m->meta = map_bytes((size_t)capacity * sizeof *m->meta);
    m->bk = alloc_buckets(m->n_buckets);
    if (p->bloom_bits) {
        m->bloom_counters = (uint64_t)p->bloom_bits / 4;
        m->bloom = calloc(bloom_bytes(m), 1);
    }
    if (!m->meta || !m->bk || (p->bloom_bits && !m->bloom)) {
        dt_keymap_destroy(m);
        return dt_error(DT_ERR_NOMEM, "table %s: no memory for the key map of %lld rows", name,
                        (long long)capacity);
    }
    *out = m;
    return DT_OK;
}

void dt_keymap_destroy(dt_keymap *m)
{
    if (!m)
        return;
    unmap_bytes(m->meta, (size_t)m->cap * sizeof *m->meta);
    free(m->free_rows), free(m->bk), free(m->bloom), free(m->ages);
    free(m->ckeys), free(m->ccounts), free(m->clast), free(m->cfree);
    free(m->pk), free(m->pc), free(m->pl), free(m->rk), free(m->rc), free(m->rl);
    free(m->b_uniq), free(m->b_times), free(m->b_which), free(m->b_rows), free(m->b_table);
    free(m->merged);
    free(m);
}

dt_status dt_keymap_attach(dt_keymap *m, dt_table *t, float stddev, uint64_t seed)
{
    if (m->n_tables == DT_KEYMAP_MAX_TABLES)
        return dt_error(DT_ERR_INVALID, "table %s: a key map holds at most %d tables", t->name,
                        DT_KEYMAP_MAX_TABLES);
    if (t->rows != m->cap)
        return dt_error(DT_ERR_INVALID, "table %s: %lld rows for a key map of %lld", t->name,
                        (long long)t->rows, (long long)m->cap);
    dt_table_make_lazy(t);
    m->tables[m->n_tables] = t;
    m->stddev[m->n_tables] = stddev;
    m->seed[m->n_tables] = seed;
    m->n_tables++;
    return DT_OK;
}

void dt_keymap_set_seed(dt_keymap *m, int i, uint64_t seed)
{
    if (i >= 0 && i < m->n_tables)
        m->seed[i] = seed;
}

/* ---- The index ---- */

/* Puts entry e for key at pos, a free position probe found. */
static void index_put(dt_keymap *m, uint64_t pos, int64_t key, uint32_t e)
{
    bucket *x = &m->bk[pos / BUCKET_SLOTS];
    int s = (int)(pos % BUCKET_SLOTS);
    m->index_tomb -= x->tag[s] == 1;
    x->tag[s] = tag_of(index_hash(key));
    x->ent[s] = e;
    m->index_used++;
}

/* Removes the entry at pos: its slot is marked removed, so that lookups of keys placed past it
 * still go on. */
static void index_remove(dt_keymap *m, uint64_t pos)
{
    bucket *x = &m->bk[pos / BUCKET_SLOTS];
    int s = (int)(pos % BUCKET_SLOTS);
    x->tag[s] = 1;
    x->ent[s] = 0;
    m->index_used--;
    m->index_tomb++;
}

/* Puts key's entry e into an index being rebuilt, which holds no removed slot and not the key:
 * the first bucket from its own with an empty slot takes it, no key compared. */
static void rebuild_put(dt_keymap *m, int64_t key, uint32_t e)
{
    uint64_t h = index_hash(key), b = bucket_of(m, h);
    for (;;) {
        bucket *x = &m->bk[b];
        for (int s = 0; s < BUCKET_SLOTS; s++)
            if (x->tag[s] == 0) {
                x->tag[s] = tag_of(h);
                x->ent[s] = e;
                m->index_used++;
                return;
            }
        if (++b == m->n_buckets)
            b = 0;
    }
}

/* Rebuilds the index over n buckets, without the removed slots: the entries are taken in row
 * order, then the counting records', reading the keys as they lie in memory. */
static dt_status rebuild_index(dt_keymap *m, uint64_t n)
{
    bucket *nb = alloc_buckets(n);
    if (!nb)
        return dt_error(DT_ERR_NOMEM, "table %s: no memory for an index of %llu entries", m->name,
                        (unsigned long long)(n * BUCKET_SLOTS));
    free(m->bk);
    m->bk = nb, m->n_buckets = n, m->index_used = 0, m->index_tomb = 0;
    for (int64_t r = 1; r < m->high; r++)
        if (m->meta[r].last)
            rebuild_put(m, m->meta[r].key, (uint32_t)r);
    for (int64_t q = 0; q < m->c_high; q++)
        if (m->clast[q])
            rebuild_put(m, m->ckeys[q], COUNTING | (uint32_t)q);
    return DT_OK;
}

/* Room for one more entry: entries and removed slots fill at most 9/10 of the index, which
 * grows by half when its entries fill more than 3/5, and is only cleared of removed slots
 * otherwise: it stays 3/5 to 9/10 full, 5.9 to 8.9 bytes a key. */
static dt_status index_room(dt_keymap *m)
{
    uint64_t slots = m->n_buckets * BUCKET_SLOTS;
    if ((m->index_used + m->index_tomb + 1) * 10 <= slots * 9)
        return DT_OK;
    bool grow = (m->index_used + 1) * 5 > slots * 3;
    return rebuild_index(m, grow ? m->n_buckets + m->n_buckets / 2 : m->n_buckets);
}

/* ---- Rows ---- */

static double row_bytes(const dt_keymap *m)
{
    double b = 16.0;
    for (int t = 0; t < m->n_tables; t++)
        b += 4.0 * m->tables[t]->dim * (1 + m->tables[t]->n_slots);
    return b;
}

/* DT_ERR_NOMEM when one more row would pass what the map may take. */
static dt_status check_memory(dt_keymap *m)
{
    double bytes = row_bytes(m) * (double)(m->high + 1) + 64.0 * (double)m->n_buckets;
    /* The capacity a memory limit gave the tables assumed two slots per row: with fewer, the
     * limit itself may not be reached first, but it is still what stops the table. */
    if (m->p.memory_limit && (bytes > (double)m->p.memory_limit || m->high >= m->cap))
        return dt_error(DT_ERR_NOMEM, "table %s: %lld rows take %.1f MB, at the %.1f MB its "
                        "memory limit allows: bound it with max_rows, admission or eviction",
                        m->name, (long long)m->high, bytes / 1e6, (double)m->p.memory_limit / 1e6);
    if (m->high - m->rows_at_meminfo >= MEMINFO_EVERY_ROWS) {
        m->rows_at_meminfo = m->high;
        uint64_t avail = meminfo("MemAvailable"), total = meminfo("MemTotal");
        double margin = fmax(MEMORY_MARGIN * (double)total, 256e6);
        if (total && (double)avail < margin)
            return dt_error(DT_ERR_NOMEM, "table %s: %lld rows (%.1f MB) and the machine has "
                            "%.1f MB available: stopped before it swaps; bound the table with "
                            "max_rows, admission or eviction", m->name, (long long)m->high,
                            bytes / 1e6, (double)avail / 1e6);
    }
    if (m->high >= m->cap)
        return dt_error(DT_ERR_NOMEM, "table %s: %lld rows, its capacity: bound it with max_rows, "
                        "admission or eviction", m->name, (long long)m->high);
    return DT_OK;
}

static void init_row(dt_keymap *m, int64_t r, int64_t key)
{
    for (int t = 0; t < m->n_tables; t++) {
        dt_table *tab = m->tables[t];
        float *row = dt_table_row(tab, r);
        if (m->stddev[t] > 0.0f)
            dt_table_draw_row(row, tab->dim, m->stddev[t], m->seed[t], (uint64_t)key);
        else
            memset(row, 0, (size_t)tab->dim * sizeof *row);
        for (int s = 0; s < tab->n_slots; s++) {
            float *x = tab->slots[s] + (size_t)r * (size_t)tab->dim;
            for (int k = 0; k < tab->dim; k++)
                x[k] = tab->slot_init[s];
        }
    }
}

/* A row for key (a free one, else a new one), initialised; 0 and *st set when there is none. */
static int64_t new_row(dt_keymap *m, int64_t key, dt_status *st)
{
    int64_t r;
    if (m->n_free > 0)
        r = m->free_rows[--m->n_free];
    else {
        if ((*st = check_memory(m)))
            return 0;
        r = m->high++;
    }
    m->meta[r].key = key;
    init_row(m, r, key);
    return r;
}

/* ---- Admission ---- */

static uint32_t bloom_get(const dt_keymap *m, uint64_t c)
{
    return (m->bloom[c >> 1] >> ((c & 1) * 4)) & 15u;
}

/* Counts a sighting of key in the filter; returns its count (the least of its counters). */
static uint32_t bloom_add(dt_keymap *m, int64_t key)
{
    uint64_t h = dt_keymap_hash(key, BLOOM_SEED), h1 = h & 0xffffffffu, h2 = (h >> 32) | 1;
    uint32_t least = 15;
    uint64_t at[16];
    for (int i = 0; i < m->p.bloom_hashes; i++) {
        uint64_t x = dt_keymap_hash((int64_t)(h1 + (uint64_t)i * h2), BLOOM_SEED);
        at[i] = (uint64_t)(((unsigned __int128)x * m->bloom_counters) >> 64);
        uint32_t v = bloom_get(m, at[i]);
        least = v < least ? v : least;
    }
    /* Conservative update: only the counters at the least rise, which keeps the others from
     * counting high for keys that share them. */
    for (int i = 0; i < m->p.bloom_hashes && least < 15; i++)
        if (bloom_get(m, at[i]) == least)
            m->bloom[at[i] >> 1] = (uint8_t)(m->bloom[at[i] >> 1] + (1u << ((at[i] & 1) * 4)));
    return least < 15 ? least + 1 : 15;
}

static dt_status counting_room(dt_keymap *m)
{
    if (m->n_cfree > 0 || m->c_high < m->c_cap)
        return DT_OK;
    int64_t cap = m->c_cap ? m->c_cap * 2 : 1024;
    if (cap > (int64_t)COUNTING - 1)
        return dt_error(DT_ERR_NOMEM, "table %s: %lld keys counted", m->name, (long long)m->c_cap);
    if (!dt_grow_together((dt_grow_item[]){{&m->ckeys, sizeof *m->ckeys},
                                           {&m->ccounts, sizeof *m->ccounts},
                                           {&m->clast, sizeof *m->clast},
                                           {&m->cfree, sizeof *m->cfree}},
                          4, (size_t)cap))
        return dt_error(DT_ERR_NOMEM, "table %s: no memory to count %lld keys", m->name,
                        (long long)cap);
    m->c_cap = cap;
    return DT_OK;
}

static uint32_t new_counting(dt_keymap *m, int64_t key, uint32_t step)
{
    uint32_t q = m->n_cfree > 0 ? m->cfree[--m->n_cfree] : (uint32_t)m->c_high++;
    m->ckeys[q] = key, m->ccounts[q] = 1, m->clast[q] = step ? step : 1;
    m->counting++;
    return q;
}

static void drop_counting(dt_keymap *m, uint32_t q)
{
    m->clast[q] = 0;
    m->cfree[m->n_cfree++] = q;
    m->counting--;
}

static bool room_for_row(dt_keymap *m)
{
    if (m->p.max_rows > 0 && m->live >= m->p.max_rows) {
        m->waiting_full++;
        return false;
    }
    return true;
}

/* Gives the key at slot i (no entry, or a counting record) a row; 0 when it waits for room. */
static int64_t admit(dt_keymap *m, uint64_t i, int64_t key, uint32_t count, uint32_t step,
                     dt_status *st)
{
    if (!room_for_row(m))
        return 0;
    uint32_t e = ENT(m, i);
    if (e == 0 && (*st = index_room(m)))
        return 0;
    if (e == 0)
        i = probe(m, key); /* the index may have been rebuilt */
    int64_t r = new_row(m, key, st);
    if (!r)
        return 0;
    if (e & COUNTING) {
        drop_counting(m, e & ~COUNTING);
        ENT(m, i) = (uint32_t)r;
    } else {
        index_put(m, i, key, (uint32_t)r);
    }
    m->meta[r].count = count, m->meta[r].last = step;
    m->live++, m->admitted++;
    return r;
}


/* One sighting of a key without a row: counted, and admitted at its count. */
static uint32_t saturating_add_n(uint32_t a, uint32_t n)
{
    return a > UINT32_MAX - n ? UINT32_MAX : a + n;
}

/* c sightings of a key without a row: counted, and admitted at its count. */
static int64_t sighting(dt_keymap *m, int64_t key, uint64_t i, uint32_t c, uint32_t step,
                        dt_status *st)
{
    uint32_t need = m->p.min_count > 1 ? (uint32_t)m->p.min_count : 1;
    if (need == 1)
        return admit(m, i, key, c, step, st);
    if (m->bloom) {
        uint32_t have = 0;
        for (uint32_t k = 0; k < c && k < 15; k++)
            have = bloom_add(m, key);
        return have >= need ? admit(m, i, key, have, step, st) : 0;
    }
    uint32_t e = ENT(m, i);
    if (e == 0) {
        if ((*st = index_room(m)) || (*st = counting_room(m)))
            return 0;
        uint32_t q = new_counting(m, key, step);
        m->ccounts[q] = c;
        index_put(m, probe(m, key), key, COUNTING | q);
        return c >= need ? admit(m, probe(m, key), key, c, step, st) : 0;
    }
    uint32_t q = e & ~COUNTING;
    m->ccounts[q] = saturating_add_n(m->ccounts[q], c);
    m->clast[q] = step;
    return m->ccounts[q] >= need ? admit(m, i, key, m->ccounts[q], step, st) : 0;
}

/* Lookups run ahead of their use in two stages: AHEAD places on, the key's home slot in the
 * index is prefetched; AHEAD / 2 places on, the entry found there (now in cache) has its row's
 * record prefetched. A lookup of a table larger than the caches then waits for neither. */
enum { AHEAD = 16 };

static void prefetch_slot(const dt_keymap *m, const int64_t *keys, size_t n, size_t j,
                          uint64_t *homes)
{
    if (j < n) {
        homes[j % AHEAD] = index_hash(keys[j]);
        __builtin_prefetch(&m->bk[bucket_of(m, homes[j % AHEAD])]);
    }
}

/* The rows of the key's bucket whose tags match: the key's, and rarely another's. */
static void prefetch_row(const dt_keymap *m, size_t n, size_t j, const uint64_t *homes)
{
    if (j >= n)
        return;
    uint64_t h = homes[j % AHEAD];
    const bucket *x = &m->bk[bucket_of(m, h)];
    uint8_t t = tag_of(h);
    for (int s = 0; s < BUCKET_SLOTS; s++)
        if (x->tag[s] == t && !(x->ent[s] & COUNTING))
            __builtin_prefetch(&m->meta[x->ent[s]], 1);
}

/* The first AHEAD keys' buckets and the first AHEAD / 2 keys' rows on their way. */
static void start_lookups(const dt_keymap *m, const int64_t *keys, size_t n, uint64_t *homes)
{
    for (size_t j = 0; j < AHEAD && j < n; j++)
        prefetch_slot(m, keys, n, j, homes);
    for (size_t j = 0; j < AHEAD / 2 && j < n; j++)
        prefetch_row(m, n, j, homes);
}

/* A batch's places grouped by key: uniq[u] the distinct keys in order of first place, times[u]
 * their places, which[j] place j's key's index in uniq. The scratch table is sized for the
 * batch (at most half full) and stays in cache. */
static dt_status group_places(dt_keymap *m, const int64_t *keys, size_t n)
{
    int bits = 4;
    while (((size_t)1 << bits) < 2 * n)
        bits++;
    size_t slots = (size_t)1 << bits;
    if (n > m->batch_cap || slots > m->batch_slots) {
        free(m->b_uniq), free(m->b_times), free(m->b_which), free(m->b_rows), free(m->b_table);
        m->b_uniq = malloc(n * sizeof *m->b_uniq);
        m->b_times = malloc(n * sizeof *m->b_times);
        m->b_which = malloc(n * sizeof *m->b_which);
        m->b_rows = malloc(n * sizeof *m->b_rows);
        m->b_table = malloc(slots * sizeof *m->b_table);
        m->batch_cap = n, m->batch_slots = slots;
        if (!m->b_uniq || !m->b_times || !m->b_which || !m->b_rows || !m->b_table) {
            m->batch_cap = m->batch_slots = 0;
            return dt_error(DT_ERR_NOMEM, "table %s: no memory for a batch of %zu keys", m->name, n);
        }
    }
    memset(m->b_table, 0, slots * sizeof *m->b_table);
    size_t u = 0, mask = slots - 1;
    for (size_t j = 0; j < n; j++) {
        int64_t key = keys[j];
        size_t h = (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ULL) >> (64 - bits));
        for (;;) {
            uint32_t e = m->b_table[h];
            if (e == 0) {
                m->b_table[h] = (uint32_t)(u + 1);
                m->b_uniq[u] = key, m->b_times[u] = 1;
                m->b_which[j] = (uint32_t)u++;
                break;
            }
            if (m->b_uniq[e - 1] == key) {
                m->b_times[e - 1]++;
                m->b_which[j] = e - 1;
                break;
            }
            h = (h + 1) & mask;
        }
    }
    m->b_n = u;
    return DT_OK;
}

dt_status dt_keymap_resolve_counted(dt_keymap *m, const int64_t *uniq, const uint32_t *times,
                                    size_t nu, int64_t step, int64_t *urows)
{
    dt_status st = DT_OK;
    uint32_t s = step < 1 ? 1 : step > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)step;
    uint64_t homes[AHEAD];
    start_lookups(m, uniq, nu, homes);
    for (size_t j = 0; j < nu; j++) {
        int64_t key = uniq[j];
        uint64_t i = probe_hashed(m, key, homes[j % AHEAD]);
        prefetch_slot(m, uniq, nu, j + AHEAD, homes);
        prefetch_row(m, nu, j + AHEAD / 2, homes);
        uint32_t e = ENT(m, i);
        uint32_t c = times[j] ? times[j] : 1;
        if (e && !(e & COUNTING)) {
            urows[j] = e;
            m->meta[e].count = saturating_add_n(m->meta[e].count, c);
            m->meta[e].last = s;
            continue;
        }
        urows[j] = sighting(m, key, i, c, s, &st);
        if (st) {
            memset(urows, 0, nu * sizeof *urows);
            return st;
        }
    }
    return DT_OK;
}

dt_status dt_keymap_resolve(dt_keymap *m, const int64_t *keys, size_t n, int64_t step,
                            int64_t *rows)
{
    dt_status st = group_places(m, keys, n);
    if (st == DT_OK)
        st = dt_keymap_resolve_counted(m, m->b_uniq, m->b_times, m->b_n, step, m->b_rows);
    if (st) {
        memset(rows, 0, n * sizeof *rows);
        return st;
    }
    for (size_t j = 0; j < n; j++)
        rows[j] = m->b_rows[m->b_which[j]];
    return DT_OK;
}

int64_t dt_keymap_row(const dt_keymap *m, int64_t key)
{
    uint32_t e = ENT(m, probe(m, key));
    return e && !(e & COUNTING) ? (int64_t)e : 0;
}

void dt_keymap_find(const dt_keymap *m, const int64_t *keys, size_t n, int64_t *rows)
{
    uint64_t homes[AHEAD];
    start_lookups(m, keys, n, homes);
    for (size_t j = 0; j < n; j++) {
        uint32_t e = ENT(m, probe_hashed(m, keys[j], homes[j % AHEAD]));
        prefetch_slot(m, keys, n, j + AHEAD, homes);
        prefetch_row(m, n, j + AHEAD / 2, homes);
        rows[j] = e && !(e & COUNTING) ? (int64_t)e : 0;
    }
}

/* ---- Eviction ---- */

static void evict_row(dt_keymap *m, int64_t r)
{
    index_remove(m, probe(m, m->meta[r].key));
    m->meta[r].last = 0, m->meta[r].count = 0;
    m->free_rows[m->n_free++] = (uint32_t)r;
    m->live--, m->evicted++;
}

static double row_norm(const dt_keymap *m, int64_t r)
{
    double s = 0.0;
    for (int t = 0; t < m->n_tables; t++) {
        const float *x = dt_table_row(m->tables[t], r);
        for (int k = 0; k < m->tables[t]->dim; k++)
            s += (double)x[k] * (double)x[k];
    }
    return sqrt(s);
}

static int age_bucket(uint32_t age)
{
    if (age < LINEAR_AGES)
        return (int)age;
    int b = LINEAR_AGES;
    for (uint32_t a = age / LINEAR_AGES; a > 1 && b < AGE_BUCKETS - 1; a >>= 1)
        b++;
    return b;
}

/* The oldest last-seen step of bucket b's rows bound: rows seen before it are older. */
static uint32_t bucket_floor_age(int b)
{
    if (b < LINEAR_AGES)
        return (uint32_t)b;
    uint64_t a = (uint64_t)LINEAR_AGES << (b - LINEAR_AGES);
    return a > UINT32_MAX ? UINT32_MAX : (uint32_t)a;
}

/* After the ages pass: the last-seen step below which rows go, so that at most the target
 * stays (whole buckets go: a few more than needed may). */
static void choose_cutoff(dt_keymap *m)
{
    int64_t target = m->p.max_rows - m->p.max_rows / 16, keep = 0;
    m->cutoff = 0;
    for (int b = 0; b < AGE_BUCKETS; b++) {
        if (keep + m->ages[b] > target) {
            /* Bucket b and the older ones go: rows last seen at or before pass_step - age. */
            int64_t c = m->pass_step - (int64_t)bucket_floor_age(b) + 1;
            m->cutoff = c > 1 ? (uint32_t)c : 1;
            return;
        }
        keep += m->ages[b];
    }
}

static bool row_goes(const dt_keymap *m, int64_t r)
{
    uint32_t seen = m->meta[r].last;
    if (m->p.steps_to_live > 0 && m->pass_step - (int64_t)seen >= m->p.steps_to_live)
        return true;
    if (m->cutoff && seen < m->cutoff)
        return true;
    return m->p.l2_below > 0.0f && row_norm(m, r) < (double)m->p.l2_below;
}

static dt_status start_pass(dt_keymap *m, int64_t step)
{
    if (!m->free_rows || m->free_cap < m->cap) {
        uint32_t *f = realloc(m->free_rows, (size_t)m->cap * sizeof *f);
        if (!f)
            return dt_error(DT_ERR_NOMEM, "table %s: no memory to evict", m->name);
        m->free_rows = f, m->free_cap = m->cap;
    }
    m->pass_step = step;
    m->last_pass_step = step;
    m->cutoff = 0;
    m->next = 1;
    m->phase = PASS_ROWS;
    if (m->p.max_rows > 0 && m->live > m->p.max_rows - m->p.max_rows / 16) {
        if (!m->ages && !(m->ages = malloc(AGE_BUCKETS * sizeof *m->ages)))
            return dt_error(DT_ERR_NOMEM, "table %s: no memory to evict", m->name);
        memset(m->ages, 0, AGE_BUCKETS * sizeof *m->ages);
        m->phase = PASS_AGES;
    }
    return DT_OK;
}

/* One page of the pass: its rows' ages, its rows, or its counting records. */
static void scan_page(dt_keymap *m)
{
    int64_t end;
    switch (m->phase) {
    case PASS_AGES:
        end = m->next + DT_KEYMAP_PAGE_ROWS < m->high ? m->next + DT_KEYMAP_PAGE_ROWS : m->high;
        for (int64_t r = m->next; r < end; r++)
            if (m->meta[r].last)
                m->ages[age_bucket((uint32_t)(m->pass_step - m->meta[r].last))]++;
        m->next = end;
        if (end == m->high) {
            choose_cutoff(m);
            m->next = 1, m->phase = PASS_ROWS;
        }
        break;
    case PASS_ROWS:
        end = m->next + DT_KEYMAP_PAGE_ROWS < m->high ? m->next + DT_KEYMAP_PAGE_ROWS : m->high;
        for (int64_t r = m->next; r < end; r++)
            if (m->meta[r].last && row_goes(m, r))
                evict_row(m, r);
        m->next = end;
        if (end == m->high)
            m->next = 0, m->phase = m->p.steps_to_live > 0 && m->ckeys ? PASS_COUNTING : PASS_NONE;
        break;
    case PASS_COUNTING:
        end = m->next + DT_KEYMAP_PAGE_ROWS < m->c_high ? m->next + DT_KEYMAP_PAGE_ROWS : m->c_high;
        for (int64_t q = m->next; q < end; q++)
            if (m->clast[q] && m->pass_step - (int64_t)m->clast[q] >= m->p.steps_to_live) {
                index_remove(m, probe(m, m->ckeys[q]));
                drop_counting(m, (uint32_t)q);
            }
        m->next = end;
        if (end == m->c_high)
            m->phase = PASS_NONE;
        break;
    case PASS_NONE:
        break;
    }
}

bool dt_keymap_evict_step(dt_keymap *m, int64_t step, bool force)
{
    if (!dt_keymap_policy_evicts(&m->p))
        return false;
    if (m->phase == PASS_NONE) {
        bool due = force || (m->p.evict_every_steps > 0 &&
                             step - m->last_pass_step >= m->p.evict_every_steps);
        if (!due || start_pass(m, step))
            return false;
    }
    scan_page(m);
    return m->phase != PASS_NONE;
}

void dt_keymap_evict_all(dt_keymap *m, int64_t step)
{
    while (m->phase != PASS_NONE)
        scan_page(m);
    if (dt_keymap_evict_step(m, step, true))
        while (m->phase != PASS_NONE)
            scan_page(m);
}

void dt_keymap_set_pass_step(dt_keymap *m, int64_t step) { m->last_pass_step = step; }

/* ---- Compaction ---- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void move_row(dt_keymap *m, int64_t from, int64_t to)
{
    ENT(m, probe(m, m->meta[from].key)) = (uint32_t)to;
    m->meta[to] = m->meta[from];
    m->meta[from].last = 0;
    for (int t = 0; t < m->n_tables; t++) {
        dt_table *tab = m->tables[t];
        size_t d = (size_t)tab->dim;
        memcpy(dt_table_row(tab, to), dt_table_row(tab, from), d * sizeof(float));
        for (int s = 0; s < tab->n_slots; s++)
            memcpy(tab->slots[s] + (size_t)to * d, tab->slots[s] + (size_t)from * d,
                   d * sizeof(float));
    }
}

void dt_keymap_compact(dt_keymap *m)
{
    /* A pass under way holds row numbers: finish it first. */
    while (m->phase != PASS_NONE)
        scan_page(m);
    if (m->n_free > 0)
        qsort(m->free_rows, (size_t)m->n_free, sizeof *m->free_rows, cmp_u32);
    int64_t lo = 0, hi = m->high - 1;
    while (lo < m->n_free) {
        while (hi > 0 && m->meta[hi].last == 0)
            hi--;
        if ((int64_t)m->free_rows[lo] >= hi)
            break;
        move_row(m, hi--, m->free_rows[lo++]);
    }
    m->n_free = 0;
    m->high = m->live + 1;
    for (int t = 0; t < m->n_tables; t++)
        dt_table_release_rows(m->tables[t], m->high);
}

/* ---- Figures and state ---- */

void dt_keymap_stats_get(const dt_keymap *m, dt_keymap_stats *out)
{
    memset(out, 0, sizeof *out);
    out->live = m->live;
    out->counting = m->counting;
    out->admitted = m->admitted;
    out->evicted = m->evicted;
    out->waiting_full = m->waiting_full;
    out->rows_used = m->high;
    out->row_bytes = (uint64_t)(row_bytes(m) - 16.0);
    /* The index's entries are shared out between the keys with rows and those being counted. */
    double entries = (double)(m->live + m->counting);
    double index_bytes = 64.0 * (double)m->n_buckets;
    double index_share = entries > 0 ? index_bytes * (double)m->live / entries : index_bytes;
    out->key_bytes = (uint64_t)index_share + 16 * (uint64_t)m->high;
    out->counting_bytes = (uint64_t)m->c_cap * 20 + (uint64_t)(index_bytes - index_share);
    out->bloom_bytes = m->bloom ? bloom_bytes(m) : 0;
    out->rows_bytes = out->row_bytes * (uint64_t)m->high;
    out->bytes = out->key_bytes + out->rows_bytes + out->counting_bytes + out->bloom_bytes;
}

double dt_keymap_bytes_per_key(const dt_keymap_stats *s)
{
    if (s->live <= 0)
        return 0.0;
    return (double)(s->key_bytes + s->rows_bytes) / (double)s->live;
}

void dt_keymap_stats_add(dt_keymap_stats *a, const dt_keymap_stats *b)
{
    a->live += b->live, a->counting += b->counting, a->admitted += b->admitted;
    a->evicted += b->evicted, a->waiting_full += b->waiting_full, a->rows_used += b->rows_used;
    a->row_bytes += b->row_bytes, a->rows_bytes += b->rows_bytes;
    a->key_bytes += b->key_bytes, a->counting_bytes += b->counting_bytes;
    a->bloom_bytes += b->bloom_bytes, a->bytes += b->bytes;
}

const dt_keymap_policy *dt_keymap_policy_of(const dt_keymap *m) { return &m->p; }
const char *dt_keymap_name(const dt_keymap *m) { return m->name; }

dt_status dt_keymap_rows(dt_keymap *m, const int64_t **keys, const uint32_t **counts,
                         const uint32_t **last_seen, int64_t *n)
{
    free(m->rk), free(m->rc), free(m->rl);
    size_t cap = (size_t)(m->high > 1 ? m->high - 1 : 1);
    m->rk = malloc(cap * sizeof *m->rk);
    m->rc = malloc(cap * sizeof *m->rc);
    m->rl = malloc(cap * sizeof *m->rl);
    if (!m->rk || !m->rc || !m->rl)
        return dt_error(DT_ERR_NOMEM, "table %s: no memory to list %lld keys", m->name,
                        (long long)(m->high - 1));
    for (int64_t r = 1; r < m->high; r++) {
        m->rk[r - 1] = m->meta[r].key;
        m->rc[r - 1] = m->meta[r].count;
        m->rl[r - 1] = m->meta[r].last;
    }
    *keys = m->rk, *counts = m->rc, *last_seen = m->rl, *n = m->high - 1;
    return DT_OK;
}

dt_status dt_keymap_counting(dt_keymap *m, const int64_t **keys, const uint32_t **counts,
                             const uint32_t **last_seen, int64_t *n)
{
    free(m->pk), free(m->pc), free(m->pl);
    size_t cap = (size_t)(m->counting ? m->counting : 1);
    m->pk = malloc(cap * sizeof *m->pk);
    m->pc = malloc(cap * sizeof *m->pc);
    m->pl = malloc(cap * sizeof *m->pl);
    if (!m->pk || !m->pc || !m->pl)
        return dt_error(DT_ERR_NOMEM, "table %s: no memory for %lld counted keys", m->name,
                        (long long)m->counting);
    int64_t k = 0;
    for (int64_t q = 0; q < m->c_high; q++)
        if (m->clast[q]) {
            m->pk[k] = m->ckeys[q], m->pc[k] = m->ccounts[q], m->pl[k] = m->clast[q];
            k++;
        }
    *keys = m->pk, *counts = m->pc, *last_seen = m->pl, *n = k;
    return DT_OK;
}

const uint8_t *dt_keymap_bloom(const dt_keymap *m, size_t *n_bytes)
{
    *n_bytes = m->bloom ? bloom_bytes(m) : 0;
    return m->bloom;
}

void dt_keymap_clear(dt_keymap *m)
{
    memset(m->bk, 0, (size_t)m->n_buckets * sizeof *m->bk);
    m->index_tomb = 0;
    if (m->high > 1)
        memset(m->meta, 0, (size_t)m->high * sizeof *m->meta);
    if (m->bloom)
        memset(m->bloom, 0, bloom_bytes(m));
    m->index_used = 0;
    m->high = 1, m->n_free = 0, m->rows_at_meminfo = 0;
    m->c_high = 0, m->n_cfree = 0;
    m->live = m->counting = m->admitted = m->evicted = m->waiting_full = 0;
    m->phase = PASS_NONE;
    dt_keymap_merge_end(m);
}

dt_status dt_keymap_restore_rows(dt_keymap *m, const int64_t *keys, const uint32_t *counts,
                                 const uint32_t *last_seen, int64_t n, const char *what)
{
    dt_keymap_clear(m);
    for (int64_t i = 0; i < n; i++) {
        if (last_seen[i] == 0)
            return dt_error(DT_ERR_INVALID, "%s: key %lld (index %lld) last seen at step 0", what,
                            (long long)keys[i], (long long)i);
        uint64_t slot = probe(m, keys[i]);
        if (ENT(m, slot))
            return dt_error(DT_ERR_INVALID, "%s: key %lld given twice (index %lld)", what,
                            (long long)keys[i], (long long)i);
        dt_status st = index_room(m);
        if (st || (st = check_memory(m)))
            return dt_error_prefix(st, "%s", what);
        int64_t r = m->high++;
        m->meta[r].key = keys[i], m->meta[r].count = counts[i], m->meta[r].last = last_seen[i];
        index_put(m, probe(m, keys[i]), keys[i], (uint32_t)r);
        m->live++;
    }
    return DT_OK;
}

/* A counting record for key, which the index does not hold: count times seen, last at step. */
static dt_status add_counted(dt_keymap *m, int64_t key, uint32_t count, uint32_t step)
{
    dt_status st = index_room(m);
    if (st || (st = counting_room(m)))
        return st;
    uint32_t q = new_counting(m, key, step);
    m->ccounts[q] = count;
    index_put(m, probe(m, key), key, COUNTING | q);
    return DT_OK;
}

dt_status dt_keymap_restore_counting(dt_keymap *m, const int64_t *keys, const uint32_t *counts,
                                     const uint32_t *last_seen, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        if (last_seen[i] == 0 || counts[i] == 0)
            return dt_error(DT_ERR_INVALID, "%s: counted key %lld (index %lld) with count %u at "
                            "step %u", what, (long long)keys[i], (long long)i, counts[i],
                            last_seen[i]);
        if (ENT(m, probe(m, keys[i])))
            return dt_error(DT_ERR_INVALID, "%s: counted key %lld (index %lld) given twice or "
                            "with a row", what, (long long)keys[i], (long long)i);
        dt_status st = add_counted(m, keys[i], counts[i], last_seen[i]);
        if (st)
            return dt_error_prefix(st, "%s", what);
    }
    return DT_OK;
}

dt_status dt_keymap_restore_bloom(dt_keymap *m, const uint8_t *bytes, size_t n_bytes,
                                  const char *what)
{
    size_t have = 0;
    dt_keymap_bloom(m, &have);
    if (!m->bloom || have != n_bytes)
        return dt_error(DT_ERR_INVALID, "%s: a Bloom filter of %zu bytes for table %s, whose "
                        "filter has %zu", what, n_bytes, m->name, have);
    memcpy(m->bloom, bytes, n_bytes);
    return DT_OK;
}

/* ---- Merging parts: a map restored from several shards, or from tables read back ---- */

void dt_keymap_merge_end(dt_keymap *m)
{
    free(m->merged);
    m->merged = NULL, m->merged_cap = 0;
}

/* Room for row r's merge marks. */
static dt_status merge_marks(dt_keymap *m, int64_t r)
{
    if (r < m->merged_cap)
        return DT_OK;
    int64_t cap = m->merged_cap ? m->merged_cap : 4096;
    while (cap <= r)
        cap *= 2;
    uint8_t *p = realloc(m->merged, (size_t)cap);
    if (!p)
        return dt_error(DT_ERR_NOMEM, "table %s: no memory to merge %lld rows", m->name,
                        (long long)cap);
    memset(p + m->merged_cap, 0, (size_t)(cap - m->merged_cap));
    m->merged = p, m->merged_cap = cap;
    return DT_OK;
}

/* The row of key, made when the map has none (every table's initial row, a counting record of
 * the key dropped); 0 and *st set when there is no room. */
static int64_t merge_row_of(dt_keymap *m, int64_t key, uint32_t count, uint32_t last,
                            dt_status *st)
{
    uint64_t pos = probe(m, key);
    uint32_t e = ENT(m, pos);
    if (e && !(e & COUNTING)) {
        m->meta[e].count = m->meta[e].count > count ? m->meta[e].count : count;
        m->meta[e].last = m->meta[e].last > last ? m->meta[e].last : last;
        return (int64_t)e;
    }
    if (e & COUNTING) {
        uint32_t q = e & ~COUNTING;
        count = m->ccounts[q] > count ? m->ccounts[q] : count;
        drop_counting(m, q);
        index_remove(m, pos);
    }
    if ((*st = index_room(m)))
        return 0;
    int64_t r = new_row(m, key, st);
    if (!r)
        return 0;
    index_put(m, probe(m, key), key, (uint32_t)r);
    m->meta[r].count = count, m->meta[r].last = last;
    m->live++;
    return r;
}

dt_status dt_keymap_merge_rows(dt_keymap *m, int i, const int64_t *keys, const uint32_t *counts,
                               const uint32_t *last_seen, int64_t n, const float *rows,
                               const float *const *slots, const char *what)
{
    if (i < 0 || i >= m->n_tables)
        return dt_error(DT_ERR_INVALID, "%s: no table %d in key map %s", what, i, m->name);
    dt_table *tab = m->tables[i];
    size_t d = (size_t)tab->dim;
    for (int64_t j = 0; j < n; j++) {
        int64_t key = keys[j];
        if (key < 0 || last_seen[j] == 0)
            return dt_error(DT_ERR_INVALID, "%s: key %lld (index %lld) %s", what,
                            (long long)key, (long long)j,
                            key < 0 ? "is negative" : "last seen at step 0");
        dt_status st = DT_OK;
        int64_t r = merge_row_of(m, key, counts[j], last_seen[j], &st);
        if (!r || (st = merge_marks(m, r)))
            return dt_error_prefix(st, "%s", what);
        if (m->merged[r] & (1u << i))
            return dt_error(DT_ERR_INVALID, "%s: key %lld given twice (index %lld)", what,
                            (long long)key, (long long)j);
        m->merged[r] |= (uint8_t)(1u << i);
        memcpy(dt_table_row(tab, r), rows + (size_t)j * d, d * sizeof(float));
        for (int s = 0; slots && s < tab->n_slots; s++)
            memcpy(tab->slots[s] + (size_t)r * d, slots[s] + (size_t)j * d, d * sizeof(float));
    }
    return DT_OK;
}

dt_status dt_keymap_merge_counting(dt_keymap *m, const int64_t *keys, const uint32_t *counts,
                                   const uint32_t *last_seen, int64_t n, const char *what)
{
    if (n > 0 && (m->p.bloom_bits > 0 || m->p.min_count <= 1))
        return dt_error(DT_ERR_INVALID, "%s: %lld counted keys for table %s, which does not "
                        "count keys exactly", what, (long long)n, m->name);
    for (int64_t j = 0; j < n; j++) {
        if (keys[j] < 0 || last_seen[j] == 0 || counts[j] == 0)
            return dt_error(DT_ERR_INVALID, "%s: counted key %lld (index %lld) with count %u at "
                            "step %u", what, (long long)keys[j], (long long)j, counts[j],
                            last_seen[j]);
        uint64_t pos = probe(m, keys[j]);
        uint32_t e = ENT(m, pos);
        if (e && !(e & COUNTING))
            continue; /* admitted on another shard or by another table: the row stands */
        if (e) {
            uint32_t q = e & ~COUNTING;
            m->ccounts[q] = m->ccounts[q] > counts[j] ? m->ccounts[q] : counts[j];
            m->clast[q] = m->clast[q] > last_seen[j] ? m->clast[q] : last_seen[j];
            continue;
        }
        dt_status st = add_counted(m, keys[j], counts[j], last_seen[j]);
        if (st)
            return dt_error_prefix(st, "%s", what);
    }
    return DT_OK;
}

dt_status dt_keymap_merge_bloom(dt_keymap *m, const uint8_t *bytes, size_t n_bytes, size_t at,
                                const char *what)
{
    size_t have = 0;
    dt_keymap_bloom(m, &have);
    if (!m->bloom || at > have || n_bytes > have - at)
        return dt_error(DT_ERR_INVALID, "%s: Bloom filter bytes [%zu, %zu) for table %s, whose "
                        "filter has %zu", what, at, at + n_bytes, m->name, have);
    /* Two 4-bit counters a byte, each the greater: a count never goes low. */
    for (size_t k = 0; k < n_bytes; k++) {
        uint8_t a = m->bloom[at + k], b = bytes[k];
        uint8_t lo = (uint8_t)((a & 15) > (b & 15) ? (a & 15) : (b & 15));
        uint8_t hi = (uint8_t)((a >> 4) > (b >> 4) ? (a >> 4) : (b >> 4));
        m->bloom[at + k] = (uint8_t)(lo | hi << 4);
    }
    return DT_OK;
}

size_t dt_keymap_next_live(const dt_keymap *m, int64_t *cursor, size_t max, int64_t *rows,
                           int64_t *keys, uint32_t *counts, uint32_t *last_seen)
{
    size_t k = 0;
    int64_t r = *cursor < 1 ? 1 : *cursor;
    for (; r < m->high && k < max; r++)
        if (m->meta[r].last) {
            rows[k] = r, keys[k] = m->meta[r].key;
            counts[k] = m->meta[r].count, last_seen[k] = m->meta[r].last;
            k++;
        }
    *cursor = r;
    return k;
}

size_t dt_keymap_next_counting(const dt_keymap *m, int64_t *cursor, size_t max, int64_t *keys,
                               uint32_t *counts, uint32_t *last_seen)
{
    size_t k = 0;
    int64_t q = *cursor < 0 ? 0 : *cursor;
    for (; q < m->c_high && k < max; q++)
        if (m->clast[q]) {
            keys[k] = m->ckeys[q], counts[k] = m->ccounts[q], last_seen[k] = m->clast[q];
            k++;
        }
    *cursor = q;
    return k;
}

/* ---- Checkpoints ---- */

int dt_keymap_table_index(const dt_keymap *m, const char *table)
{
    for (int t = 0; t < m->n_tables; t++)
        if (strcmp(m->tables[t]->name, table) == 0)
            return t;
    return -1;
}

static const char *const state_suffix[7] = {"keys", "counts", "last_seen", "counting_keys",
                                            "counting_counts", "counting_last_seen", "bloom"};

static dt_ckpt_tensor vector_tensor(const char *name, const char *dtype, size_t esize,
                                    const void *data, int64_t n)
{
    dt_ckpt_tensor x = {.name = name, .dtype = dtype, .n_dims = 1, .data = data};
    x.dims[0] = n;
    x.n_bytes = (size_t)n * esize;
    return x;
}

static dt_ckpt_tensor rows_tensor(const char *name, const float *rows, int64_t n, int dim)
{
    dt_ckpt_tensor x = {.name = name, .dtype = "F32", .n_dims = 2, .data = rows};
    x.dims[0] = n, x.dims[1] = dim;
    x.n_bytes = (size_t)n * (size_t)dim * sizeof(float);
    return x;
}

dt_status dt_keymap_tensors(dt_keymap *m, int i, bool slots, dt_ckpt_tensor *out, int *count)
{
    const dt_table *t = m->tables[i];
    char (*names)[DT_VIEW_NAME_CAP + 24] = m->tensor_names[i];
    for (int k = 0; k < 7; k++)
        snprintf(names[k], sizeof names[k], "%s/%s", t->name, state_suffix[k]);
    int64_t n = m->high - 1;
    size_t d = (size_t)t->dim;
    int c = 0;
    out[c++] = rows_tensor(t->name, t->data + d, n, t->dim);
    for (int s = 0; slots && s < t->n_slots; s++)
        out[c++] = rows_tensor(t->slot_names[s], t->slots[s] + d, n, t->dim);
    if (i == 0 || !m->rk) {
        const int64_t *ks;
        const uint32_t *cs, *ls;
        int64_t nk;
        dt_status st = dt_keymap_rows(m, &ks, &cs, &ls, &nk);
        if (st)
            return st;
    }
    out[c++] = vector_tensor(names[0], "I64", 8, m->rk, n);
    out[c++] = vector_tensor(names[1], "U32", 4, m->rc, n);
    out[c++] = vector_tensor(names[2], "U32", 4, m->rl, n);
    if (i == 0 && m->ckeys) {
        const int64_t *ks;
        const uint32_t *cs, *ls;
        int64_t nc;
        dt_status st = dt_keymap_counting(m, &ks, &cs, &ls, &nc);
        if (st)
            return st;
        out[c++] = vector_tensor(names[3], "I64", 8, ks, nc);
        out[c++] = vector_tensor(names[4], "U32", 4, cs, nc);
        out[c++] = vector_tensor(names[5], "U32", 4, ls, nc);
    }
    if (i == 0 && m->bloom) {
        size_t nb;
        const uint8_t *b = dt_keymap_bloom(m, &nb);
        out[c++] = vector_tensor(names[6], "U8", 1, b, (int64_t)nb);
    }
    *count = c;
    return DT_OK;
}

/* Tensor name of c, of dtype and shape (n) or (n, dim) (dim 0: a vector); n < 0: any n. */
static dt_status find_tensor(const dt_ckpt *c, const char *name, const char *dtype, int64_t n,
                             int dim, const dt_ckpt_tensor **out)
{
    const dt_ckpt_tensor *x = dt_ckpt_find(c, name);
    if (!x)
        return dt_error(DT_ERR_INVALID, "%s: no tensor '%s' (a dynamic table's)", dt_ckpt_path(c),
                        name);
    bool ok = strcmp(x->dtype, dtype) == 0 && x->n_dims == (dim ? 2 : 1) &&
              (n < 0 || x->dims[0] == n) && (!dim || x->dims[1] == dim);
    if (!ok)
        return dt_error(DT_ERR_INVALID, "%s: tensor '%s' is %s of %d dimensions (%lld, ...), "
                        "expected %s (%lld%s)", dt_ckpt_path(c), name, x->dtype, x->n_dims,
                        (long long)(x->n_dims ? x->dims[0] : 0), dtype, (long long)n,
                        dim ? ", dim" : "");
    *out = x;
    return DT_OK;
}

static dt_status restore_counting(dt_keymap *m, const dt_ckpt *c)
{
    char (*names)[DT_VIEW_NAME_CAP + 24] = m->tensor_names[0];
    const dt_ckpt_tensor *k = dt_ckpt_find(c, names[3]), *cn, *l;
    if (!k) /* written before any key was counted */
        return DT_OK;
    dt_status st;
    if ((st = find_tensor(c, names[3], "I64", -1, 0, &k)) ||
        (st = find_tensor(c, names[4], "U32", k->dims[0], 0, &cn)) ||
        (st = find_tensor(c, names[5], "U32", k->dims[0], 0, &l)))
        return st;
    char what[4200];
    snprintf(what, sizeof what, "%s: %s", dt_ckpt_path(c), names[3]);
    int64_t n = k->dims[0], *aligned = malloc((size_t)(n ? n : 1) * sizeof *aligned);
    if (!aligned)
        return dt_error(DT_ERR_NOMEM, "%s: no memory for %lld keys", what, (long long)n);
    memcpy(aligned, k->data, (size_t)n * sizeof *aligned);
    st = dt_keymap_restore_counting(m, aligned, cn->data, l->data, n, what);
    free(aligned);
    return st;
}

dt_status dt_keymap_restore(dt_keymap *m, const dt_ckpt *c, bool slots)
{
    for (int t = 0; t < m->n_tables; t++)
        for (int k = 0; k < 7; k++)
            snprintf(m->tensor_names[t][k], sizeof m->tensor_names[t][k], "%s/%s",
                     m->tables[t]->name, state_suffix[k]);
    const dt_ckpt_tensor *keys, *counts, *last;
    char (*names)[DT_VIEW_NAME_CAP + 24] = m->tensor_names[0];
    dt_status st;
    dt_keymap_clear(m);
    if ((st = find_tensor(c, names[0], "I64", -1, 0, &keys)) ||
        (st = find_tensor(c, names[1], "U32", keys->dims[0], 0, &counts)) ||
        (st = find_tensor(c, names[2], "U32", keys->dims[0], 0, &last)))
        return st;
    int64_t n = keys->dims[0];
    char what[4200];
    snprintf(what, sizeof what, "%s: %s", dt_ckpt_path(c), names[0]);
    /* Tensors lie where the file puts them: 8-byte keys after a table of an odd number of floats
     * are not 8-aligned. */
    int64_t *aligned = malloc((size_t)(n ? n : 1) * sizeof *aligned);
    if (!aligned)
        return dt_error(DT_ERR_NOMEM, "%s: no memory for %lld keys", what, (long long)n);
    memcpy(aligned, keys->data, (size_t)n * sizeof *aligned);
    st = dt_keymap_restore_rows(m, aligned, counts->data, last->data, n, what);
    free(aligned);
    if (st)
        return st;
    for (int t = 0; t < m->n_tables; t++) {
        dt_table *tab = m->tables[t];
        const dt_ckpt_tensor *x;
        if (t > 0) {
            if ((st = find_tensor(c, m->tensor_names[t][0], "I64", n, 0, &x)))
                return st;
            if (memcmp(x->data, keys->data, (size_t)n * 8) != 0)
                return dt_error(DT_ERR_INVALID, "%s: tensor '%s' differs from '%s': the tables "
                                "share their keys", dt_ckpt_path(c), m->tensor_names[t][0],
                                names[0]);
        }
        size_t d = (size_t)tab->dim;
        if ((st = find_tensor(c, tab->name, "F32", n, tab->dim, &x)))
            return st;
        memcpy(tab->data + d, x->data, x->n_bytes);
        for (int s = 0; s < tab->n_slots; s++) {
            if (!slots) { /* a fresh optimizer: slots at their initial values */
                for (size_t e = d; e < (size_t)(n + 1) * d; e++)
                    tab->slots[s][e] = tab->slot_init[s];
                continue;
            }
            if ((st = find_tensor(c, tab->slot_names[s], "F32", n, tab->dim, &x)))
                return st;
            memcpy(tab->slots[s] + d, x->data, x->n_bytes);
        }
    }
    if ((st = restore_counting(m, c)))
        return st;
    const dt_ckpt_tensor *b = dt_ckpt_find(c, names[6]);
    if (m->bloom && !b)
        return dt_error(DT_ERR_INVALID, "%s: no tensor '%s', the Bloom filter of table %s",
                        dt_ckpt_path(c), names[6], m->name);
    if (m->bloom) {
        snprintf(what, sizeof what, "%s: %s", dt_ckpt_path(c), names[6]);
        if (strcmp(b->dtype, "U8") != 0 || b->n_dims != 1)
            return dt_error(DT_ERR_INVALID, "%s: not a U8 vector", what);
        return dt_keymap_restore_bloom(m, b->data, b->n_bytes, what);
    }
    return DT_OK;
}
