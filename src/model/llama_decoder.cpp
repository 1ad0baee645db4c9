// LlamaDecoder: the key/value cache and one forward of n rows of any sequences a call.
// Not for: training's forward and backward (llama.cpp).
#include "dptrain/model/llama_decoder.h"

#include "dptrain/backend/cpu/ops.h"

#include <algorithm>
#include <stdexcept>

namespace dptrain {

LlamaDecoder::LlamaDecoder(const GptConfig& cfg, Precision weights)
    : CpuDecoder(Llama::count_params(cfg), llama_widest_matrix(llama_resolved(cfg)), weights), cfg_(llama_resolved(cfg)) {
    cfg_.flash_attention = false;  // training's choices: decoding has its own attention
    cfg_.recompute = Recompute::none;
    const Llama layout(cfg_, 0);
    hs_ = cfg_.n_embd / cfg_.n_head;
    qkv_w_ = (cfg_.n_head + 2 * cfg_.n_kv_head) * hs_;
    wte_ = layout.wte();
    lnfw_ = layout.lnf();
    head_ = layout.head();
    lv_ = layout.layer_views();
    cos_.resize((size_t)cfg_.block_size * hs_ / 2);
    sin_.resize(cos_.size());
    llama_rope_table(cfg_, cos_.data(), sin_.data());
}

void LlamaDecoder::reserve(int slots, int max_rows) {
    const size_t T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, KVC = (size_t)cfg_.n_kv_head * hs_;
    if (slots <= 0 || max_rows <= 0) throw std::invalid_argument("LlamaDecoder::reserve: slots and rows must be positive");
    kcache_.assign(L * slots * T * KVC, 0.0f);
    vcache_.assign(L * slots * T * KVC, 0.0f);
    const size_t R = max_rows, F = cfg_.ffn_hidden;
    x_.resize(R * C);
    ln_.resize(R * C);
    y_.resize(R * C);
    qkv_.resize(R * qkv_w_);
    gu_.resize(R * 2 * F);
    swi_.resize(R * F);
    rstd_.resize(R);
    prompts_.reserve(max_rows / kDecodePromptRows + 1);
    slots_ = slots;
    rows_ = max_rows;
}

void LlamaDecoder::decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows,
                          int n_out) {
    const int T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head, KV = cfg_.n_kv_head;
    const int V = cfg_.vocab_size, F = cfg_.ffn_hidden;
    const float eps = cfg_.norm_eps;
    begin_call(tok, slot, pos, n, V, T);
    float *x = x_.data(), *ln = ln_.data(), *y = y_.data(), *qkv = qkv_.data(), *rstd = rstd_.data();
    const float* P = params_;
    cpu::encoder_decode(x, tok, pos, P + wte_, nullptr, n, C);
    const size_t layer_cache = (size_t)slots_ * T * KV * hs_;
    for (int l = 0; l < L; ++l) {
        const Llama::LayerViews& v = lv_[l];
        cpu::rmsnorm_forward(ln, rstd, x, P + v.ln1w, n, C, eps);
        product(qkv, ln, v.qkvw, nullptr, n, C, qkv_w_);
        cpu::rope_decode(qkv, pos, cos_.data(), sin_.data(), n, NH, KV, hs_);
        cpu::attention_decode_grouped(y, kcache_.data() + l * layer_cache, vcache_.data() + l * layer_cache, qkv, slot,
                                      pos, n, T, NH, KV, hs_);
        product(ln, y, v.attprojw, nullptr, n, C, C);
        cpu::residual_forward(x, x, ln, (long)n * C);
        cpu::rmsnorm_forward(ln, rstd, x, P + v.ln2w, n, C, eps);
        product(gu_.data(), ln, v.gateupw, nullptr, n, C, 2 * F);
        cpu::swiglu_forward(swi_.data(), gu_.data(), n, F);
        product(ln, swi_.data(), v.fcprojw, nullptr, n, F, C);
        cpu::residual_forward(x, x, ln, (long)n * C);
    }
    cpu::rmsnorm_forward(ln, rstd, x, P + lnfw_, n, C, eps);
    head(logits, ln, y, n, out_rows, n_out, head_, C, V);
}

} // namespace dptrain
