/* Two ranks bounce messages of 1 B, 4 B, ... 4 MiB, ROUNDS times each (one sweep). Rank 1
 * checks every byte it receives against the pattern rank 0 wrote and sends the message back;
 * rank 0 checks what comes back. Prints, at rank 0:
 *   mpi pingpong: <sizes> sizes, <bad> bad bytes, 4 MiB at <MB/s> MB/s, <sweeps> sweeps
 * and exits 1 if any byte differed.
 *
 *   mpi_pingpong                one sweep
 *   mpi_pingpong --until PATH   sweeps again until the file PATH exists (rank 0 looks after
 *                               each sweep and tells rank 1): one job that lasts as long as
 *                               something around it, such as a daemon restarting under it;
 *                               rank 0 prints "mpi pingpong: sweep N done, B bad bytes so far"
 *                               after each (rank 1's count arrives at the end)
 *
 * Each sweep's pattern differs (the sweep number is part of it), so a message left over from an
 * earlier sweep cannot pass for a new one. Built with mpicc.openmpi and mpicc.mpich by
 * test_ucx_mpi.py, test_restart.py and perf/ucx_mpi_table. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { LARGEST = 4 << 20, ROUNDS = 20 };

static unsigned char pattern(long i, long size, long sweep) {
    return (unsigned char)(i * 131 + size + sweep * 7);
}

static long count_bad(const unsigned char* buf, long size, long sweep) {
    long bad = 0;
    for (long i = 0; i < size; i++)
        bad += buf[i] != pattern(i, size, sweep);
    return bad;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    const char* until = NULL;
    if (argc == 3 && strcmp(argv[1], "--until") == 0) {
        until = argv[2];
    } else if (argc != 1) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_pingpong [--until PATH]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
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
    long sweeps = 0;
    double largest_mbps = 0;
    for (int more = 1; more; sweeps++) {
        sizes = 0;
        for (long size = 1; size <= LARGEST; size *= 4, sizes++) {
            double start = MPI_Wtime();
            for (int round = 0; round < ROUNDS; round++) {
                if (rank == 0) {
                    for (long i = 0; i < size; i++)
                        buf[i] = pattern(i, size, sweeps);
                    MPI_Send(buf, (int)size, MPI_BYTE, peer, round, MPI_COMM_WORLD);
                    MPI_Recv(buf, (int)size, MPI_BYTE, peer, round, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
                    bad += count_bad(buf, size, sweeps);
                } else {
                    MPI_Recv(buf, (int)size, MPI_BYTE, peer, round, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
                    bad += count_bad(buf, size, sweeps);
                    MPI_Send(buf, (int)size, MPI_BYTE, peer, round, MPI_COMM_WORLD);
                }
            }
            largest_mbps = 2.0 * ROUNDS * size / (MPI_Wtime() - start) / 1e6;
        }
        if (until != NULL && rank == 0) {
            printf("mpi pingpong: sweep %ld done, %ld bad bytes so far\n", sweeps + 1, bad);
            fflush(stdout);
        }
        more = until != NULL && rank == 0 && access(until, F_OK) != 0;
        MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    long total_bad = 0;
    MPI_Reduce(&bad, &total_bad, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi pingpong: %d sizes, %ld bad bytes, 4 MiB at %.0f MB/s, %ld sweeps\n", sizes,
               total_bad, largest_mbps, sweeps);
    free(buf);
    MPI_Finalize();
    return rank == 0 && total_bad != 0 ? 1 : 0;
}
