/* dtrain bench allreduce: all-reduce time, algorithm bandwidth and bus bandwidth per size, as
 * nccl-tests print them (algbw = bytes / time; busbw = algbw * 2(n-1)/n, what each rank's links
 * carry), with an optional check of the result. Every rank runs it (under dtrain launch, mpirun,
 * or by hand with TF_CONFIG); rank 0 prints. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "comm_open.h"
#include "../src/coll/comm_bench.h"
#include "flags.h"

/* "4K", "64M", "1G", "100" -> bytes. */
static int parse_bytes(const char *s, const char *end, size_t *out)
{
    char *e;
    unsigned long long v = strtoull(s, &e, 10);
    if (e == s)
        return 0;
    int shift = 0;
    if (e < end && (toupper((unsigned char)*e) == 'K' || toupper((unsigned char)*e) == 'M' ||
                    toupper((unsigned char)*e) == 'G')) {
        shift = toupper((unsigned char)*e) == 'K' ? 10 : toupper((unsigned char)*e) == 'M' ? 20 : 30;
        e++;
    }
    if (e != end || v > (1ull << 40) >> shift)
        return 0;
    *out = (size_t)(v << shift);
    return 1;
}

/* "A..B" or "A" -> the range of bytes. */
static dt_status parse_sizes(const char *s, size_t *lo, size_t *hi)
{
    const char *dots = strstr(s, "..");
    const char *end = s + strlen(s);
    if (dots ? !parse_bytes(s, dots, lo) || !parse_bytes(dots + 2, end, hi)
             : !parse_bytes(s, end, lo))
        return dt_error(DT_ERR_INVALID, "--sizes: '%s' is not SIZE or MIN..MAX (e.g. 4K..64M)", s);
    if (!dots)
        *hi = *lo;
    if (*lo > *hi)
        return dt_error(DT_ERR_INVALID, "--sizes: %s starts above where it ends", s);
    return DT_OK;
}

static void usage(FILE *out, const flag_def *flags, int n)
{
    fprintf(out, "usage: dtrain bench allreduce [flags]\n\nAll-reduce speed across the ranks "
                 "of the cluster (TF_CONFIG, or mpirun with --comm mpi).\n\n");
    flags_print_help(flags, n, out);
}

int cmd_bench(int argc, char **argv)
{
    if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        printf("usage: dtrain bench allreduce [flags]\n\nBenchmarks of the cluster's "
               "collectives, run on every task.\n\nbenchmarks:\n  allreduce  all-reduce "
               "speed over a range of sizes (dtrain bench allreduce --help)\n");
        return 0;
    }
    if (argc < 1 || strcmp(argv[0], "allreduce") != 0)
        return cli_fail(2, "bench: the benchmark is 'allreduce' (dtrain bench allreduce --help)");
    const char *sizes, *op_name, *wire_name, *segment;
    int factor, iters, warmup;
    bool check, help;
    dt_comm_options cf;
    dt_comm_options_default(&cf);
    flag_def flags[32] = {
        {"sizes", FLAG_STRING, "4K..64M", "message sizes in bytes, MIN..MAX (K, M, G suffixes)",
         &sizes, false},
        {"factor", FLAG_INT, "4", "each size is the previous one times this", &factor, false},
        {"iters", FLAG_INT, "20", "timed all-reduces per size (more for small sizes)", &iters,
         false},
        {"warmup", FLAG_INT, "3", "untimed all-reduces per size first", &warmup, false},
        {"op", FLAG_STRING, "sum", "sum, mean, min or max", &op_name, false},
        {"wire", FLAG_STRING, "f32", "f32, bf16 or fp16 on the wire", &wire_name, false},
        {"check", FLAG_BOOL, "false", "check each size's result exactly", &check, false},
        {"segment", FLAG_STRING, "256K", "tcp: bytes per ring segment", &segment, false},
    };
    flag_ext exts[32];
    flag_table t = {flags, 8, (int)(sizeof flags / sizeof flags[0]), exts};
    cli_comm_flags_add(&t, &cf);
    flags_add(&t, (flag_def){"help", FLAG_BOOL, "false", "this text", &help, NULL});
    int n_flags = t.n;
    if (flags_parse(flags, n_flags, argc - 1, argv + 1))
        return cli_fail(2, dt_last_error());
    if (help) {
        usage(stdout, flags, n_flags);
        return 0;
    }
    dt_allreduce_bench b = {0};
    b.factor = factor, b.iters = iters, b.warmup = warmup, b.check = check;
    if (parse_sizes(sizes, &b.lo, &b.hi) || dt_reduce_op_parse(op_name, &b.op) ||
        dt_wire_dtype_parse(wire_name, &b.wire))
        return cli_fail(2, dt_last_error());
    if (!parse_bytes(segment, segment + strlen(segment), &cf.segment_bytes) ||
        cf.segment_bytes < 4096)
        return cli_fail(2, "--segment: give bytes of at least 4K (e.g. 512K)");
    if (factor < 2 || iters < 1 || warmup < 0)
        return cli_fail(2, "--factor must be >= 2, --iters >= 1, --warmup >= 0");
    dt_cluster cl;
    dt_comm *c;
    if (dt_comm_open(&cf, &cl, &c))
        return cli_fail(1, flags_name_fields(flags, n_flags, dt_last_error()));
    if (c->size < 2) {
        /* One rank reduces nothing: its figures would be a memory copy's, not an all-reduce's. */
        dt_comm_destroy(c);
        dt_cluster_free(&cl);
        return cli_fail(2, "bench allreduce: this cluster has one rank, so there is nothing to "
                           "reduce: run it on every task of a cluster (dtrain launch -n 2 -- "
                           "dtrain bench allreduce, TF_CONFIG on each host, or mpirun -np N)");
    }
    long wrong = 0;
    dt_status st = dt_comm_bench_allreduce(c, &b, stdout, &wrong);
    if (st)
        cli_fail(1, dt_last_error());
    dt_comm_destroy(c);
    dt_cluster_free(&cl);
    if (st)
        return 1;
    if (wrong) {
        fprintf(stderr, "dtrain: error: %ld values of the all-reduce were wrong\n", wrong);
        return 1;
    }
    return 0;
}
