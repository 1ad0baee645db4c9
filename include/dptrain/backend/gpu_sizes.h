// The device bytes the CUDA models allocate, by formula from the shape alone, so that the memory
// plan sizes a GPU's part on any machine (with or without a GPU, or CUDA in the build).
// Not for: allocating (the GPT's buffers are listed once, in model/gpt_buffers.h, for both).
#pragma once

#include "dptrain/model/gpt.h"
#include "dptrain/model/gpt_buffers.h"
#include "dptrain/model/model.h"

#include <cstddef>
#include <vector>

namespace dptrain {

// CudaGpt's activations for max_batch windows: the sum of gpt_buffers' GPU list, from which
// CudaGpt allocates (what its activation_bytes() reports).
size_t gpu_gpt_activation_bytes(const GptConfig& cfg, int max_batch, Precision p);

// The bf16 matmul scratch of CudaGpt (every weight and the widest output gradient, 2 bytes a
// value; none in fp32).
size_t gpu_gpt_operand_bytes(const GptConfig& cfg, int max_batch, Precision p);

// CudaMlp's bf16 matmul scratch (every weight, the widest activation and output gradient, 2 bytes
// a value; none in fp32). Its activations are the CPU model's (Mlp::activation_bytes).
size_t gpu_mlp_operand_bytes(const std::vector<int>& dims, int max_batch, Precision p);

// Each cuda::Context's cuBLAS workspace: 32 MiB, the cuBLAS guide's recommendation for Hopper
// (4 MiB suffices before it).
constexpr size_t gpu_blas_workspace_bytes() { return (size_t)32 << 20; }

} // namespace dptrain
