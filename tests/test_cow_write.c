/* A ps task's writes from a copy-on-write child (src/ps/cow_write.c): the result and the error
 * message come back, the caller's lock is free while the child writes, and a write that hangs
 * is stopped at its deadline, its process reaped. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../src/net/sock.h"
#include "../src/ps/cow_write.h"
#include "test.h"

static dt_status write_ok(void *arg)
{
    FILE *f = fopen(arg, "w");
    if (!f)
        return dt_error(DT_ERR_IO, "%s: %s", (const char *)arg, strerror(errno));
    fputs("written by the child\n", f);
    return fclose(f) == 0 ? DT_OK : dt_error(DT_ERR_IO, "close");
}

static dt_status write_fails(void *arg)
{
    (void)arg;
    return dt_error(DT_ERR_IO, "/nowhere/shard: No space left on device");
}

static dt_status write_slowly(void *arg)
{
    sleep(*(unsigned *)arg);
    return DT_OK;
}

TEST(cow_write_result_and_message_come_back)
{
    dt_cow_write w;
    const char *path = test_path("shard");
    CHECK_OK(dt_cow_start(&w, write_ok, (void *)path, NULL, 10.0, path));
    CHECK_OK(dt_cow_wait(&w));
    CHECK(!dt_cow_running(&w) && access(path, F_OK) == 0);
    CHECK_OK(dt_cow_start(&w, write_fails, NULL, NULL, 10.0, "shard"));
    CHECK_ERR(dt_cow_wait(&w), DT_ERR_IO, "No space left on device");
}

TEST(cow_write_holds_the_lock_only_for_the_fork)
{
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    dt_cow_write w;
    unsigned secs = 1;
    CHECK_OK(dt_cow_start(&w, write_slowly, &secs, &mu, 10.0, "slow"));
    CHECK(pthread_mutex_trylock(&mu) == 0); /* free while the child writes */
    pthread_mutex_unlock(&mu);
    CHECK(dt_cow_poll(&w) == DT_END);
    CHECK_OK(dt_cow_wait(&w));
}

TEST(cow_write_that_hangs_is_stopped_at_its_deadline)
{
    dt_cow_write w;
    unsigned secs = 60;
    CHECK_OK(dt_cow_start(&w, write_slowly, &secs, NULL, 0.5, "snapshot /stalled/nfs"));
    pid_t pid = w.pid;
    CHECK_ERR(dt_cow_wait(&w), DT_ERR_TIMEOUT, "snapshot /stalled/nfs: the write did not end");
    CHECK(!dt_cow_running(&w));
    CHECK(kill(pid, 0) != 0 && errno == ESRCH); /* killed and reaped: no zombie */
    /* A kill of a child that runs ends it at once too. */
    CHECK_OK(dt_cow_start(&w, write_slowly, &secs, NULL, 60.0, "snapshot"));
    pid = w.pid;
    dt_cow_kill(&w);
    CHECK(!dt_cow_running(&w) && kill(pid, 0) != 0);
}

/* The child holds none of the parent's sockets: a port the parent closes while the child writes
 * can be bound again at once (a ps started again binds its predecessor's port). */
TEST(cow_write_child_keeps_no_socket_of_the_parent)
{
    int fd;
    uint16_t port;
    CHECK_OK(dt_sock_listen("127.0.0.1", 0, &fd, &port));
    dt_cow_write w;
    unsigned secs = 60;
    CHECK_OK(dt_cow_start(&w, write_slowly, &secs, NULL, 60.0, "snapshot"));
    usleep(100000); /* the child has closed what it inherited */
    dt_sock_close(fd);
    int again;
    uint16_t same;
    CHECK_OK(dt_sock_listen("127.0.0.1", port, &again, &same));
    dt_sock_close(again);
    dt_cow_kill(&w);
}
