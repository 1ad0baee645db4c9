// Version and build features, for the start-up banner and --version.
#pragma once

#include <string>

#ifndef DPTRAIN_VERSION
#define DPTRAIN_VERSION "0.1.0"
#endif

namespace dptrain {

// "CUDA ✗ | NCCL ✗ | OpenBLAS 0.3.21 (pthread) | OpenMP"
std::string build_features();

// Number of CUDA devices visible to this process, or -1 when built without CUDA. *why gets the
// reason when there are none.
int cuda_device_count(std::string* why);

} // namespace dptrain
