/* The line multiplexer of a launch: a task's output pipe read into whole lines, each printed
 * with the task's prefix ("[worker:1] ") in one write, so lines of different tasks never mix.
 * Private to src/launch/. */
#ifndef DTRAIN_LAUNCH_MUX_H
#define DTRAIN_LAUNCH_MUX_H

#include <stdbool.h>
#include <stddef.h>

/* Bytes of one output line kept before it is printed: a longer line is printed in pieces of at
 * most this many bytes, each with its own prefix, cut between UTF-8 characters. */
#define DT_MUX_LINE_CAP 4096

/* One output pipe of a task. */
typedef struct {
    int fd;            /* read end, non-blocking; -1 when closed */
    int out_fd;        /* where its lines go */
    const char *name;  /* the prefix's name, borrowed */
    size_t n_bytes;
    char buf[DT_MUX_LINE_CAP];
} dt_mux_stream;

/* A stream reading fd (taken) into out_fd, prefixed with name. */
void dt_mux_open(dt_mux_stream *s, int fd, int out_fd, const char *name);

/* Reads what the pipe holds now (once, or until it is empty with all), printing the complete
 * lines; at end of file prints the rest as a last line and closes the stream. */
void dt_mux_read(dt_mux_stream *s, bool all);

/* Prints what is left as a last line and closes the pipe; a closed stream is left as it is. */
void dt_mux_close(dt_mux_stream *s);

/* The length of the longest prefix of buf[0..n) that does not end inside a UTF-8 character. */
size_t dt_mux_utf8_cut(const char *buf, size_t n);

#endif
