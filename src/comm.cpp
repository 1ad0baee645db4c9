// MpiCommunicator, the bf16 MPI operation, and the start-up error agreement.
#include "dptrain/comm.h"

#include "dptrain/bf16.h"
#include "dptrain/error.h"

#include <algorithm>
#include <climits>
#include <cstdio>

namespace dptrain {

static void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
    const bf16* a = static_cast<const bf16*>(in);
    bf16* b = static_cast<bf16*>(inout);
    for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

MPI_Datatype mpi_type(DType t) { return t == DType::f32 ? MPI_FLOAT : MPI_UINT16_T; }

MPI_Op mpi_sum_op(DType t) {
    if (t == DType::f32) return MPI_SUM;
    static MPI_Op op = [] {
        MPI_Op o;
        MPI_CHECK(MPI_Op_create(&bf16_sum, /*commute=*/1, &o));
        return o;
    }();
    return op;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
    counts_.resize(size_);
    displs_.resize(size_);
}

void MpiCommunicator::allreduce_sum(void* buf, size_t count, DType t) {
    char* p = static_cast<char*>(buf);
    for (size_t off = 0; off < count; off += INT_MAX) {
        int n = (int)std::min<size_t>(INT_MAX, count - off);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + off * dtype_size(t), n, mpi_type(t), mpi_sum_op(t), comm_));
    }
}

void MpiCommunicator::allreduce_sum(double* buf, size_t count) {
    for (size_t off = 0; off < count; off += INT_MAX) {
        int n = (int)std::min<size_t>(INT_MAX, count - off);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf + off, n, MPI_DOUBLE, MPI_SUM, comm_));
    }
}

// Block counts and displacements as int, as the v-collectives take them.
static void to_int_blocks(const size_t* counts, int n, std::vector<int>& c, std::vector<int>& d) {
    long at = 0;
    for (int r = 0; r < n; ++r) {
        if (counts[r] > (size_t)INT_MAX || at > INT_MAX)
            fatal(strfmt("collective block of %zu elements is beyond MPI's int counts", counts[r]));
        c[r] = (int)counts[r];
        d[r] = (int)at;
        at += (long)counts[r];
    }
}

void MpiCommunicator::reduce_scatter_sum(const void* send, void* recv, const size_t* counts, DType t) {
    to_int_blocks(counts, size_, counts_, displs_);
    MPI_CHECK(MPI_Reduce_scatter(send, recv, counts_.data(), mpi_type(t), mpi_sum_op(t), comm_));
}

void MpiCommunicator::allgather(const void* send, void* recv, const size_t* counts, DType t) {
    to_int_blocks(counts, size_, counts_, displs_);
    MPI_CHECK(MPI_Allgatherv(send, counts_[rank_], mpi_type(t), recv, counts_.data(), displs_.data(), mpi_type(t),
                             comm_));
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
