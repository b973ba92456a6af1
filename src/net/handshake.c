/* The authenticated handshake between two tasks (see handshake.h). */
#include "handshake.h"

#include <stdio.h>
#include <string.h>

#include "conn.h"
#include "sock.h"
#include "wire.h"

static dt_status my_hello(const dt_handshake_id *me, dt_hello *h, uint8_t raw[DT_HELLO_BYTES])
{
    memset(h, 0, sizeof *h);
    h->version = DT_WIRE_VERSION;
    h->cluster_id = me->cluster_id;
    h->task_type = (uint8_t)me->job;
    h->task_index = (uint32_t)me->index;
    dt_status st = dt_random_bytes(h->nonce, sizeof h->nonce);
    if (st == DT_OK)
        dt_hello_encode(h, raw);
    return st;
}

/* Refuses the client with why ("is connected already": the client reads "it is ..."), and
 * fails naming it. */
static dt_status refused(int fd, const dt_hello *peer, const char *why)
{
    char told[256];
    snprintf(told, sizeof told, "it %s", why);
    dt_conn_refuse(fd, told);
    return dt_error(DT_ERR_AUTH, "%s:%u %s", dt_job_name((dt_job)peer->task_type),
                    peer->task_index, why);
}

dt_status dt_handshake_serve(const dt_handshake_id *me, int fd, const char *from,
                             double deadline, dt_handshake_policy policy, void *ctx,
                             dt_job *job, int *index, dt_session_keys *keys)
{
    uint8_t hc[DT_HELLO_BYTES], hs[DT_HELLO_BYTES], mac[DT_MAC_BYTES], want[DT_MAC_BYTES];
    dt_hello peer, mine;
    dt_status st = dt_sock_recv_all(fd, hc, sizeof hc, deadline, from);
    if (st)
        return st;
    if ((st = dt_hello_decode(hc, &peer))) {
        /* The refusal's own send may fail (a stranger that hangs up): keep the reason. */
        char why[256];
        snprintf(why, sizeof why, "%s", dt_last_error());
        dt_conn_refuse(fd, why);
        return dt_error(st, "%s", why);
    }
    if (peer.cluster_id != me->cluster_id) {
        dt_conn_refuse(fd, "it belongs to another cluster (its TF_CONFIG differs)");
        return dt_error(DT_ERR_AUTH, "%s:%u belongs to another cluster (its TF_CONFIG differs)",
                        dt_job_name((dt_job)peer.task_type), peer.task_index);
    }
    const char *why = policy(ctx, (dt_job)peer.task_type, (int)peer.task_index, false);
    if (why)
        return refused(fd, &peer, why);
    if ((st = my_hello(me, &mine, hs)))
        return st;
    dt_hello_mac(me->secret, me->secret_len, 'S', hc, hs, mac);
    if ((st = dt_sock_send_all(fd, hs, sizeof hs, deadline, from)) ||
        (st = dt_sock_send_all(fd, mac, sizeof mac, deadline, from)) ||
        (st = dt_sock_recv_all(fd, mac, sizeof mac, deadline, from)))
        return st;
    dt_hello_mac(me->secret, me->secret_len, 'C', hc, hs, want);
    if (!dt_mac_equal(mac, want)) {
        dt_conn_refuse(fd, "wrong cluster secret");
        return dt_error(DT_ERR_AUTH, "%s:%u does not know the cluster secret",
                        dt_job_name((dt_job)peer.task_type), peer.task_index);
    }
    if ((why = policy(ctx, (dt_job)peer.task_type, (int)peer.task_index, true)))
        return refused(fd, &peer, why);
    if (keys &&
        (st = dt_session_derive(me->secret, me->secret_len, hc, hs, DT_HELLO_BYTES, keys)))
        return st;
    dt_frame_hdr ack = {DT_FRAME_ACK, 0, 0, 0};
    if ((st = dt_conn_send_frame(fd, from, &ack, NULL, deadline)))
        return st;
    *job = (dt_job)peer.task_type;
    *index = (int)peer.task_index;
    return DT_OK;
}

/* The server's answer where its hello or its ACK was expected: an ABORT frame is its refusal. */
static dt_status refusal(int fd, const uint8_t *raw, const char *who, bool *was)
{
    dt_frame_hdr fh;
    *was = dt_frame_decode(raw, DT_ABORT_MSG_CAP, &fh) == DT_OK && fh.type == DT_FRAME_ABORT;
    if (!*was)
        return DT_OK;
    char why[DT_ABORT_MSG_CAP];
    dt_conn_read_abort_reason(fd, fh.n_bytes, why, sizeof why, who);
    return dt_error(DT_ERR_AUTH, "%s refused this task: %s", who, why);
}

dt_status dt_handshake_connect(const dt_handshake_id *me, int fd, dt_job job, int index,
                               const char *who, double deadline, dt_session_keys *keys)
{
    uint8_t hc[DT_HELLO_BYTES], hs[DT_HELLO_BYTES], mac[DT_MAC_BYTES], want[DT_MAC_BYTES];
    dt_hello mine, peer;
    bool was;
    dt_status st = my_hello(me, &mine, hc);
    if (st || (st = dt_sock_send_all(fd, hc, sizeof hc, deadline, who)) ||
        (st = dt_sock_recv_all(fd, hs, DT_FRAME_HDR_BYTES, deadline, who)))
        return st;
    if ((st = refusal(fd, hs, who, &was)) || was)
        return st;
    if ((st = dt_sock_recv_all(fd, hs + DT_FRAME_HDR_BYTES, sizeof hs - DT_FRAME_HDR_BYTES,
                               deadline, who)) ||
        (st = dt_sock_recv_all(fd, mac, sizeof mac, deadline, who)))
        return st;
    if ((st = dt_hello_decode(hs, &peer)))
        return dt_error_prefix(st, "%s", who);
    dt_hello_mac(me->secret, me->secret_len, 'S', hc, hs, want);
    if (peer.cluster_id != me->cluster_id || peer.task_type != (uint8_t)job ||
        peer.task_index != (uint32_t)index)
        return dt_error(DT_ERR_AUTH, "%s answered as %s:%u of another cluster", who,
                        dt_job_name((dt_job)peer.task_type), peer.task_index);
    if (!dt_mac_equal(mac, want))
        return dt_error(DT_ERR_AUTH, "%s does not know the cluster secret (the secrets differ)",
                        who);
    dt_hello_mac(me->secret, me->secret_len, 'C', hc, hs, mac);
    uint8_t ack[DT_FRAME_HDR_BYTES];
    if ((st = dt_sock_send_all(fd, mac, sizeof mac, deadline, who)) ||
        (st = dt_sock_recv_all(fd, ack, sizeof ack, deadline, who)))
        return st;
    if ((st = refusal(fd, ack, who, &was)) || was)
        return st;
    dt_frame_hdr fh;
    if (dt_frame_decode(ack, DT_ABORT_MSG_CAP, &fh) != DT_OK || fh.type != DT_FRAME_ACK ||
        fh.n_bytes != 0)
        return dt_error(DT_ERR_AUTH, "%s did not accept the handshake", who);
    return keys ? dt_session_derive(me->secret, me->secret_len, hc, hs, DT_HELLO_BYTES, keys)
                : DT_OK;
}
