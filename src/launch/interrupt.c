/* Signals that stop a launch: a self-pipe (see dt_launch_signals_install in launch.h).
 *
 * A handler may run between any two instructions of the supervisor, so it only records the
 * signal in a sig_atomic_t and writes one byte to a non-blocking pipe; the supervisor's poll()
 * wakes on the pipe and acts on the signal in ordinary code. SIGCHLD writes a byte too, so a
 * task's end wakes the loop at once. Nothing is installed until a program asks: the handlers
 * are process-wide. */
#include "interrupt.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/launch.h"

static int wake[2] = {-1, -1};
static volatile sig_atomic_t pending_int, pending_term, pending_hup;

static const int caught[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
#define N_CAUGHT ((int)(sizeof caught / sizeof caught[0]))
static struct sigaction old_actions[N_CAUGHT];
static bool installed[N_CAUGHT];

static void on_signal(int sig)
{
    int saved = errno;
    if (sig == SIGINT)
        pending_int = 1;
    else if (sig == SIGTERM)
        pending_term = 1;
    else if (sig == SIGHUP)
        pending_hup = 1;
    char b = (char)sig;
    ssize_t r = write(wake[1], &b, 1); /* a full pipe already holds a wake-up */
    (void)r;
    errno = saved;
}

dt_status dt_launch_signals_install(void)
{
    if (wake[0] >= 0)
        return dt_error(DT_ERR_INVALID, "launch: signal handlers are installed already");
    if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        wake[0] = wake[1] = -1;
        return dt_error(DT_ERR_IO, "launch: %s", strerror(errno));
    }
    pending_int = pending_term = pending_hup = 0;
    for (int i = 0; i < N_CAUGHT; i++) {
        installed[i] = false;
        if (sigaction(caught[i], NULL, &old_actions[i]) != 0)
            continue;
        /* An ignored stopping signal is the caller's choice (nohup, a background job). */
        if (caught[i] != SIGCHLD && old_actions[i].sa_handler == SIG_IGN)
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = caught[i] == SIGCHLD ? SA_NOCLDSTOP : 0;
        installed[i] = sigaction(caught[i], &sa, NULL) == 0;
    }
    return DT_OK;
}

void dt_launch_signals_restore(void)
{
    if (wake[0] < 0)
        return;
    for (int i = 0; i < N_CAUGHT; i++)
        if (installed[i])
            sigaction(caught[i], &old_actions[i], NULL);
    /* The handlers are gone: nothing writes to the pipe any more. */
    close(wake[0]);
    close(wake[1]);
    wake[0] = wake[1] = -1;
}

int dt_launch_wake_fd(void) { return wake[0]; }

int dt_launch_take_signal(void)
{
    if (wake[0] < 0)
        return 0;
    char buf[64];
    while (read(wake[0], buf, sizeof buf) > 0) {
    }
    int sig = 0;
    if (pending_int)
        pending_int = 0, sig = SIGINT;
    if (pending_term)
        pending_term = 0, sig = SIGTERM;
    if (pending_hup)
        pending_hup = 0, sig = SIGHUP;
    return sig;
}

void dt_launch_signals_reset_in_child(void)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int i = 0; i < N_CAUGHT; i++) {
        struct sigaction cur;
        if (sigaction(caught[i], NULL, &cur) == 0 && cur.sa_handler == on_signal)
            sigaction(caught[i], &dfl, NULL);
    }
}
