// The Communicator interface every transport implements (MPI over host memory here; NCCL over
// device memory in nccl_comm.h), with float32 and bf16 payloads, and the start-up agreement helper.
// Not for: choosing an algorithm (allreduce.h) or knowing the model.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

namespace dptrain {

enum class DType { f32, bf16 };
inline size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }
inline const char* dtype_name(DType t) { return t == DType::f32 ? "float32" : "bf16"; }

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
    // send holds counts[rank] elements; recv gets every rank's block in rank order.
    virtual void allgather(const void* send, void* recv, const size_t* counts, DType t) = 0;
    virtual void broadcast(void* buf, size_t bytes, int root) = 0;
    virtual void barrier() = 0;

    void allreduce_sum(float* buf, size_t count) { allreduce_sum(buf, count, DType::f32); }
};

// MPI over host buffers. Counts above INT_MAX are sent in pieces (allreduce, broadcast).
class MpiCommunicator : public Communicator {
  public:
    explicit MpiCommunicator(MPI_Comm comm);
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const char* name() const override { return "mpi"; }
    using Communicator::allreduce_sum;
    void allreduce_sum(void* buf, size_t count, DType t) override;
    void allreduce_sum(double* buf, size_t count);
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

// The MPI datatype and sum operation for a payload type (bf16: 16-bit words with a user op that
// adds in float32 and rounds once). Valid after MPI_Init.
MPI_Datatype mpi_type(DType t);
MPI_Op mpi_sum_op(DType t);

// Runs `fn` on every rank of `comm` and agrees on the outcome: if it threw on any rank, the
// lowest such rank prints "dptrain: error: MSG" and every rank returns false (the caller then
// finalizes MPI and exits 2). Used at start-up, where every rank reaches the same point, so a bad
// option or file ends the job cleanly instead of hanging the others.
bool agree_ok(MPI_Comm comm, bool ok, const std::string& msg);

template <typename Fn>
bool all_ok(MPI_Comm comm, Fn&& fn) {
    try {
        fn();
    } catch (const std::exception& e) {
        return agree_ok(comm, false, e.what());
    }
    return agree_ok(comm, true, "");
}

} // namespace dptrain
