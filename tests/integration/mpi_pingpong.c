/* Two ranks bounce messages of 1 B, 4 B, ... 4 MiB, ROUNDS times each. Rank 1 checks every
 * byte it receives against the pattern rank 0 wrote and sends the message back; rank 0 checks
 * what comes back. Prints, at rank 0:
 *   mpi pingpong: <sizes> sizes, <bad> bad bytes, 4 MiB at <MB/s> MB/s
 * and exits 1 if any byte differed. Built with mpicc.openmpi and mpicc.mpich by test_ucx_mpi.py
 * and perf/ucx_mpi_table. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { LARGEST = 4 << 20, ROUNDS = 20 };

static unsigned char pattern(long i, long size) {
    return (unsigned char)(i * 131 + size);
}

static long count_bad(const unsigned char* buf, long size) {
    long bad = 0;
    for (long i = 0; i < size; i++)
        bad += buf[i] != pattern(i, size);
    return bad;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (ranks != 2) {
        if (rank == 0)
            fprintf(stderr, "mpi pingpong: run it with 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    unsigned char* buf = malloc(LARGEST);
    if (buf == NULL)
        MPI_Abort(MPI_COMM_WORLD, 3);
    const int peer = 1 - rank;
    long bad = 0;
    int sizes = 0;
    double largest_mbps = 0;
    for (long size = 1; size <= LARGEST; size *= 4, sizes++) {
        double start = MPI_Wtime();
        for (int round = 0; round < ROUNDS; round++) {
            if (rank == 0) {
                for (long i = 0; i < size; i++)
                    buf[i] = pattern(i, size);
                MPI_Send(buf, (int)size, MPI_BYTE, peer, round, MPI_COMM_WORLD);
                MPI_Recv(buf, (int)size, MPI_BYTE, peer, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, (int)size, MPI_BYTE, peer, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                bad += count_bad(buf, size);
                MPI_Send(buf, (int)size, MPI_BYTE, peer, round, MPI_COMM_WORLD);
            }
            if (rank == 0)
                bad += count_bad(buf, size);
        }
        largest_mbps = 2.0 * ROUNDS * size / (MPI_Wtime() - start) / 1e6;
    }
    long total_bad = 0;
    MPI_Reduce(&bad, &total_bad, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi pingpong: %d sizes, %ld bad bytes, 4 MiB at %.0f MB/s\n", sizes, total_bad,
               largest_mbps);
    free(buf);
    MPI_Finalize();
    return rank == 0 && total_bad != 0 ? 1 : 0;
}
