/* Typed agreement messages: how replicas agree on a step, the end of the data or a decision,
 * exactly (internal to the library).
 *
 * Each replica contributes one message of a known type: integer fields (int64) and real fields
 * (double). Every replica receives the combination: integers summed exactly, reals summed in
 * rank order (so every replica holds the same bits). A message travels little-endian, with its
 * type and field counts, through the communicator's all-gather: a replica that sent another
 * type or shape (a bug, or a peer of another version) fails the agreement, naming its rank.
 *
 * Counts and flags are integers on the wire, never floats: a float all-reduce rounds integers
 * above 2^24, and a raw struct's bytes depend on the compiler. */
#ifndef DTRAIN_COLL_AGREE_H
#define DTRAIN_COLL_AGREE_H

#include <stdint.h>

#include "dtrain/comm.h"

enum { DT_AGREE_MAX_INTS = 16, DT_AGREE_MAX_REALS = 4 };

/* The message types: each has its fixed fields (below, where it is used). */
typedef enum {
    DT_AGREE_STEP = 1,      /* a step's figures: correct, rows, ended, state wanted; loss */
    DT_AGREE_BEFORE_STEP,   /* before a step: rows, ended */
    DT_AGREE_DECISION,      /* the chief's verdict (early stopping) */
    DT_AGREE_RESTORE,       /* what the chief restored: found, failed, the position */
} dt_agree_type;

typedef struct {
    dt_agree_type type;
    int n_ints, n_reals;
    int64_t ints[DT_AGREE_MAX_INTS];
    double reals[DT_AGREE_MAX_REALS];
} dt_agree_msg;

/* In place: m becomes the sum of every rank's m. Collective. */
dt_status dt_comm_agree(dt_comm *c, dt_agree_msg *m);
/* In place: m becomes root's m (the others give its type and shape). Collective. */
dt_status dt_comm_agree_from(dt_comm *c, dt_agree_msg *m, int root);

/* The encoded form: 8 bytes of header (u16 magic 0xA6EE, u16 type, u16 ints, u16 reals), then
 * the ints (i64) and the reals (f64 bits), little-endian. */
size_t dt_agree_encoded_bytes(const dt_agree_msg *m);
void dt_agree_encode(const dt_agree_msg *m, uint8_t *out);
/* DT_ERR_PEER naming `rank` unless in holds a message of want's type and shape. */
dt_status dt_agree_decode(const uint8_t *in, const dt_agree_msg *want, int rank,
                          dt_agree_msg *out);

#endif
