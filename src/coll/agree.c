/* Typed agreement messages over the communicator's all-gather (see agree.h). */
#include "agree.h"

#include <stdlib.h>
#include <string.h>

#include "../core/bytes.h"
#define AGREE_MAGIC 0xA6EEu
#define HEADER_BYTES 8


size_t dt_agree_encoded_bytes(const dt_agree_msg *m)
{
    return HEADER_BYTES + 8 * (size_t)(m->n_ints + m->n_reals);
}

void dt_agree_encode(const dt_agree_msg *m, uint8_t *out)
{
    dt_store_le16(out, AGREE_MAGIC);
    dt_store_le16(out + 2, (uint16_t)m->type);
    dt_store_le16(out + 4, (uint16_t)m->n_ints);
    dt_store_le16(out + 6, (uint16_t)m->n_reals);
    uint8_t *p = out + HEADER_BYTES;
    for (int i = 0; i < m->n_ints; i++, p += 8)
        dt_store_le64(p, (uint64_t)m->ints[i]);
    for (int i = 0; i < m->n_reals; i++, p += 8) {
        uint64_t bits;
        memcpy(&bits, &m->reals[i], sizeof bits);
        dt_store_le64(p, bits);
    }
}

dt_status dt_agree_decode(const uint8_t *in, const dt_agree_msg *want, int rank,
                          dt_agree_msg *out)
{
    unsigned magic = dt_load_le16(in), type = dt_load_le16(in + 2), ni = dt_load_le16(in + 4),
             nr = dt_load_le16(in + 6);
    if (magic != AGREE_MAGIC || type != (unsigned)want->type || ni != (unsigned)want->n_ints ||
        nr != (unsigned)want->n_reals)
        return dt_error(DT_ERR_PEER, "rank %d sent agreement message type %u with %u integers "
                        "and %u reals (magic %04x), expected type %d with %d and %d", rank, type,
                        ni, nr, magic, (int)want->type, want->n_ints, want->n_reals);
    *out = *want;
    const uint8_t *p = in + HEADER_BYTES;
    for (int i = 0; i < want->n_ints; i++, p += 8)
        out->ints[i] = (int64_t)dt_load_le64(p);
    for (int i = 0; i < want->n_reals; i++, p += 8) {
        uint64_t bits = dt_load_le64(p);
        memcpy(&out->reals[i], &bits, sizeof bits);
    }
    return DT_OK;
}

static dt_status check_shape(const dt_agree_msg *m)
{
    if (m->n_ints < 0 || m->n_ints > DT_AGREE_MAX_INTS || m->n_reals < 0 ||
        m->n_reals > DT_AGREE_MAX_REALS)
        return dt_error(DT_ERR_INVALID, "agreement message with %d integers and %d reals",
                        m->n_ints, m->n_reals);
    return DT_OK;
}

dt_status dt_comm_agree_from(dt_comm *c, dt_agree_msg *m, int root)
{
    dt_status st = check_shape(m);
    if (st)
        return st;
    uint8_t buf[HEADER_BYTES + 8 * (DT_AGREE_MAX_INTS + DT_AGREE_MAX_REALS)];
    dt_agree_encode(m, buf);
    if ((st = dt_comm_broadcast(c, buf, dt_agree_encoded_bytes(m), root)))
        return st;
    dt_agree_msg got;
    if ((st = dt_agree_decode(buf, m, root, &got)))
        return st;
    *m = got;
    return DT_OK;
}

dt_status dt_comm_agree(dt_comm *c, dt_agree_msg *m)
{
    dt_status st = check_shape(m);
    if (st)
        return st;
    size_t n = dt_agree_encoded_bytes(m);
    uint8_t mine[HEADER_BYTES + 8 * (DT_AGREE_MAX_INTS + DT_AGREE_MAX_REALS)];
    uint8_t *all = malloc(n * (size_t)c->size);
    if (!all)
        return dt_error(DT_ERR_NOMEM, "no memory for an agreement of %d ranks", c->size);
    dt_agree_encode(m, mine);
    st = dt_comm_allgather(c, mine, n, all);
    dt_agree_msg sum = *m, one;
    for (int i = 0; i < m->n_ints; i++)
        sum.ints[i] = 0;
    for (int i = 0; i < m->n_reals; i++)
        sum.reals[i] = 0.0;
    for (int r = 0; st == DT_OK && r < c->size; r++) {
        if ((st = dt_agree_decode(all + (size_t)r * n, m, r, &one)))
            break;
        for (int i = 0; i < m->n_ints; i++) /* wrapping, not undefined, on a hostile peer */
            sum.ints[i] = (int64_t)((uint64_t)sum.ints[i] + (uint64_t)one.ints[i]);
        for (int i = 0; i < m->n_reals; i++)
            sum.reals[i] += one.reals[i];
    }
    free(all);
    if (st == DT_OK)
        *m = sum;
    return st;
}
