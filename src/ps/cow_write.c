/* A write from a copy-on-write image of the process (see cow_write.h). */
#include "cow_write.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../core/clock.h"

/* In the child: none of the parent's descriptors but the standard ones and the message pipe
 * (the ps's listening socket and connections must close when the ps does, for a ps started
 * again to bind its port), an end when the parent ends (a write must not finish after a
 * restarted ps has moved on), the write, its message, and an exit that runs no handler of the
 * parent's (atexit, stdio flushes of the parent's buffers). */
static void child_main(int fd, pid_t parent, dt_cow_fn fn, void *arg)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(1);
    if (fd > 3)
        close_range(3, (unsigned)fd - 1, 0);
    close_range((unsigned)fd + 1, ~0U, 0);
    dt_status st = fn(arg);
    if (st) {
        const char *msg = dt_last_error();
        size_t n = strlen(msg);
        while (n > 0) {
            ssize_t k = write(fd, msg, n);
            if (k <= 0 && errno != EINTR)
                break;
            if (k > 0)
                msg += k, n -= (size_t)k;
        }
    }
    _exit(st ? 1 : 0);
}

dt_status dt_cow_start(dt_cow_write *w, dt_cow_fn fn, void *arg, pthread_mutex_t *hold,
                       double timeout, const char *what)
{
    *w = (dt_cow_write){.fd = -1};
    snprintf(w->what, sizeof w->what, "%s", what);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return dt_error(DT_ERR_IO, "%s: pipe: %s", what, strerror(errno));
    pid_t parent = getpid();
    if (hold)
        pthread_mutex_lock(hold);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        child_main(p[1], parent, fn, arg);
    }
    if (hold)
        pthread_mutex_unlock(hold);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        return dt_error(DT_ERR_IO, "%s: fork: %s", what, strerror(errno));
    }
    w->pid = pid, w->fd = p[0];
    w->started = dt_clock_now(), w->deadline = w->started + timeout;
    return DT_OK;
}

bool dt_cow_running(const dt_cow_write *w) { return w->pid > 0; }

/* The child's message, once it has ended (its write end closed). */
static void read_message(dt_cow_write *w, char *msg, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t k = read(w->fd, msg + n, cap - 1 - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    msg[n] = '\0';
}

static void finish(dt_cow_write *w)
{
    close(w->fd);
    w->fd = -1, w->pid = 0;
}

dt_status dt_cow_poll(dt_cow_write *w)
{
    if (w->pid <= 0)
        return DT_OK;
    int status;
    pid_t got = waitpid(w->pid, &status, WNOHANG);
    if (got == 0 && dt_clock_now() < w->deadline)
        return DT_END;
    if (got == 0) {
        double secs = dt_clock_now() - w->started;
        dt_cow_kill(w);
        return dt_error(DT_ERR_TIMEOUT, "%s: the write did not end within %.0f s (a stalled "
                        "disk or file system?): stopped", w->what, secs);
    }
    char msg[1024];
    read_message(w, msg, sizeof msg);
    finish(w);
    if (got < 0)
        return dt_error(DT_ERR_IO, "%s: waitpid: %s", w->what, strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return DT_OK;
    if (WIFSIGNALED(status))
        return dt_error(DT_ERR_IO, "%s: the writing process was killed by signal %d", w->what,
                        WTERMSIG(status));
    return dt_error(DT_ERR_IO, "%s", msg[0] ? msg : "the write failed");
}

dt_status dt_cow_wait(dt_cow_write *w)
{
    dt_status st;
    while ((st = dt_cow_poll(w)) == DT_END) {
        struct pollfd p = {.fd = w->fd, .events = POLLIN};
        poll(&p, 1, 50); /* the pipe closes when the child ends */
    }
    return st;
}

void dt_cow_kill(dt_cow_write *w)
{
    if (w->pid <= 0)
        return;
    kill(w->pid, SIGKILL);
    while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    finish(w);
}
