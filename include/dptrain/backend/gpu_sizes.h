// The device bytes the CUDA models allocate, by formula from the shape alone, so that the memory
// plan sizes a GPU's part on any machine (with or without a GPU, or CUDA in the build).
// Not for: allocating (CudaGpt and CudaMlp size their own buffers; the [cuda] tests hold these
// formulas to what they allocate, and in fp32 the GPT's equal the CPU model's, unit-tested).
#pragma once

#include "dptrain/model/gpt.h"
#include "dptrain/model/model.h"

#include <cstddef>
#include <vector>

namespace dptrain {

// CudaGpt's logits row stride in values: V in fp32; in bf16 V rounded up to a multiple of 64, so
// each row starts on a 128-byte line and the classifier's GEMMs see aligned rows.
inline size_t gpu_logits_stride(size_t V, Precision p) { return p == Precision::bf16 ? (V + 63) / 64 * 64 : V; }

// CudaGpt's activations for max_batch windows: the CPU model's buffers, with those bf16 keeps
// rounded at 2 bytes a value (LayerNorm's, fc's and GELU's outputs, the logits in rows padded to
// 64, and qkv under flash attention) and bf16's own copies of attention's output and fc's output
// gradient. What CudaGpt::activation_bytes() reports.
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
