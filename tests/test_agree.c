/* Typed agreement messages: exact integer sums above float precision, rank-order real sums, the
 * chief's verdict, and a message of the wrong type or shape named by its rank. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../src/coll/agree.h"
#include "test.h"

TEST(agree_message_round_trips_little_endian)
{
    dt_agree_msg m = {.type = DT_AGREE_STEP, .n_ints = 2, .n_reals = 1,
                      .ints = {-3, (int64_t)1 << 40}, .reals = {0.1}};
    uint8_t buf[64];
    CHECK(dt_agree_encoded_bytes(&m) == 8 + 24);
    dt_agree_encode(&m, buf);
    /* The header and the first integer, byte by byte. */
    CHECK(buf[0] == 0xEE && buf[1] == 0xA6 && buf[2] == DT_AGREE_STEP && buf[3] == 0);
    CHECK(buf[4] == 2 && buf[6] == 1 && buf[8] == 0xFD && buf[15] == 0xFF);
    dt_agree_msg out;
    CHECK_OK(dt_agree_decode(buf, &m, 0, &out));
    CHECK(out.ints[0] == -3 && out.ints[1] == (int64_t)1 << 40 && out.reals[0] == 0.1);
    dt_agree_msg other = m;
    other.type = DT_AGREE_BEFORE_STEP;
    CHECK_ERR(dt_agree_decode(buf, &other, 3, &out), DT_ERR_PEER,
              "rank 3 sent agreement message type 1 with 2 integers and 1 reals");
    other = m;
    other.n_ints = 3;
    CHECK_ERR(dt_agree_decode(buf, &other, 1, &out), DT_ERR_PEER, "rank 1 sent");
    buf[0] ^= 1;
    CHECK_ERR(dt_agree_decode(buf, &m, 2, &out), DT_ERR_PEER, "rank 2 sent");
}

typedef struct {
    dt_comm *c;
    int rank;
    dt_agree_type type; /* what this rank sends */
    dt_agree_msg sum, verdict;
    dt_status st_sum, st_verdict;
    char msg[512]; /* the rank's error message (thread-local where it was set) */
} agree_job;

static void *agree_main(void *arg)
{
    agree_job *j = arg;
    /* 2^24 + rank + 1 each: a float all-reduce would round these sums. */
    j->sum = (dt_agree_msg){.type = j->type, .n_ints = 2, .n_reals = 1,
                            .ints = {((int64_t)1 << 24) + j->rank + 1, j->rank == 1},
                            .reals = {0.1 * (j->rank + 1)}};
    j->st_sum = dt_comm_agree(j->c, &j->sum);
    j->verdict = (dt_agree_msg){.type = DT_AGREE_DECISION, .n_ints = 1, .ints = {7 + j->rank}};
    j->st_verdict = j->st_sum ? j->st_sum : dt_comm_agree_from(j->c, &j->verdict, 0);
    if (j->st_sum || j->st_verdict)
        snprintf(j->msg, sizeof j->msg, "%s", dt_last_error());
    return NULL;
}

static void run_agreement(agree_job *jobs, int n)
{
    dt_local_group *g;
    CHECK_OK(dt_local_group_create(n, 5.0, &g));
    pthread_t t[4];
    for (int r = 0; r < n; r++) {
        jobs[r].rank = r;
        CHECK_OK(dt_comm_local(g, r, &jobs[r].c));
    }
    for (int r = 0; r < n; r++)
        CHECK(pthread_create(&t[r], NULL, agree_main, &jobs[r]) == 0);
    for (int r = 0; r < n; r++) {
        pthread_join(t[r], NULL);
        dt_comm_destroy(jobs[r].c);
    }
    dt_local_group_destroy(g);
}

TEST(agree_sums_integers_exactly_and_reals_in_rank_order)
{
    agree_job jobs[3];
    memset(jobs, 0, sizeof jobs);
    for (int r = 0; r < 3; r++)
        jobs[r].type = DT_AGREE_STEP;
    run_agreement(jobs, 3);
    double reals = 0.0;
    for (int r = 0; r < 3; r++)
        reals += 0.1 * (r + 1);
    for (int r = 0; r < 3; r++) {
        CHECK_OK(jobs[r].st_sum);
        CHECK_MSG(jobs[r].sum.ints[0] == 3 * ((int64_t)1 << 24) + 6 && jobs[r].sum.ints[1] == 1,
                  "rank %d: %lld %lld", r, (long long)jobs[r].sum.ints[0],
                  (long long)jobs[r].sum.ints[1]);
        CHECK(memcmp(&jobs[r].sum.reals[0], &reals, sizeof reals) == 0);
        CHECK_OK(jobs[r].st_verdict);
        CHECK_MSG(jobs[r].verdict.ints[0] == 7, "rank %d got verdict %lld", r,
                  (long long)jobs[r].verdict.ints[0]);
    }
}

TEST(agree_names_the_rank_that_sent_another_message)
{
    agree_job jobs[2];
    memset(jobs, 0, sizeof jobs);
    jobs[0].type = DT_AGREE_STEP;
    jobs[1].type = DT_AGREE_BEFORE_STEP;
    run_agreement(jobs, 2);
    CHECK(jobs[0].st_sum == DT_ERR_PEER && jobs[1].st_sum == DT_ERR_PEER);
    CHECK_MSG(strstr(jobs[0].msg, "rank 1 sent agreement message type 2"), "%s", jobs[0].msg);
    CHECK_MSG(strstr(jobs[1].msg, "rank 0 sent agreement message type 1"), "%s", jobs[1].msg);
}
