// The Communicator over device memory: NCCL, its unique id sent over MPI. Without NCCL the build
// links no_nccl.cpp instead, so callers need no #ifdef. Not for: host buffers (MpiCommunicator)
// or choosing an algorithm.
#pragma once

#include "dptrain/comm/communicator.h"

#include <cuda_runtime.h>

#include <string>
#include <vector>

struct ncclComm;  // ncclComm_t: only nccl.cpp includes nccl.h

namespace dptrain {

// "2.21.5"; empty without NCCL.
std::string nccl_library_version();

// Calls queue on the stream and return at once. Communicators that share a stream run their
// calls in the order made.
class NcclCommunicator : public Communicator {
  public:
    // Collective; set the CUDA device first. stream: not owned; null: its own. Throws UserError
    // without NCCL.
    explicit NcclCommunicator(MPI_Comm comm, cudaStream_t stream = nullptr);
    ~NcclCommunicator() override;
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const char* name() const override { return "nccl"; }
    using Communicator::allreduce_sum;
    void allreduce_sum(void* buf, size_t count, DType t) override;
    // Unequal blocks: a group of ncclReduce / ncclBroadcast, as NCCL has no v-variants.
    void reduce_scatter_sum(const void* send, void* recv, const size_t* counts, DType t) override;
    void allgather(const void* send, void* recv, const size_t* counts, DType t) override;
    void broadcast(void* buf, size_t bytes, int root) override;
    // In place over size() equal blocks; block rank() is the one reduced or sent.
    void reduce_scatter_block(void* buf, size_t block, DType t);
    void allgather_block(void* buf, size_t block, DType t);
    void barrier() override;  // a 1-element all-reduce, then wait()
    // Polls NCCL's async error while waiting, so a failed peer ends the job (fatal) instead of
    // hanging it. Only this communicator's errors: with a shared stream, poll() each.
    void wait();
    // Never blocks: true once the stream is empty; errors as wait().
    bool poll();
    cudaStream_t stream() const { return stream_; }

  private:
    ::ncclComm* comm_ = nullptr;
    cudaStream_t stream_ = nullptr;
    bool own_stream_ = true;
    int rank_ = 0, size_ = 1;
    float* scratch_ = nullptr;  // for barrier()
};

} // namespace dptrain
