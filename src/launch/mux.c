/* The line multiplexer of a launch (see mux.h): complete lines of a task's pipe printed with
 * its prefix, each with one write(2). */
#include "mux.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Writes all n bytes, waiting (bounded) on a descriptor that is full. */
static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            /* A non-blocking descriptor inherited from the terminal: wait until it takes more. A
             * reader that takes nothing for a minute has stopped reading; its lines are dropped
             * rather than stopping the supervision of the tasks. */
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            if (poll(&pf, 1, 60 * 1000) == 0)
                return;
            continue;
        }
        if (w <= 0)
            return; /* a closed output: the tasks keep running, their output is dropped */
        p += w;
        n -= (size_t)w;
    }
}

/* Prints "[name] " + data + "\n" with one write, so lines of different tasks never mix. */
static void emit_line(const dt_mux_stream *s, const char *data, size_t n_bytes)
{
    char line[DT_MUX_LINE_CAP + 64];
    int p = snprintf(line, 64, "[%s] ", s->name);
    if (p < 0 || p >= 64)
        p = 0;
    memcpy(line + p, data, n_bytes);
    line[(size_t)p + n_bytes] = '\n';
    write_all(s->out_fd, line, (size_t)p + n_bytes + 1);
}

size_t dt_mux_utf8_cut(const char *buf, size_t n)
{
    for (size_t i = n; i > 0 && n - i < 4; i--) {
        unsigned char b = (unsigned char)buf[i - 1];
        if ((b & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back for the lead */
        size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
        return (i - 1 + need > n && i - 1 > 0) ? i - 1 : n;
    }
    return n;
}

/* Prints the complete lines in s's buffer; a full buffer without a newline is printed as a
 * piece; at eof the rest is printed as a last line. */
static void consume(dt_mux_stream *s, bool eof)
{
    size_t start = 0;
    for (;;) {
        char *nl = memchr(s->buf + start, '\n', s->n_bytes - start);
        if (!nl)
            break;
        size_t end = (size_t)(nl - s->buf);
        emit_line(s, s->buf + start, end - start);
        start = end + 1;
    }
    if (start == 0 && s->n_bytes == DT_MUX_LINE_CAP) {
        start = dt_mux_utf8_cut(s->buf, s->n_bytes);
        emit_line(s, s->buf, start);
    }
    memmove(s->buf, s->buf + start, s->n_bytes - start);
    s->n_bytes -= start;
    if (eof && s->n_bytes > 0) {
        emit_line(s, s->buf, s->n_bytes);
        s->n_bytes = 0;
    }
}

void dt_mux_open(dt_mux_stream *s, int fd, int out_fd, const char *name)
{
    s->fd = fd;
    s->out_fd = out_fd;
    s->name = name;
    s->n_bytes = 0;
}

void dt_mux_close(dt_mux_stream *s)
{
    if (s->fd < 0)
        return;
    consume(s, true);
    close(s->fd);
    s->fd = -1;
}

void dt_mux_read(dt_mux_stream *s, bool all)
{
    while (s->fd >= 0) {
        ssize_t r = read(s->fd, s->buf + s->n_bytes, DT_MUX_LINE_CAP - s->n_bytes);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            return;
        if (r <= 0) {
            dt_mux_close(s);
            return;
        }
        s->n_bytes += (size_t)r;
        consume(s, false);
        if (!all)
            return;
    }
}
