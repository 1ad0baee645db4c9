// MpiCommunicator and the start-up error agreement.
#include "dptrain/comm.h"

#include "dptrain/error.h"

#include <climits>
#include <cstdio>

namespace dptrain {

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
}

void MpiCommunicator::allreduce_sum(float* buf, size_t count) {
    for (size_t off = 0; off < count; off += INT_MAX) {
        int n = (int)std::min<size_t>(INT_MAX, count - off);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf + off, n, MPI_FLOAT, MPI_SUM, comm_));
    }
}

void MpiCommunicator::allreduce_sum(double* buf, size_t count) {
    for (size_t off = 0; off < count; off += INT_MAX) {
        int n = (int)std::min<size_t>(INT_MAX, count - off);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf + off, n, MPI_DOUBLE, MPI_SUM, comm_));
    }
}

void MpiCommunicator::broadcast(void* buf, size_t bytes, int root) {
    char* p = static_cast<char*>(buf);
    for (size_t off = 0; off < bytes; off += INT_MAX) {
        int n = (int)std::min<size_t>(INT_MAX, bytes - off);
        MPI_CHECK(MPI_Bcast(p + off, n, MPI_BYTE, root, comm_));
    }
}

void MpiCommunicator::barrier() { MPI_CHECK(MPI_Barrier(comm_)); }

bool agree_ok(MPI_Comm comm, bool ok, const std::string& msg) {
    int rank = 0, size = 1;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
    int mine = ok ? INT_MAX : rank, first = INT_MAX;
    MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
    if (first == INT_MAX) return true;
    if (rank == first) {
        if (size > 1) std::fprintf(stderr, "dptrain: error: %s (%s)\n", msg.c_str(), process_identity().c_str());
        else std::fprintf(stderr, "dptrain: error: %s\n", msg.c_str());
        std::fflush(stderr);
    }
    return false;
}

} // namespace dptrain
