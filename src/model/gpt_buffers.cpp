// The GPT's buffer list (gpt_buffers.h).
// Not for: allocating (Gpt and CudaGpt do, from it).
#include "dptrain/model/gpt_buffers.h"

#include <algorithm>

namespace dptrain {

std::vector<GptBuffer> gpt_buffers(const GptConfig& cfg, int max_batch, Precision p, BufferDevice d) {
    const size_t T = cfg.block_size, C = cfg.n_embd, L = cfg.n_layer, NH = cfg.n_head, V = cfg.vocab_size;
    const size_t BT = (size_t)max_batch * T, BTC = BT * C;
    // --recompute: what backward recomputes has one slot, shared by every layer (Gpt::kept).
    const size_t Lk = L > 0 && cfg.recompute == Recompute::block ? 1 : L;
    const size_t La = L > 0 && cfg.recompute != Recompute::none ? 1 : L;
    // Flash attention keeps each query's log-sum-exp instead of the T x T softmax.
    const bool flash = cfg.flash_attention, gpu = d == BufferDevice::gpu;
    const size_t ATT = flash ? 0 : (size_t)max_batch * NH * T * T, STAT = flash ? (size_t)max_batch * NH * T : 0;
    // On the GPU in bf16, what the next matmul reads is kept rounded, at 2 bytes a value.
    const int half = gpu && p == Precision::bf16 ? 2 : 4, qkv = gpu && p == Precision::bf16 && flash ? 2 : 4;
    const bool by_p = gpu;  // CudaGpt's set_precision allocates these
    std::vector<GptBuffer> b = {
        {"targets", BT, 4, true, false},
        {"encoded", BTC, 4, true, false},
        {"ln1", Lk * BTC, half, true, by_p},
        {"ln1_mean", Lk * BT, 4, true, false},
        {"ln1_rstd", Lk * BT, 4, true, false},
        {"qkv", Lk * 3 * BTC, qkv, true, by_p},
        // On the GPU in bf16 with flash attention only the rounded copy (atty16) is kept.
        {"atty", half == 2 && flash ? 0 : Lk * BTC, 4, true, by_p},
        {"att", La * ATT, 4, true, false},
        {"lse", La * STAT, 4, true, false},
        {"residual2", Lk * BTC, 4, true, false},
        {"ln2", Lk * BTC, half, true, by_p},
        {"ln2_mean", Lk * BT, 4, true, false},
        {"ln2_rstd", Lk * BT, 4, true, false},
        {"fch", Lk * 4 * BTC, half, true, by_p},
        {"fch_gelu", Lk * 4 * BTC, half, true, by_p},
        {"residual3", L * BTC, 4, true, false},  // each block's output: the next one's input
        {"lnf", BTC, half, true, by_p},
        {"lnf_mean", BT, 4, true, false},
        {"lnf_rstd", BT, 4, true, false},
        {"logits", BT * (gpu ? gpu_logits_stride(V, p) : V), half, true, by_p},
        {"ce_stats", 2 * BT, 4, true, false},  // the loss's max and 1 / sum per row
        {"argmax", BT, 4, false, false},
        {"losses", BT, 4, false, false},
        {"scratch", BTC, 4, false, false},
        {"dres", BTC, 4, false, false},
        {"dbig", 4 * BTC, 4, false, false},  // dfc, then (dfc done with) dqkv
        {"dsmall", BTC, 4, false, false},
        {"datt", ATT, 4, false, false},
        {"datty", BTC, 4, false, false},
        {"delta", STAT, 4, false, false},
    };
    if (half == 2) {  // bf16 on the GPU: attention's output rounded, and fc's gradient
        b.push_back({"atty16", Lk * BTC, 2, true, true});
        b.push_back({"dfc16", 4 * BTC, 2, false, true});
    }
    return b;
}

std::vector<GptBuffer> llama_buffers(const GptConfig& cfg, int max_batch) {
    const size_t T = cfg.block_size, C = cfg.n_embd, L = cfg.n_layer, NH = cfg.n_head, V = cfg.vocab_size;
    const size_t F = cfg.ffn_hidden, hs = C / NH, QKV = (NH + 2 * (size_t)cfg.n_kv_head) * hs;
    const size_t BT = (size_t)max_batch * T, BTC = BT * C;
    const size_t Lk = L > 0 && cfg.recompute == Recompute::block ? 1 : L;
    const size_t La = L > 0 && cfg.recompute != Recompute::none ? 1 : L;
    const bool flash = cfg.flash_attention;
    const size_t ATT = flash ? 0 : (size_t)max_batch * NH * T * T, STAT = flash ? (size_t)max_batch * NH * T : 0;
    return {
        {"targets", BT, 4, true, false},
        {"rope_cos", T * hs / 2, 4, true, false},  // the angles, one table for every layer
        {"rope_sin", T * hs / 2, 4, true, false},
        {"encoded", BTC, 4, true, false},
        {"ln1", Lk * BTC, 4, true, false},
        {"ln1_rstd", Lk * BT, 4, true, false},
        {"qkv3", Lk * 3 * BTC, 4, true, false},  // q, k rotated; k, v repeated to every query head
        {"atty", Lk * BTC, 4, true, false},
        {"att", La * ATT, 4, true, false},
        {"lse", La * STAT, 4, true, false},
        {"residual2", Lk * BTC, 4, true, false},
        {"ln2", Lk * BTC, 4, true, false},
        {"ln2_rstd", Lk * BT, 4, true, false},
        {"gu", Lk * 2 * F * BT, 4, true, false},  // gate, up
        {"swi", Lk * F * BT, 4, true, false},
        {"residual3", L * BTC, 4, true, false},
        {"lnf", BTC, 4, true, false},
        {"lnf_rstd", BT, 4, true, false},
        {"logits", BT * V, 4, true, false},
        {"ce_stats", 2 * BT, 4, true, false},
        {"argmax", BT, 4, false, false},
        {"losses", BT, 4, false, false},
        {"scratch", BT * std::max(C, QKV), 4, false, false},  // the q, k, v projection; each block's outputs
        {"dres", BTC, 4, false, false},
        {"dbig", BT * std::max(2 * F, 3 * C), 4, false, false},  // d gate/up, then d qkv3
        {"dsmall", BT * std::max(C, F), 4, false, false},        // d swi, then a norm's output gradient
        {"datt", ATT, 4, false, false},
        {"datty", BTC, 4, false, false},
        {"delta", STAT, 4, false, false},
    };
}

size_t buffer_bytes(const std::vector<GptBuffer>& list) {
    size_t bytes = 0;
    for (const GptBuffer& b : list) bytes += b.count * (size_t)b.value_bytes;
    return bytes;
}

} // namespace dptrain
