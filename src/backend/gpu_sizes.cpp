// The CUDA models' device bytes by formula (gpu_sizes.h): each term names the buffer of
// src/backend/cuda/gpt.cpp (the constructor's list, kept_plan, set_precision) or mlp.cpp it sizes.
#include "dptrain/backend/gpu_sizes.h"

#include <algorithm>

namespace dptrain {

size_t gpu_gpt_activation_bytes(const GptConfig& cfg, int max_batch, Precision p) {
    const size_t T = cfg.block_size, C = cfg.n_embd, L = cfg.n_layer, NH = cfg.n_head, V = cfg.vocab_size;
    const size_t BT = (size_t)max_batch * T, BTC = BT * C;
    // --recompute: one slot, shared by every layer, of what backward recomputes (kept_layers()).
    const size_t Lk = L > 0 && cfg.recompute == Recompute::block ? 1 : L;
    const size_t La = L > 0 && cfg.recompute != Recompute::none ? 1 : L;
    const bool flash = cfg.flash_attention, half = p == Precision::bf16, flash16 = half && flash;
    const size_t ATT = flash ? 0 : (size_t)max_batch * NH * T * T, STAT = flash ? (size_t)max_batch * NH * T : 0;
    // The constructor's, 4 bytes each whatever the precision: targets, encoded, ln1's statistics,
    // att, lse, residual2, ln2's statistics, residual3, lnf's statistics, ce_stats, argmax,
    // losses, scratch, dres, dbig, dsmall, datt, datty, delta.
    size_t four = BT + BTC + 2 * Lk * BT + La * (ATT + STAT) + Lk * BTC + 2 * Lk * BT + L * BTC + 2 * BT + 2 * BT +
                  BT + BT + BTC + BTC + 4 * BTC + BTC + ATT + BTC + STAT;
    size_t two = 0;
    // kept_plan: atty (fp32; none under bf16 flash, whose rounded copy is atty16), ln1, ln2, lnf,
    // fch, fch_gelu and the logits (bf16: 2 bytes), qkv (2 bytes under bf16 flash only).
    four += flash16 ? 0 : Lk * BTC;
    (half ? two : four) += Lk * BTC + Lk * BTC + BTC + 4 * Lk * BTC + 4 * Lk * BTC + BT * gpu_logits_stride(V, p);
    (flash16 ? two : four) += 3 * Lk * BTC;
    // set_precision's bf16 buffers: attention's output rounded (atty16) and fc's output gradient.
    if (half) two += Lk * BTC + 4 * BTC;
    return 4 * four + 2 * two;
}

size_t gpu_gpt_operand_bytes(const GptConfig& cfg, int max_batch, Precision p) {
    if (p != Precision::bf16) return 0;
    // cuda::Matmuls::bytes(P, 0, grad): the widest output gradient is (B*T, max(4C, the padded V)).
    const size_t BT = (size_t)max_batch * cfg.block_size;
    const size_t grad = BT * std::max<size_t>(4 * (size_t)cfg.n_embd, gpu_logits_stride(cfg.vocab_size, p));
    return 2 * (Gpt::count_params(cfg) + grad);
}

size_t gpu_mlp_operand_bytes(const std::vector<int>& dims, int max_batch, Precision p) {
    if (p != Precision::bf16) return 0;
    const size_t rows = (size_t)max_batch * (size_t)*std::max_element(dims.begin(), dims.end());
    return 2 * (Mlp::count_params(dims) + rows + rows);
}

} // namespace dptrain
