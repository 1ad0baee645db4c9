// The CUDA models' device bytes by formula (gpu_sizes.h), the GPT's from its buffer list.
// Not for: allocating.
#include "dptrain/backend/gpu_sizes.h"

#include "dptrain/model/llama.h"

#include <algorithm>

namespace dptrain {

size_t gpu_gpt_activation_bytes(const GptConfig& cfg, int max_batch, Precision p) {
    return buffer_bytes(gpt_buffers(cfg, max_batch, p, BufferDevice::gpu));
}

size_t gpu_gpt_operand_bytes(const GptConfig& cfg, int max_batch, Precision p) {
    if (p != Precision::bf16) return 0;
    // cuda::Matmuls::bytes(P, 0, grad): the widest output gradient is (B*T, max(4C, padded V)).
    const size_t BT = (size_t)max_batch * cfg.block_size;
    const size_t grad = BT * std::max<size_t>(4 * (size_t)cfg.n_embd, gpu_logits_stride(cfg.vocab_size, p));
    return 2 * (Gpt::count_params(cfg) + grad);
}

size_t gpu_llama_operand_bytes(const GptConfig& cfg, int max_batch, Precision p) {
    if (p != Precision::bf16) return 0;
    size_t act = 0, grad = 0;
    llama_operand_sizes(llama_resolved(cfg), max_batch, &act, &grad);
    return 2 * (Llama::count_params(cfg) + act + grad);  // cuda::Matmuls::bytes
}

size_t gpu_mlp_operand_bytes(const std::vector<int>& dims, int max_batch, Precision p) {
    if (p != Precision::bf16) return 0;
    const size_t rows = (size_t)max_batch * (size_t)*std::max_element(dims.begin(), dims.end());
    return 2 * (Mlp::count_params(dims) + rows + rows);
}

} // namespace dptrain
