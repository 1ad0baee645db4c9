// A GPT's activation buffers, listed once (llm.c's fill_in_activation_sizes): each with its size,
// bytes a value and lifetime, for a configuration, batch, precision and device. The CPU Gpt and
// CudaGpt allocate from this list, and their activation_bytes and the memory plan sum it.
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

// Every activation buffer of a GPT for max_batch windows. cpu: fp32 throughout. gpu: CudaGpt's,
// where bf16 keeps LayerNorm's, fc's and GELU's outputs, the logits (rows padded to 64 values)
// and, under flash attention, qkv at 2 bytes, and adds rounded copies of attention's output and
// fc's output gradient.
std::vector<GptBuffer> gpt_buffers(const GptConfig& cfg, int max_batch, Precision p, BufferDevice d);
// Their bytes in all.
size_t buffer_bytes(const std::vector<GptBuffer>& list);

// CudaGpt's logits row stride in values: V in fp32; in bf16 V rounded up to a multiple of 64, so
// each row starts on a 128-byte line and the classifier's GEMMs see aligned rows.
inline size_t gpu_logits_stride(size_t V, Precision p) { return p == Precision::bf16 ? (V + 63) / 64 * 64 : V; }

} // namespace dptrain
