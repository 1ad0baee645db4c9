// A GPT's and a Llama's activation buffers, listed once (llm.c's fill_in_activation_sizes): Gpt and CudaGpt
// allocate from it, and activation_bytes and the memory plan sum it.
// Not for: parameters, gradients and the bf16 matmul operands (count_params, operand_bytes).
#pragma once

#include "dptrain/model/gpt.h"

#include <cstddef>
#include <vector>

namespace dptrain {

enum class BufferDevice { cpu, gpu };

struct GptBuffer {
    const char* name;  // the model's field without its underscore: "ln1", "att", "targets"
    size_t count;      // values; 0 where the configuration has none (att under flash attention)
    int value_bytes;   // 4 (fp32, int32) or 2 (bf16, on the GPU)
    bool kept;         // written by forward and read by backward (else one pass's scratch)
    bool by_precision; // CudaGpt: allocated by set_precision, its size or type following --precision
};

// For max_batch windows. cpu: fp32 throughout. gpu: CudaGpt's (in bf16 several at 2 bytes a value).
std::vector<GptBuffer> gpt_buffers(const GptConfig& cfg, int max_batch, Precision p, BufferDevice d);
size_t buffer_bytes(const std::vector<GptBuffer>& list);
// A Llama's (model/llama.h; cfg resolved by llama_resolved), fp32 on the CPU.
std::vector<GptBuffer> llama_buffers(const GptConfig& cfg, int max_batch);

// CudaGpt's logits row stride: in bf16 V rounded up to 64 values, so the classifier's GEMMs see
// 128-byte aligned rows.
inline size_t gpu_logits_stride(size_t V, Precision p) { return p == Precision::bf16 ? (V + 63) / 64 * 64 : V; }

} // namespace dptrain
