// Catch2 runner for tests that need several ranks: run under mpirun -np 1, 2, 4 (tests/run_all.sh).
// Every rank runs every test and reports its own results; each rank's failure count is summed so
// all ranks exit alike.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "dptrain/comm/communicator.h"

#include <mpi.h>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    dptrain::mpi_abort_on_fatal();  // a fatal error on one rank ends them all, as in dptrain
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    Catch::Session session;
    if (int rc = session.applyCommandLine(argc, argv)) {
        MPI_Finalize();
        return rc;
    }
    int failed = session.run();
    int total = 0;
    MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
