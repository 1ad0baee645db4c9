// NcclCommunicator in a CUDA build without NCCL: it cannot be made, and says so. The Makefile
// links this file instead of nccl.cpp, so DeviceStep and the Device factory ask at run time
// (nccl_library_version() is empty) rather than through #ifdef.
#include "dptrain/comm/nccl.h"

#include "dptrain/core/error.h"

namespace dptrain {

std::string nccl_library_version() { return ""; }

NcclCommunicator::NcclCommunicator(MPI_Comm, cudaStream_t) {
    throw UserError("this build has no NCCL to sum on device buffers: build where NCCL is installed");
}

// Nothing below is reached: no object of the class exists.
NcclCommunicator::~NcclCommunicator() = default;
void NcclCommunicator::allreduce_sum(void*, size_t, DType) { fatal("NCCL call in a build without NCCL"); }
void NcclCommunicator::reduce_scatter_sum(const void*, void*, const size_t*, DType) {
    fatal("NCCL call in a build without NCCL");
}
void NcclCommunicator::allgather(const void*, void*, const size_t*, DType) { fatal("NCCL call in a build without NCCL"); }
void NcclCommunicator::broadcast(void*, size_t, int) { fatal("NCCL call in a build without NCCL"); }
void NcclCommunicator::reduce_scatter_block(void*, size_t, DType) { fatal("NCCL call in a build without NCCL"); }
void NcclCommunicator::allgather_block(void*, size_t, DType) { fatal("NCCL call in a build without NCCL"); }
void NcclCommunicator::barrier() { fatal("NCCL call in a build without NCCL"); }
void NcclCommunicator::wait() { fatal("NCCL call in a build without NCCL"); }
bool NcclCommunicator::poll() { fatal("NCCL call in a build without NCCL"); }

} // namespace dptrain
