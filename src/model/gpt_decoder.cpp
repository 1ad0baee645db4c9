// GptDecoder: the key/value cache and one forward of n rows of any sequences a call; the CPU twin
// of src/backend/cuda/gpt_decoder.cpp.
// Not for: training's forward and backward (gpt.cpp).
#include "dptrain/model/gpt_decoder.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/error.h"

#include <stdexcept>

namespace dptrain {

GptDecoder::GptDecoder(const GptConfig& cfg, Precision weights)
    : CpuDecoder(Gpt::count_params(cfg), 4 * (size_t)cfg.n_embd * cfg.n_embd, weights), cfg_(cfg) {
    cfg_.flash_attention = false;  // training's choices: decoding has its own attention
    cfg_.recompute = Recompute::none;
    const Gpt layout(cfg_, 0);
    wte_ = layout.layout().find("wte").offset;
    wpe_ = layout.layout().find("wpe").offset;
    lnfw_ = layout.layout().find("lnf.weight").offset;
    lnfb_ = layout.layout().find("lnf.bias").offset;
    lv_ = layout.layer_views();
}

void GptDecoder::reserve(int slots, int max_rows) {
    const size_t T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer;
    if (slots <= 0 || max_rows <= 0) throw std::invalid_argument("GptDecoder::reserve: slots and rows must be positive");
    kcache_.assign(L * slots * T * C, 0.0f);
    vcache_.assign(L * slots * T * C, 0.0f);
    const size_t R = max_rows;
    x_.resize(R * C);
    ln_.resize(R * C);
    qkv_.resize(R * 3 * C);
    y_.resize(R * C);
    fc_.resize(R * 4 * C);
    mean_.resize(R);
    rstd_.resize(R);
    prompts_.reserve(max_rows / kDecodePromptRows + 1);
    slots_ = slots;
    rows_ = max_rows;
}

void GptDecoder::decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows,
                        int n_out) {
    const int T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head, V = cfg_.vocab_size;
    begin_call(tok, slot, pos, n, V, T);
    float *x = x_.data(), *ln = ln_.data(), *y = y_.data(), *fc = fc_.data(), *qkv = qkv_.data();
    float *mean = mean_.data(), *rstd = rstd_.data();
    const float* P = params_;
    cpu::encoder_decode(x, tok, pos, P + wte_, P + wpe_, n, C);
    const size_t layer_cache = (size_t)slots_ * T * C;
    for (int l = 0; l < L; ++l) {
        const Gpt::LayerViews& v = lv_[l];
        cpu::layernorm_forward(ln, mean, rstd, x, P + v.ln1w, P + v.ln1b, n, C);
        product(qkv, ln, v.qkvw, P + v.qkvb, n, C, 3 * C);
        cpu::attention_decode(y, kcache_.data() + l * layer_cache, vcache_.data() + l * layer_cache, qkv, slot, pos, n,
                              T, C, NH);
        product(ln, y, v.attprojw, P + v.attprojb, n, C, C);
        cpu::residual_forward(x, x, ln, (long)n * C);
        cpu::layernorm_forward(ln, mean, rstd, x, P + v.ln2w, P + v.ln2b, n, C);
        product(fc, ln, v.fcw, P + v.fcb, n, C, 4 * C);
        cpu::gelu_forward(fc, fc, 4L * n * C);
        product(ln, fc, v.fcprojw, P + v.fcprojb, n, 4 * C, C);
        cpu::residual_forward(x, x, ln, (long)n * C);
    }
    cpu::layernorm_forward(ln, mean, rstd, x, P + lnfw_, P + lnfb_, n, C);
    head(logits, ln, y, n, out_rows, n_out, wte_, C, V);
}

} // namespace dptrain
