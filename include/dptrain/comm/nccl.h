// The Communicator over device memory: NCCL, with the ncclUniqueId handed out over MPI. Compiled,
// and included, only where NCCL is found (the Makefile adds src/comm/nccl.cpp then). Calls are
// ordered on the communicator's CUDA stream (its own, or one it shares with other communicators,
// so that their calls run in the order they were made) and return at once; wait() blocks until
// they finished, polling NCCL's asynchronous error so a failed peer ends the job instead of
// hanging it.
// Not for: host buffers (MpiCommunicator) or choosing an algorithm.
#pragma once

#include "dptrain/comm/communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <vector>

namespace dptrain {

// The NCCL library's version, "2.21.5".
std::string nccl_library_version();

class NcclCommunicator : public Communicator {
  public:
    // Collective over `comm`; the calling rank's CUDA device must be set already. stream: the
    // stream to queue on (not owned), or null for a stream of its own.
    explicit NcclCommunicator(MPI_Comm comm, cudaStream_t stream = nullptr);
    ~NcclCommunicator() override;
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const char* name() const override { return "nccl"; }
    using Communicator::allreduce_sum;
    void allreduce_sum(void* buf, size_t count, DType t) override;
    // Equal blocks use ncclReduceScatter / ncclAllGather; unequal ones a group of ncclReduce /
    // ncclBroadcast, one per rank (NCCL has no v-variants).
    void reduce_scatter_sum(const void* send, void* recv, const size_t* counts, DType t) override;
    void allgather(const void* send, void* recv, const size_t* counts, DType t) override;
    void broadcast(void* buf, size_t bytes, int root) override;
    // In place over size() equal blocks of `block` values: block rank() of buf becomes the sum of
    // every rank's block rank() (reduce_scatter_block); every rank's block q becomes rank q's
    // block q (allgather_block).
    void reduce_scatter_block(void* buf, size_t block, DType t);
    void allgather_block(void* buf, size_t block, DType t);
    void barrier() override;  // a 1-element all-reduce, then wait()
    // Blocks until every call issued so far has finished; a NCCL error (local or a peer's) is
    // fatal: the communicator is aborted and the job ends. It polls this communicator's errors
    // only: where communicators share a stream, poll() each of them instead (DeviceStep does).
    void wait();
    // One look: true when the stream has nothing left queued; a NCCL error is fatal as in wait().
    // Communicators sharing a stream are waited for by polling each of them in turn.
    bool poll();
    cudaStream_t stream() const { return stream_; }

  private:
    ncclComm_t comm_ = nullptr;
    cudaStream_t stream_ = nullptr;
    bool own_stream_ = true;
    int rank_ = 0, size_ = 1;
    float* scratch_ = nullptr;  // one float on the device, for barrier()
};

} // namespace dptrain
