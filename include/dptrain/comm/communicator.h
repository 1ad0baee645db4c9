// The Communicator interface every transport implements (MPI over host memory here; NCCL over
// device memory in nccl.h), with float32 and bf16 payloads, and the start-up agreement helper.
// Not for: choosing an algorithm (allreduce.h) or knowing the model.
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
    // In place: buf = sum over ranks of buf. Every rank ends with identical bytes. bf16 sums are
    // rounded to bf16 at each combining step (as NCCL does).
    virtual void allreduce_sum(void* buf, size_t count, DType t) = 0;
    // send holds sum(counts) elements; rank r receives the sum of its block, counts[r] elements.
    virtual void reduce_scatter_sum(const void* send, void* recv, const size_t* counts, DType t) = 0;
    // send holds counts[rank] elements; recv gets every rank's block in rank order. send = null:
    // in place (this rank's block is already at its place in recv).
    virtual void allgather(const void* send, void* recv, const size_t* counts, DType t) = 0;
    virtual void broadcast(void* buf, size_t bytes, int root) = 0;
    virtual void barrier() = 0;

    void allreduce_sum(float* buf, size_t count) { allreduce_sum(buf, count, DType::f32); }
};

enum class ReduceOp { sum, min, max };

// MPI over host buffers. Counts above INT_MAX are sent in pieces (allreduce, broadcast). Besides
// the Communicator's payloads, the small agreements of set-up and reporting: reductions of a few
// integers or doubles, and gathers of fixed-size records (every MPI call outside src/comm goes
// through here, checked).
class MpiCommunicator : public Communicator {
  public:
    explicit MpiCommunicator(MPI_Comm comm);
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const char* name() const override { return "mpi"; }
    using Communicator::allreduce_sum;
    void allreduce_sum(void* buf, size_t count, DType t) override;
    void allreduce_sum(double* buf, size_t count);
    // In place: buf[i] = op over the ranks of buf[i].
    void allreduce(int* buf, size_t count, ReduceOp op);
    void allreduce(long* buf, size_t count, ReduceOp op);
    void allreduce(unsigned long* buf, size_t count, ReduceOp op);
    void allreduce(double* buf, size_t count, ReduceOp op);
    // The largest `value` over the ranks and the lowest rank holding it.
    std::pair<double, int> max_loc(double value);
    // Every rank sends `bytes` bytes; on `root`, recv gets size() records in rank order.
    void gather(const void* send, size_t bytes, void* recv, int root);
    // As gather, on every rank.
    void allgather(const void* send, size_t bytes, void* recv);
    // Blocks of floats of different sizes: rank r sends counts[r] floats, which `root` receives in
    // rank order into recv (gather_blocks); or receives its block of root's send (scatter_blocks).
    void gather_blocks(const float* send, float* recv, const size_t* counts, int root);
    // In place: rank r's counts[r] elements at buf + displs[r] (elements, any order, disjoint)
    // to every rank.
    void allgather_in_place(void* buf, const size_t* counts, const size_t* displs, DType t);
    void scatter_blocks(const float* send, float* recv, const size_t* counts, int root);
    // recv on `root` = the sum over ranks of send (count elements; recv unused elsewhere).
    void reduce_sum(const void* send, void* recv, size_t count, DType t, int root);
    // Point to point, n floats (in pieces above INT_MAX): messages between two ranks arrive in the
    // order they were sent.
    void send_floats(const float* buf, size_t n, int to);
    void recv_floats(float* buf, size_t n, int from);
    // Each rank's text (at most 63 bytes of it, as host names are), in rank order: on root only
    // (gather_text; others get an empty vector) or on every rank (allgather_text).
    std::vector<std::string> gather_text(const std::string& mine, int root);
    std::vector<std::string> allgather_text(const std::string& mine);
    // Every rank's text whole, of any length, concatenated in rank order on root ("" elsewhere).
    std::string gather_concat(const std::string& mine, int root);
    // Collective: a new communicator of this one's first n ranks (MPI_COMM_NULL on the others);
    // free it with free_comm.
    MPI_Comm split_first(int n);
    void reduce_scatter_sum(const void* send, void* recv, const size_t* counts, DType t) override;
    void allgather(const void* send, void* recv, const size_t* counts, DType t) override;
    void broadcast(void* buf, size_t bytes, int root) override;
    void barrier() override;
    MPI_Comm comm() const { return comm_; }

  private:
    MPI_Comm comm_;
    int rank_ = 0, size_ = 1;
    std::vector<int> counts_, displs_;  // reused by the v-collectives
};

// MPI for this process: started with MPI_THREAD_SERIALIZED asked for (the communication thread
// calls MPI while the main thread does not), errors returned to MPI_CHECK rather than aborting
// with less context, and this rank named for error lines (set_process_identity). mpi_thread_level
// is the level the library gave; mpi_finish() before the process ends.
void mpi_start(int* argc, char*** argv);
int mpi_thread_level();
// Frees a communicator made by split_first (or any other); null stays null.
void free_comm(MPI_Comm* comm);
// MPI_ERRORS_RETURN on another communicator (the topology's), as mpi_start does on the world.
void mpi_errors_return(MPI_Comm comm);
void mpi_finish();
// The MPI library's own name and version (MPI_Get_library_version), its first line.
std::string mpi_library_version();

// The MPI datatype and sum operation for a payload type (bf16: 16-bit words with a user op that
// adds in float32 and rounds once). Valid after MPI_Init.
MPI_Datatype mpi_type(DType t);
MPI_Op mpi_sum_op(DType t);

// Runs `fn` on every rank of `comm` and agrees on the outcome: if it threw on any rank, the
// lowest such rank prints "dptrain: error: MSG" and every rank returns false (the caller then
// finalizes MPI and exits 2). Used at start-up, where every rank reaches the same point, so a bad
// option or file ends the job cleanly instead of hanging the others. Work a stop signal cut
// short (StopRequested) is said without "error:": the caller ends the run as stopped (exit 75).
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
