// The device bytes the CUDA models allocate, from the shape alone, so the memory plan works on
// any machine, GPU and CUDA or not. Not for: allocating (model/gpt_buffers.h lists the GPT's).
#pragma once

#include "dptrain/model/gpt.h"
#include "dptrain/model/gpt_buffers.h"
#include "dptrain/model/model.h"

#include <cstddef>
#include <vector>

namespace dptrain {

// CudaGpt's activation_bytes(): gpt_buffers' GPU list summed.
size_t gpu_gpt_activation_bytes(const GptConfig& cfg, int max_batch, Precision p);

// CudaGpt's bf16 matmul scratch (every weight, the widest output gradient); 0 in fp32.
size_t gpu_gpt_operand_bytes(const GptConfig& cfg, int max_batch, Precision p);

// CudaLlama's bf16 operands (every weight, the widest activation and output gradient; 0 in fp32).
// Its activations are the CPU Llama's (fp32, llama_buffers).
size_t gpu_llama_operand_bytes(const GptConfig& cfg, int max_batch, Precision p);

// CudaMlp's (also the widest activation); its activations are Mlp::activation_bytes.
size_t gpu_mlp_operand_bytes(const std::vector<int>& dims, int max_batch, Precision p);

// Each cuda::Context's cuBLAS workspace: the cuBLAS guide's 32 MiB for Hopper.
constexpr size_t gpu_blas_workspace_bytes() { return (size_t)32 << 20; }

} // namespace dptrain
