// MpiCommunicator, the bf16 MPI operation, and the start-up error agreement.
#include "dptrain/comm/communicator.h"

#include "dptrain/core/bf16.h"
#include "dptrain/core/check.h"
#include "dptrain/core/error.h"

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

static MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::sum ? MPI_SUM : op == ReduceOp::min ? MPI_MIN : MPI_MAX; }

// The small agreements: counts are a few values, far below INT_MAX.
static void allreduce_typed(void* buf, size_t count, MPI_Datatype t, ReduceOp op, MPI_Comm comm) {
    if (count > (size_t)INT_MAX) fatal(strfmt("MpiCommunicator::allreduce of %zu values is beyond MPI's int counts", count));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, t, mpi_op(op), comm));
}
void MpiCommunicator::allreduce(int* buf, size_t count, ReduceOp op) { allreduce_typed(buf, count, MPI_INT, op, comm_); }
void MpiCommunicator::allreduce(long* buf, size_t count, ReduceOp op) { allreduce_typed(buf, count, MPI_LONG, op, comm_); }
void MpiCommunicator::allreduce(unsigned long* buf, size_t count, ReduceOp op) {
    allreduce_typed(buf, count, MPI_UNSIGNED_LONG, op, comm_);
}
void MpiCommunicator::allreduce(double* buf, size_t count, ReduceOp op) {
    allreduce_typed(buf, count, MPI_DOUBLE, op, comm_);
}

std::pair<double, int> MpiCommunicator::max_loc(double value) {
    struct {
        double value;
        int rank;
    } v{value, rank_};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE_INT, MPI_MAXLOC, comm_));
    return {v.value, v.rank};
}

void MpiCommunicator::gather(const void* send, size_t bytes, void* recv, int root) {
    if (bytes > (size_t)INT_MAX) fatal(strfmt("MpiCommunicator::gather of %zu bytes is beyond MPI's int counts", bytes));
    MPI_CHECK(MPI_Gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, root, comm_));
}

void MpiCommunicator::allgather(const void* send, size_t bytes, void* recv) {
    if (bytes > (size_t)INT_MAX) fatal(strfmt("MpiCommunicator::allgather of %zu bytes is beyond MPI's int counts", bytes));
    MPI_CHECK(MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm_));
}

static constexpr size_t kTextBytes = 64;  // a host name and its terminating zero

static std::vector<std::string> split_text(const std::vector<char>& all, int n) {
    std::vector<std::string> out;
    for (int r = 0; r < n; ++r) out.emplace_back(&all[(size_t)r * kTextBytes]);
    return out;
}

std::vector<std::string> MpiCommunicator::gather_text(const std::string& mine, int root) {
    char buf[kTextBytes] = {};
    std::snprintf(buf, sizeof buf, "%s", mine.c_str());
    std::vector<char> all(rank_ == root ? (size_t)size_ * kTextBytes : 0);
    gather(buf, kTextBytes, all.data(), root);
    return rank_ == root ? split_text(all, size_) : std::vector<std::string>{};
}

std::vector<std::string> MpiCommunicator::allgather_text(const std::string& mine) {
    char buf[kTextBytes] = {};
    std::snprintf(buf, sizeof buf, "%s", mine.c_str());
    std::vector<char> all((size_t)size_ * kTextBytes);
    allgather(buf, kTextBytes, all.data());
    return split_text(all, size_);
}

std::string MpiCommunicator::gather_concat(const std::string& mine, int root) {
    if (mine.size() > (size_t)INT_MAX) fatal(strfmt("gather_concat of %zu bytes is beyond MPI's int counts", mine.size()));
    int len = (int)mine.size();
    std::vector<int> lens(size_), displs(size_);
    MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, comm_));
    long total = 0;
    for (int r = 0; rank_ == root && r < size_; ++r) displs[r] = (int)total, total += lens[r];
    if (total > INT_MAX) fatal(strfmt("gather_concat of %ld bytes is beyond MPI's int counts", total));
    std::string all(rank_ == root ? (size_t)total : 0, '\0');
    MPI_CHECK(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, root, comm_));
    return all;
}

MPI_Comm MpiCommunicator::split_first(int n) {
    MPI_Comm out = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split(comm_, rank_ < n ? 0 : MPI_UNDEFINED, rank_, &out));
    return out;
}

void free_comm(MPI_Comm* comm) {
    if (*comm != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(comm));
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
    MPI_CHECK(MPI_Allgatherv(send ? send : MPI_IN_PLACE, counts_[rank_], mpi_type(t), recv, counts_.data(),
                             displs_.data(), mpi_type(t), comm_));
}

void MpiCommunicator::allgather_in_place(void* buf, const size_t* counts, const size_t* displs, DType t) {
    for (int r = 0; r < size_; ++r) {
        if (counts[r] > (size_t)INT_MAX || displs[r] > (size_t)INT_MAX)
            fatal(strfmt("collective block of %zu elements at %zu is beyond MPI's int counts", counts[r], displs[r]));
        counts_[r] = (int)counts[r];
        displs_[r] = (int)displs[r];
    }
    MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts_.data(), displs_.data(), mpi_type(t),
                             comm_));
}

void MpiCommunicator::gather_blocks(const float* send, float* recv, const size_t* counts, int root) {
    to_int_blocks(counts, size_, counts_, displs_);
    MPI_CHECK(MPI_Gatherv(send, counts_[rank_], MPI_FLOAT, recv, counts_.data(), displs_.data(), MPI_FLOAT, root,
                          comm_));
}

void MpiCommunicator::scatter_blocks(const float* send, float* recv, const size_t* counts, int root) {
    to_int_blocks(counts, size_, counts_, displs_);
    MPI_CHECK(MPI_Scatterv(send, counts_.data(), displs_.data(), MPI_FLOAT, recv, counts_[rank_], MPI_FLOAT, root,
                           comm_));
}

void MpiCommunicator::reduce_sum(const void* send, void* recv, size_t count, DType t, int root) {
    const char* s = static_cast<const char*>(send);
    char* r = static_cast<char*>(recv);
    const size_t unit = dtype_size(t);
    for (size_t off = 0; off < count; off += INT_MAX) {
        const int n = (int)std::min<size_t>(INT_MAX, count - off);
        MPI_CHECK(MPI_Reduce(s + off * unit, rank_ == root ? r + off * unit : nullptr, n, mpi_type(t), mpi_sum_op(t),
                             root, comm_));
    }
}

void MpiCommunicator::send_floats(const float* buf, size_t n, int to) {
    for (size_t off = 0; off < n; off += INT_MAX)
        MPI_CHECK(MPI_Send(buf + off, (int)std::min<size_t>(INT_MAX, n - off), MPI_FLOAT, to, 0, comm_));
}

void MpiCommunicator::recv_floats(float* buf, size_t n, int from) {
    for (size_t off = 0; off < n; off += INT_MAX)
        MPI_CHECK(MPI_Recv(buf + off, (int)std::min<size_t>(INT_MAX, n - off), MPI_FLOAT, from, 0, comm_,
                           MPI_STATUS_IGNORE));
}

void MpiCommunicator::broadcast(void* buf, size_t bytes, int root) {
    char* p = static_cast<char*>(buf);
    for (size_t off = 0; off < bytes; off += INT_MAX) {
        int n = (int)std::min<size_t>(INT_MAX, bytes - off);
        MPI_CHECK(MPI_Bcast(p + off, n, MPI_BYTE, root, comm_));
    }
}

void MpiCommunicator::barrier() { MPI_CHECK(MPI_Barrier(comm_)); }

std::string mpi_error_text(int rc) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int n = 0;
    if (MPI_Error_string(rc, text, &n) != MPI_SUCCESS) return std::to_string(rc);
    return strfmt("%d (%s)", rc, text);
}

static void abort_world(int code) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) MPI_Abort(MPI_COMM_WORLD, code);
}

void mpi_abort_on_fatal() { set_job_abort(&abort_world); }

void mpi_start(int* argc, char*** argv) {
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
    mpi_abort_on_fatal();
    mpi_errors_return(MPI_COMM_WORLD);
    int rank = 0, len = 0;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Get_processor_name(host, &len));
    set_process_identity(rank, std::string(host, len));
}

int mpi_thread_level() {
    int level = 0;
    MPI_CHECK(MPI_Query_thread(&level));
    return level;
}

void mpi_errors_return(MPI_Comm comm) {
    if (comm != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
}

void mpi_finish() {
    set_job_abort(nullptr);
    MPI_CHECK(MPI_Finalize());
}

std::string mpi_library_version() {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_CHECK(MPI_Get_library_version(lib, &len));
    std::string v(lib, len);
    return v.substr(0, v.find_first_of(",\n"));
}

bool agree_ok(MPI_Comm comm, bool ok, const std::string& msg, const char* kind) {
    int rank = 0, size = 1;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
    int mine = ok ? INT_MAX : rank, first = INT_MAX;
    MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
    if (first == INT_MAX) return true;
    if (rank == first) {
        if (size > 1) std::fprintf(stderr, "dptrain: %s%s (%s)\n", kind, msg.c_str(), process_identity().c_str());
        else std::fprintf(stderr, "dptrain: %s%s\n", kind, msg.c_str());
        std::fflush(stderr);
    }
    return false;
}

} // namespace dptrain
