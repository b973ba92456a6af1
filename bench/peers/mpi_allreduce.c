/* The Open MPI peer of `dtrain bench allreduce`: MPI_Allreduce of float32 sums, 4 KiB to 64 MiB by
 * factors of 4. Rank 0 prints one line per size, `bytes=B us=T algbw_GBps=A busbw_GBps=U`: T the
 * mean time of one all-reduce on the slowest rank, busbw = algbw x 2(n-1)/n as nccl-tests count it.
 * build: mpicc -O2 -o mpi_allreduce mpi_allreduce.c */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    size_t largest = (size_t)64 << 20;
    float *buf = malloc(largest);
    if (!buf) {
        fprintf(stderr, "mpi_allreduce: no memory for %zu bytes\n", largest);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t bytes = 4096; bytes <= largest; bytes *= 4) {
        int n = (int)(bytes / sizeof(float));
        for (int i = 0; i < n; i++)
            buf[i] = 1.0f;
        int iters = (int)(((size_t)256 << 20) / bytes);
        iters = iters < 1 ? 1 : iters > 1000 ? 1000 : iters;
        for (int i = 0; i < 3; i++)
            MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double mine = (MPI_Wtime() - t0) / iters, slowest;
        MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double algbw = (double)bytes / slowest / 1e9;
        if (rank == 0)
            printf("bytes=%zu us=%.1f algbw_GBps=%.3f busbw_GBps=%.3f\n", bytes, slowest * 1e6,
                   algbw, algbw * 2.0 * (world - 1) / world);
        fflush(stdout);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
