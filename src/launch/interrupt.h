/* The self-pipe of dt_launch_signals_install, as the supervisor sees it. Private to
 * src/launch/. */
#ifndef DTRAIN_LAUNCH_INTERRUPT_H
#define DTRAIN_LAUNCH_INTERRUPT_H

/* The read end of the self-pipe (non-blocking), -1 when no handlers are installed. */
int dt_launch_wake_fd(void);

/* Empties the self-pipe and returns the stopping signal that arrived since the last call
 * (SIGINT, SIGTERM or SIGHUP; the last of them when several did), 0 if none. */
int dt_launch_take_signal(void);

/* In a child between fork and exec: puts back the default action of every signal whose handler
 * is launch's, so the task does not write to launch's self-pipe. Async-signal-safe. */
void dt_launch_signals_reset_in_child(void);

#endif
