// NcclCommunicator, compiled only where configure finds NCCL.
// Not for: builds without it (no_nccl.cpp).
#include "dptrain/comm/nccl.h"

#include <nccl.h>

#include "dptrain/core/check.h"
#include "dptrain/core/error.h"

#include <sched.h>

namespace dptrain {

std::string nccl_library_version() {
    int v = 0;
    NCCL_CHECK(ncclGetVersion(&v));
    return strfmt("%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
}

static ncclDataType_t nccl_type(DType t) { return t == DType::f32 ? ncclFloat32 : ncclBfloat16; }

NcclCommunicator::NcclCommunicator(MPI_Comm comm, cudaStream_t stream) {
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
    ncclUniqueId id;
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
    own_stream_ = stream == nullptr;
    if (own_stream_) CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    else stream_ = stream;
    NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
    CUDA_CHECK(cudaMalloc(&scratch_, sizeof(float)));
}

NcclCommunicator::~NcclCommunicator() {
    if (comm_) ncclCommDestroy(comm_);
    if (scratch_) cudaFree(scratch_);
    if (stream_ && own_stream_) cudaStreamDestroy(stream_);
}

void NcclCommunicator::allreduce_sum(void* buf, size_t count, DType t) {
    NCCL_CHECK(ncclAllReduce(buf, buf, count, nccl_type(t), ncclSum, comm_, stream_));
}

void NcclCommunicator::reduce_scatter_sum(const void* send, void* recv, const size_t* counts, DType t) {
    bool equal = true;
    for (int q = 1; q < size_; ++q) equal = equal && counts[q] == counts[0];
    if (equal) {
        NCCL_CHECK(ncclReduceScatter(send, recv, counts[0], nccl_type(t), ncclSum, comm_, stream_));
        return;
    }
    // Empty blocks take no call, and every rank skips the same ones (the counts are everyone's):
    // a sharded bucket has few owners among many ranks.
    const char* s = static_cast<const char*>(send);
    size_t at = 0;
    NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < size_; ++q) {
        if (counts[q] > 0)
            NCCL_CHECK(ncclReduce(s + at * dtype_size(t), q == rank_ ? recv : nullptr, counts[q], nccl_type(t),
                                  ncclSum, q, comm_, stream_));
        at += counts[q];
    }
    NCCL_CHECK(ncclGroupEnd());
}

void NcclCommunicator::allgather(const void* send, void* recv, const size_t* counts, DType t) {
    if (!send) {  // in place, NCCL's way: this rank's block at its place in recv
        size_t at = 0;
        for (int q = 0; q < rank_; ++q) at += counts[q];
        send = static_cast<const char*>(recv) + at * dtype_size(t);
    }
    bool equal = true;
    for (int q = 1; q < size_; ++q) equal = equal && counts[q] == counts[0];
    if (equal) {
        NCCL_CHECK(ncclAllGather(send, recv, counts[0], nccl_type(t), comm_, stream_));
        return;
    }
    char* r = static_cast<char*>(recv);
    size_t at = 0;
    NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < size_; ++q) {
        if (counts[q] > 0)  // as above: the same ranks skipped on every rank
            NCCL_CHECK(ncclBroadcast(q == rank_ ? send : nullptr, r + at * dtype_size(t), counts[q], nccl_type(t), q,
                                     comm_, stream_));
        at += counts[q];
    }
    NCCL_CHECK(ncclGroupEnd());
}

void NcclCommunicator::broadcast(void* buf, size_t bytes, int root) {
    NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream_));
}

void NcclCommunicator::reduce_scatter_block(void* buf, size_t block, DType t) {
    // In place: NCCL's receive buffer is the send buffer's block rank().
    char* b = static_cast<char*>(buf);
    NCCL_CHECK(ncclReduceScatter(b, b + (size_t)rank_ * block * dtype_size(t), block, nccl_type(t), ncclSum, comm_,
                                 stream_));
}

void NcclCommunicator::allgather_block(void* buf, size_t block, DType t) {
    // In place: NCCL's send buffer is the receive buffer's block rank().
    char* b = static_cast<char*>(buf);
    NCCL_CHECK(ncclAllGather(b + (size_t)rank_ * block * dtype_size(t), b, block, nccl_type(t), comm_, stream_));
}

void NcclCommunicator::barrier() {
    NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_));
    wait();
}

void NcclCommunicator::wait() {
    while (!poll()) sched_yield();
}

bool NcclCommunicator::poll() {
    cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaSuccess) return true;
    if (q != cudaErrorNotReady) CUDA_CHECK(q);
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        fatal(strfmt("NCCL asynchronous error: %s (a peer failed or the network is down)", ncclGetErrorString(async)));
    }
    return false;
}

} // namespace dptrain
