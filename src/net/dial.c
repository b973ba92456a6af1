/* Connecting to another task (see dial.h). */
#include "dial.h"

#include <stdio.h>
#include <unistd.h>

#include "../core/clock.h"
#include "dtrain/log.h"
#include "sock.h"

dt_status dt_dial_task(const dt_handshake_id *me, const dt_addr *a, dt_job job, int index,
                       const char *who, double handshake_timeout, double deadline, int *fd,
                       dt_session_keys *keys)
{
    double backoff = 0.05, started = dt_clock_now(), logged = 0;
    int refusals = 0;
    char refused[512] = "", unresolved[512] = "";
    *fd = -1;
    for (;;) {
        double now = dt_clock_now();
        if (now >= deadline && refusals > 0)
            return dt_error(DT_ERR_AUTH, "%s (refused %d time%s over %.0f s)", refused, refusals,
                            refusals == 1 ? "" : "s", now - started);
        if (now >= deadline && unresolved[0])
            return dt_error(DT_ERR_UNAVAILABLE, "could not connect to %s within %.0f s: %s", who,
                            deadline - started, unresolved);
        if (now >= deadline)
            return dt_error(DT_ERR_TIMEOUT, "could not connect to %s within %.0f s", who,
                            deadline - started);
        double d = now + handshake_timeout < deadline ? now + handshake_timeout : deadline;
        int s;
        dt_status st = dt_sock_connect(a->host, a->port, d, &s);
        if (st == DT_OK) {
            st = dt_handshake_connect(me, s, job, index, who, d, keys);
            if (st == DT_OK) {
                *fd = s;
                return DT_OK;
            }
            dt_sock_close(s);
        }
        unresolved[0] = '\0';
        if (st == DT_ERR_UNAVAILABLE) { /* the name does not resolve yet: asked again */
            snprintf(unresolved, sizeof unresolved, "%s", dt_last_error());
            if (logged == 0 || now - logged >= 10.0) {
                dt_log_to(NULL, DT_LOG_WARN, "dtrain: waiting for %s: does not resolve yet",
                          who);
                logged = now;
            }
        } else if (st == DT_ERR_AUTH) {
            if (refusals++ == 0)
                dt_log_to(NULL, DT_LOG_WARN, "dtrain: warning: %s: trying again until the "
                          "deadline (whoever answers there may not be the task)", dt_last_error());
            snprintf(refused, sizeof refused, "%s", dt_last_error());
        } else if (st != DT_ERR_PEER && st != DT_ERR_TIMEOUT) {
            return st;
        }
        /* Not listening yet, or the connection broke: try again a little later. */
        double wait = backoff;
        if (dt_clock_now() + wait > deadline)
            wait = deadline - dt_clock_now();
        if (wait > 0)
            usleep((useconds_t)(wait * 1e6));
        backoff = backoff * 2 < 1.0 ? backoff * 2 : 1.0;
    }
}
