/* The parameter server's messages: requests from workers and the coordinator to ps tasks, and
 * their replies. Pure functions over bytes, as wire.h, so a fuzzer drives the decoder directly;
 * the transport (one message per frame) is another layer's.
 *
 * A message (little-endian):
 *   header (28 bytes): magic "DTPS" | u16 version (2) | u16 type | u64 request id |
 *                      u32 payload bytes | u32 0 | u32 CRC32C of the 24 header bytes before it
 *   (Version 1 had a CRC32C of the payload where the zero is. Every transport of these
 *   messages authenticates them whole, the ps connections with a MAC per message (psconn.h),
 *   the coordinator's links with CURVE (zlink.h), so the CRC caught nothing they do not, and
 *   its pass over every byte on both sides cost about half as much as the MAC.)
 *   payload, by type:
 *     PING, PONG, STOP             nothing
 *     PULL_ROWS                    u32 table | u32 n | i64 ids[n]
 *     ROWS                         u32 table | u32 n | u32 dim | f32 rows[n x dim]
 *     PUSH_ROWS                    u32 table | u32 n | u32 dim | i64 step | f32 lr_scale |
 *                                  i64 ids[n] | f32 rows[n x dim]
 *     PULL_DENSE                   u32 var | u64 offset | u64 count
 *     DENSE                        u32 var | u64 offset | u64 count | f32 values[count]
 *     PUSH_DENSE                   u32 var | u64 offset | u64 count | i64 step | f32 lr_scale |
 *                                  f32 values[count]
 *     ACK                          i64 clock (the shard's updates applied so far)
 *     ERROR                        i32 status | u32 n | n bytes of message (no NUL)
 *     TABLE                        u32 table | u32 dim | i64 rows in the whole table |
 *                                  i64 shards | i64 this shard | u32 partition strategy |
 *                                  u32 optimizer | f32 params[10] | f32 init stddev | u64 seed |
 *                                  u32 n | n bytes of name: the coordinator defines a shard;
 *                                  with the hash strategy (a dynamic table, keymap.h) then
 *                                  i64 min_count | i64 bloom bits | i32 bloom hashes |
 *                                  i64 steps_to_live | f32 l2_below | i64 max_rows |
 *                                  i64 evict_every_steps | i64 memory_limit
 *     PULL_KEYS                    u32 table | u32 n | i64 step | i64 keys[n] | u32 times[n]:
 *                                  a training pull of a dynamic table's rows, each key seen
 *                                  times[i] times in the batch (counted towards admission,
 *                                  stamped with step); replied with ROWS, zeros for a key not
 *                                  admitted
 *     VAR                          u32 var | u64 offset | u64 count | u64 total | u32 optimizer |
 *                                  u32 schedule | i64 decay steps | f32 params[10] |
 *                                  f32 values[count]: a slice [offset, offset + count) of the
 *                                  model's dense variables (total floats), its initial values
 *                                  and the dense optimizer that updates it
 *     RUN                          i64 first step | u32 steps | i64 position | u32 data
 *                                  shard: the coordinator gives a worker steps first .. first +
 *                                  steps - 1 to take on a shard of the data (its own, or a lost
 *                                  worker's it takes over); position is the batches of that
 *                                  shard whose steps the coordinator has seen completed (which
 *                                  the worker skips when it has not read them)
 *     RESULT                       u32 steps taken | u32 done | i64 rows | i64 correct |
 *                                  f64 summed loss: what a RUN did (done: the worker's data is
 *                                  used up, every epoch of it)
 *     SAVE                         i64 step | u32 ps tasks | u32 n | n bytes of a directory
 *                                  (the ps count: the shards' file names; a sparse cluster's
 *                                  ps knows only itself): the coordinator
 *                                  has a ps write its shards of checkpoint `step` there
 *                                  (checkpoint.h names the file)
 *     ASSIGN                       u32 target (0 a table shard, 1 a dense variable) | u32 table
 *                                  or variable | u64 offset | u64 count | u32 slots |
 *                                  f32 values[count] then each optimizer slot's [count]: the
 *                                  coordinator sets [offset, offset + count) of a shard's
 *                                  rows (row-major, its own order) or of a dense variable,
 *                                  with their slots, restoring a checkpoint
 *     KEYED                        u32 table | u32 kind | u32 n | u32 dim | u32 slots |
 *                                  u64 cursor | then by kind: rows (0): i64 keys[n] |
 *                                  u32 counts[n] | u32 last_seen[n] | f32 rows[n x dim] then
 *                                  each slot's [n x dim]; counted keys (1, dim and slots 0):
 *                                  i64 keys[n] | u32 counts[n] | u32 last_seen[n]; the Bloom
 *                                  filter (2, dim and slots 0): u8 bytes[n] from byte cursor.
 *                                  A dynamic table's state, keyed: the coordinator's restore
 *                                  into a ps (merged in, keymap.h), a ps's reply to READ_KEYS
 *                                  (cursor: where the next read starts), a snapshot's
 *                                  records; an empty message of rows ends a restore (cursor:
 *                                  the checkpoint's step, its last whole eviction pass)
 *     READ_KEYS                    u32 table | u32 kind | u32 n | u32 slots | u64 cursor:
 *                                  up to n of a dynamic table's rows (with their slots when
 *                                  slots is 1), counted keys or filter bytes from cursor (0
 *                                  first); replied with KEYED, n 0 once there are no more
 *     STEP                         u32 kind | u32 n | i64 floor: a sparse cluster's worker to
 *                                  ps 0, which keeps the global step: take n steps (0), the
 *                                  variables are ready (1, worker 0; the count raised to floor,
 *                                  a restored checkpoint's step), this worker leaves (2),
 *                                  n steps taken are given back, not trained (3)
 *     STEPS                        i64 count | u32 ready | u32 active: the reply: the global
 *                                  step after the request (a take's steps end at it), whether
 *                                  worker 0 made the variables ready, and how many other
 *                                  workers are training (heard within --coordinator-timeout
 *                                  and not left)
 *     RING                         u32 n | u16 ports[n]: the workers' ring of hybrid training
 *                                  (n 0: the coordinator asks a worker which port its ring
 *                                  listens on; n 1: the worker's answer; n W: every worker's
 *                                  ring port, worker i's at i, for the worker to join the ring)
 * The decoder checks everything before trusting a byte: the magic, version, header CRC and the
 * zero, the
 * type, every count against the payload's size and the limits below, ids not negative, floats
 * finite in pushes. Its views point into the message (no copy); errors name the peer, the field
 * and the byte offset. */
#ifndef DTRAIN_PS_PSMSG_H
#define DTRAIN_PS_PSMSG_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/keymap.h"
#include "dtrain/status.h"

#define DT_PSMSG_HEADER_BYTES 28
#define DT_PSMSG_VERSION 2
/* Limits that keep a message's arrays within memory a peer can be asked to allocate. */
#define DT_PSMSG_MAX_ROWS ((uint32_t)1 << 24)
#define DT_PSMSG_MAX_DIM 65536u
#define DT_PSMSG_MAX_PAYLOAD ((uint64_t)1 << 30)
#define DT_PSMSG_MAX_TEXT 1024u
#define DT_PSMSG_MAX_NAME 64u
#define DT_PSMSG_TABLE_PARAMS 10
#define DT_PSMSG_MAX_RING 65536u
#define DT_PSMSG_MAX_SLOTS 4u

typedef enum {
    DT_PSMSG_PING = 1,
    DT_PSMSG_PONG,
    DT_PSMSG_STOP,
    DT_PSMSG_PULL_ROWS,
    DT_PSMSG_ROWS,
    DT_PSMSG_PUSH_ROWS,
    DT_PSMSG_PULL_DENSE,
    DT_PSMSG_DENSE,
    DT_PSMSG_PUSH_DENSE,
    DT_PSMSG_ACK,
    DT_PSMSG_ERROR,
    DT_PSMSG_TABLE,
    DT_PSMSG_VAR,
    DT_PSMSG_RUN,
    DT_PSMSG_RESULT,
    DT_PSMSG_RING,
    DT_PSMSG_SAVE,
    DT_PSMSG_ASSIGN,
    DT_PSMSG_PULL_KEYS,
    DT_PSMSG_KEYED,
    DT_PSMSG_READ_KEYS,
    DT_PSMSG_STEP,
    DT_PSMSG_STEPS,
} dt_psmsg_type;

/* STEP's kinds (target): take n steps of the global count; the variables are ready (worker 0,
 * once it defined or restored them, the count raised to the floor in step); this worker leaves. */
enum {
    DT_PSMSG_STEP_TAKE = 0,
    DT_PSMSG_STEP_READY = 1,
    DT_PSMSG_STEP_LEAVE = 2,
    DT_PSMSG_STEP_RETURN = 3, /* n steps taken and not trained (the data ended first) */
};

typedef struct {
    dt_psmsg_type type;
    uint64_t request_id;
    uint32_t table;       /* PULL_ROWS, ROWS, PUSH_ROWS; the variable for the dense kinds */
    uint32_t n, dim;      /* rows */
    uint64_t offset, count; /* dense */
    int64_t step;         /* pushes: the global step the update belongs to */
    float lr_scale;       /* pushes */
    int64_t clock;        /* ACK */
    int32_t status;       /* ERROR */
    const uint8_t *ids;   /* n little-endian i64, unaligned: read with dt_psmsg_id */
    const uint8_t *values; /* n x dim or count little-endian f32: dt_psmsg_value */
    const char *text;     /* ERROR: text_len bytes; TABLE: the name */
    uint32_t text_len;
    /* TABLE (and VAR: optimizer, params): the shard of a table (dim and table above) and its optimizer, whose numbers the ps
     * layer gives meaning to; the decoder checks the sizes, the shard's index and that the
     * floats are finite. */
    int64_t rows_total, n_shards, shard;
    uint32_t strategy, optimizer;
    float params[DT_PSMSG_TABLE_PARAMS];
    float init_stddev;
    uint64_t seed;
    /* VAR: offset, count and params above, with */
    uint64_t total;
    uint32_t schedule;
    int64_t decay_steps;
    /* RUN: step and n (the first step and the steps), shard above (the data shard), and */
    int64_t position;
    /* RESULT: n (steps taken) and */
    uint32_t done;
    int64_t rows, correct;
    double loss;
    /* RING: n ports, each 1..65535; decoded as a view (dt_psmsg_port), encoded from ports_host */
    const uint8_t *ports;
    const uint16_t *ports_host;
    /* ASSIGN: what (0 table shard, 1 dense variable), and how many slots follow the values */
    uint32_t target, slots;
    /* TABLE with the hash strategy: the dynamic table's admission and eviction */
    dt_keymap_policy policy;
    /* PULL_KEYS: n times, decoded as a view (dt_psmsg_times), encoded from times_host; KEYED:
     * the keys' counts there, and their last-seen steps as last (dt_psmsg_last, last_host) */
    const uint8_t *times;
    const uint32_t *times_host;
    const uint8_t *last;
    const uint32_t *last_host;
} dt_psmsg;

/* KEYED's and READ_KEYS's kinds of a dynamic table's state (target). */
enum { DT_PSMSG_KEYED_ROWS = 0, DT_PSMSG_KEYED_COUNTING = 1, DT_PSMSG_KEYED_BLOOM = 2 };

/* Decodes one message of n bytes from peer (named in errors). DT_ERR_FORMAT for anything amiss. */
dt_status dt_psmsg_decode(const uint8_t *buf, size_t n, const char *peer, dt_psmsg *out);

/* Checks a message's header alone (magic, header checksum, version, the payload within the
 * limit) and gives its payload size: what a reader needs before it reads the rest. */
dt_status dt_psmsg_peek(const uint8_t hdr[DT_PSMSG_HEADER_BYTES], const char *peer,
                        uint32_t *payload_bytes);

int64_t dt_psmsg_id(const dt_psmsg *m, size_t i);
float dt_psmsg_value(const dt_psmsg *m, size_t i);
uint16_t dt_psmsg_port(const dt_psmsg *m, size_t i);
uint32_t dt_psmsg_times(const dt_psmsg *m, size_t i);
uint32_t dt_psmsg_last(const dt_psmsg *m, size_t i);
/* Values [first, first + n) into out in host order: one copy on a little-endian host. */
void dt_psmsg_values(const dt_psmsg *m, size_t first, size_t n, float *out);

/* A growable output buffer: encoders append one message to it. */
typedef struct {
    uint8_t *data;
    size_t len, cap;
} dt_psbuf;

void dt_psbuf_free(dt_psbuf *b);

/* Appends m (its type's fields; ids and values taken as arrays of n or count elements in host
 * order from ids_host and values_host, ignoring m->ids and m->values). */
dt_status dt_psmsg_encode(const dt_psmsg *m, const int64_t *ids_host, const float *values_host,
                          dt_psbuf *out);

const char *dt_psmsg_type_name(dt_psmsg_type type);

/* The status an ERROR message carries, when it is one this build knows (DT_ERR_INVALID ..
 * DT_ERR_UNAVAILABLE); DT_ERR_PEER otherwise. */
dt_status dt_psmsg_status(const dt_psmsg *m);

#endif
