/* dtrain: the command-line tool. Dispatches to a subcommand; the only place that exits. */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "sagemaker.h"
#include "dtrain/process.h"

#define DTRAIN_VERSION "0.1.0"

static void print_usage(FILE *out)
{
    fputs("dtrain " DTRAIN_VERSION ": distributed training of neural networks on CPUs\n"
          "\n"
          "usage: dtrain <command> [flags]\n"
          "\n"
          "commands:\n"
          "  train      train a model (dtrain train --help for its flags)\n"
          "  convert    convert --from idx|libsvm --to tfrecord IN OUT\n"
          "  data head  data head FILE --format idx|tfrecord|libsvm [-n N]: records as JSON lines\n"
          "  evaluate   evaluate --model-dir DIR [--checkpoint FILE] [--watch]: test accuracy of\n"
          "             checkpoints; --watch is a sidecar evaluator\n"
          "  inspect    inspect CHECKPOINT|DIR: tensors, shapes, checksums and metadata\n"
          "  predict    predict --model-dir DIR --data SPEC [--format tsv|jsonl|npy]: score rows\n"
          "  export     export --model-dir DIR | --checkpoint FILE --format onnx --out FILE: a\n"
          "             trained model for serving, with signature.json beside it\n"
          "  bench      bench allreduce [--sizes 4K..64M] [--comm tcp|mpi] [--check]\n"
          "  launch     launch -n N [--ps M] [--chief] [--evaluator] -- COMMAND: a local cluster\n"
          "  server     serve the ps task TF_CONFIG names until the coordinator stops it\n"
          "  cluster    cluster check: the cluster TF_CONFIG describes, as this task sees it\n"
          "\n"
          "  --help     this text\n"
          "  --version  the version\n"
          "\n"
          "environment:\n"
          "  DTRAIN_GEMM=auto|avx512|blas   the matrix-multiply kernel: dtrain's own AVX-512 one\n"
          "             (the default where the CPU has AVX-512F) or OpenBLAS's\n",
          out);
}

int cli_fail(int status, const char *message)
{
    fprintf(stderr, "dtrain: error: %s\n", message);
    cli_sagemaker_failure(message);
    return status;
}

int cli_fail_status(dt_status st, const char *message)
{
    /* Out of memory is not among them: dtrain's allocations follow from the job's sizes (its
     * tables, batches, memory limits), which a restart asks for again; a pod the kernel kills
     * for memory ends by SIGKILL, which operators retry by themselves. */
    bool transient = st == DT_ERR_PEER || st == DT_ERR_TIMEOUT || st == DT_ERR_UNAVAILABLE;
    if (!transient)
        return cli_fail(CLI_EXIT_FAILED, message);
    fprintf(stderr, "dtrain: error: %s (exit %d: transient, a restart may succeed)\n", message,
            CLI_EXIT_RETRY);
    cli_sagemaker_failure(message);
    return CLI_EXIT_RETRY;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        puts("dtrain " DTRAIN_VERSION);
        return 0;
    }
    /* A closed pipe on stdout is a write error to report, not a signal that kills silently. */
    signal(SIGPIPE, SIG_IGN);
    /* Batches (200 KB for the tutorial model) are made on the prefetch thread and freed on the
     * training thread: above glibc's mmap threshold each would be an mmap, page faults and an
     * munmap with TLB shootdowns, about 3% of a step. Keep such blocks in the heap, and keep
     * the heap: trimming it on each free of the top block is the same munmap in another form. */
    mallopt(M_MMAP_THRESHOLD, 16 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    /* The process-wide settings the library leaves to its program: OpenBLAS on one thread
     * (dtrain's pool splits each product), and the SIGBUS guard that lets file readers map
     * files instead of copying them. */
    dt_gemm_setup();
    const char *gemm = getenv("DTRAIN_GEMM");
    if (gemm && *gemm && dt_gemm_use(gemm) != DT_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "DTRAIN_GEMM: %s", dt_last_error());
        return cli_fail(2, msg);
    }
    if (dt_mapview_guard_install() != DT_OK)
        fprintf(stderr, "dtrain: warning: %s: files are read, not mapped\n", dt_last_error());
    if (strcmp(cmd, "train") == 0)
        return cmd_train(argc - 2, argv + 2);
    if (strcmp(cmd, "convert") == 0)
        return cmd_convert(argc - 2, argv + 2);
    if (strcmp(cmd, "data") == 0)
        return cmd_data(argc - 2, argv + 2);
    if (strcmp(cmd, "launch") == 0)
        return cmd_launch(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0)
        return cmd_bench(argc - 2, argv + 2);
    if (strcmp(cmd, "evaluate") == 0)
        return cmd_evaluate(argc - 2, argv + 2);
    if (strcmp(cmd, "inspect") == 0)
        return cmd_inspect(argc - 2, argv + 2);
    if (strcmp(cmd, "predict") == 0)
        return cmd_predict(argc - 2, argv + 2);
    if (strcmp(cmd, "server") == 0)
        return cmd_server(argc - 2, argv + 2);
    if (strcmp(cmd, "export") == 0)
        return cmd_export(argc - 2, argv + 2);
    if (strcmp(cmd, "cluster") == 0)
        return cmd_cluster(argc - 2, argv + 2);
    char msg[256];
    snprintf(msg, sizeof msg, "unknown command '%s' (see dtrain --help)", cmd);
    return cli_fail(2, msg);
}
