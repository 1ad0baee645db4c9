// The Communicator interface (MPI over host memory here; NCCL in nccl.h) and the start-up
// agreement helper. Not for: choosing an algorithm (allreduce.h) or knowing the model.
#pragma once

#include "dptrain/comm/types.h"
#include "dptrain/core/error.h"

#include <mpi.h>

#include <cstddef>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

class Communicator {
  public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual const char* name() const = 0;
    // In place; identical bytes on every rank. bf16 rounds at each combining step, as NCCL does.
    virtual void allreduce_sum(void* buf, size_t count, DType t) = 0;
    // Rank r receives the sum of its block of send (counts[r] elements).
    virtual void reduce_scatter_sum(const void* send, void* recv, const size_t* counts, DType t) = 0;
    // Blocks in rank order; send = null: in place (this rank's block already in recv).
    virtual void allgather(const void* send, void* recv, const size_t* counts, DType t) = 0;
    virtual void broadcast(void* buf, size_t bytes, int root) = 0;
    virtual void barrier() = 0;

    void allreduce_sum(float* buf, size_t count) { allreduce_sum(buf, count, DType::f32); }
};

enum class ReduceOp { sum, min, max };

// MPI over host buffers; counts over INT_MAX go in pieces. Every MPI call outside src/comm goes
// through here, checked, including set-up's small reductions and gathers.
class MpiCommunicator : public Communicator {
  public:
    explicit MpiCommunicator(MPI_Comm comm);
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const char* name() const override { return "mpi"; }
    using Communicator::allreduce_sum;
    void allreduce_sum(void* buf, size_t count, DType t) override;
    void allreduce_sum(double* buf, size_t count);
    // In place, element-wise.
    void allreduce(int* buf, size_t count, ReduceOp op);
    void allreduce(long* buf, size_t count, ReduceOp op);
    void allreduce(unsigned long* buf, size_t count, ReduceOp op);
    void allreduce(double* buf, size_t count, ReduceOp op);
    // The largest value and the lowest rank holding it.
    std::pair<double, int> max_loc(double value);
    // Fixed-size records in rank order, on root.
    void gather(const void* send, size_t bytes, void* recv, int root);
    void allgather(const void* send, size_t bytes, void* recv);
    // Rank r's counts[r] floats, in rank order on root (scatter_blocks: the reverse).
    void gather_blocks(const float* send, float* recv, const size_t* counts, int root);
    // Rank r's block at buf + displs[r] (disjoint, any order) to every rank.
    void allgather_in_place(void* buf, const size_t* counts, const size_t* displs, DType t);
    void scatter_blocks(const float* send, float* recv, const size_t* counts, int root);
    void reduce_sum(const void* send, void* recv, size_t count, DType t, int root);  // recv: root's only
    // Messages between two ranks arrive in the order sent.
    void send_floats(const float* buf, size_t n, int to);
    void recv_floats(float* buf, size_t n, int from);
    // At most 63 bytes each (host names); gather_text fills root only.
    std::vector<std::string> gather_text(const std::string& mine, int root);
    std::vector<std::string> allgather_text(const std::string& mine);
    // Any length, concatenated in rank order on root ("" elsewhere).
    std::string gather_concat(const std::string& mine, int root);
    // Collective; MPI_COMM_NULL beyond the first n ranks. Free with free_comm.
    MPI_Comm split_first(int n);
    void reduce_scatter_sum(const void* send, void* recv, const size_t* counts, DType t) override;
    void allgather(const void* send, void* recv, const size_t* counts, DType t) override;
    void broadcast(void* buf, size_t bytes, int root) override;
    void barrier() override;
    MPI_Comm comm() const { return comm_; }

  private:
    MPI_Comm comm_;
    int rank_ = 0, size_ = 1;
    std::vector<int> counts_, displs_;
};

// Asks MPI_THREAD_SERIALIZED (the communication thread calls MPI while the main thread does not),
// and MPI_ERRORS_RETURN so MPI_CHECK reports with context.
void mpi_start(int* argc, char*** argv);
// From now on a fatal error ends every rank through MPI_Abort (for programs that MPI_Init themselves).
void mpi_abort_on_fatal();
int mpi_thread_level();
void free_comm(MPI_Comm* comm);  // null stays null
void mpi_errors_return(MPI_Comm comm);
void mpi_finish();
std::string mpi_library_version();  // its first line

// bf16: 16-bit words with a user op that adds in float32 and rounds once. After MPI_Init.
MPI_Datatype mpi_type(DType t);
MPI_Op mpi_sum_op(DType t);

// Start-up agreement, so a bad option or file on one rank ends the job instead of hanging the
// others: if fn threw anywhere, the lowest such rank prints it and every rank returns false
// (exit 2). StopRequested prints without "error:" and the run ends as stopped (exit 75).
bool agree_ok(MPI_Comm comm, bool ok, const std::string& msg, const char* kind = "error: ");

template <typename Fn>
bool all_ok(MPI_Comm comm, Fn&& fn) {
    try {
        fn();
    } catch (const std::bad_alloc&) {
        return agree_ok(comm, false,
                        "out of memory: this rank could not allocate what the run needs (the model, its optimizer "
                        "state, the batches, --io memory); `dptrain plan` with the same options shows what each takes");
    } catch (const StopRequested& e) {
        return agree_ok(comm, false, e.what(), "");
    } catch (const std::exception& e) {
        return agree_ok(comm, false, e.what());
    }
    return agree_ok(comm, true, "");
}

} // namespace dptrain
