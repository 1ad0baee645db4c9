// GptDecoder: the key/value cache and one forward of n rows of any sequences a call; the CPU twin
// of src/backend/cuda/gpt_decoder.cpp.
// Not for: training's forward and backward (gpt.cpp).
#include "dptrain/model/gpt_decoder.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/error.h"

#include <cstring>
#include <stdexcept>

namespace dptrain {

GptDecoder::GptDecoder(const GptConfig& cfg, Precision weights) : cfg_(cfg) {
    cfg_.flash_attention = false;  // training's choices: decoding has its own attention
    cfg_.recompute = Recompute::none;
    const Gpt layout(cfg_, 0);
    wte_ = layout.layout().find("wte").offset;
    wpe_ = layout.layout().find("wpe").offset;
    lnfw_ = layout.layout().find("lnf.weight").offset;
    lnfb_ = layout.layout().find("lnf.bias").offset;
    lv_ = layout.layer_views();
    if (weights == Precision::bf16) {
        w16_.resize(layout.num_params());
        wide_.assign(4 * (size_t)cfg_.n_embd * cfg_.n_embd, 0.0f);
    }
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

void GptDecoder::set_params(const float* params) {
    params_ = params;
    if (!w16_.empty()) to_bf16(w16_.data(), params, w16_.size());
}

// Rows through matmul_forward_rows, a prompt's run through one sgemm of its own (bf16: on the
// matrix widened once a call). Why: docs/SERVING.md, "Note [decode products]".
void GptDecoder::product(float* out, const float* inp, size_t w, size_t b, int n, int C, int OC) {
    const float *weight = params_ + w, *bias = params_ + b;
    const bf16* w16 = w16_.empty() ? nullptr : w16_.data() + w;
    if (w16 && !prompts_.empty()) {
        from_bf16(wide_.data(), w16, (size_t)OC * C);
        weight = wide_.data();
    }
    auto rows = [&](int first, int count) {
        if (w16) cpu::matmul_forward_rows(out + (size_t)first * OC, inp + (size_t)first * C, w16, bias, count, C, OC);
        else cpu::matmul_forward_rows(out + (size_t)first * OC, inp + (size_t)first * C, weight, bias, count, C, OC);
    };
    int done = 0;
    for (const auto& [begin, end] : prompts_) {
        rows(done, begin - done);
        cpu::matmul_forward(out + (size_t)begin * OC, inp + (size_t)begin * C, weight, bias, end - begin, C, OC);
        done = end;
    }
    rows(done, n - done);
}

void GptDecoder::head(float* logits, const float* rows, int m) const {
    const int C = cfg_.n_embd, V = cfg_.vocab_size;
    if (!w16_.empty()) cpu::matmul_forward_rows(logits, rows, w16_.data() + wte_, nullptr, m, C, V);
    else cpu::matmul_forward_rows(logits, rows, params_ + wte_, nullptr, m, C, V);
}

void GptDecoder::decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows,
                        int n_out) {
    const int T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head, V = cfg_.vocab_size;
    if (n > rows_) throw std::invalid_argument("GptDecoder::decode: more rows than reserve allowed");
    if (!params_) throw std::logic_error("GptDecoder::decode: no parameters (set_params first)");
    float *x = x_.data(), *ln = ln_.data(), *y = y_.data(), *fc = fc_.data(), *qkv = qkv_.data();
    float *mean = mean_.data(), *rstd = rstd_.data();
    for (int i = 0; i < n; ++i) {
        if (tok[i] < 0 || tok[i] >= V) throw UserError(strfmt("token %d outside the model's vocabulary of %d", tok[i], V));
        if (slot[i] < 0 || slot[i] >= slots_ || pos[i] < 0 || pos[i] >= T)
            throw std::invalid_argument("GptDecoder::decode: slot or position out of range");
    }
    decode_prompt_runs(slot, n, prompts_);
    const float* P = params_;
    cpu::encoder_decode(x, tok, pos, P + wte_, P + wpe_, n, C);
    const size_t layer_cache = (size_t)slots_ * T * C;
    for (int l = 0; l < L; ++l) {
        const Gpt::LayerViews& v = lv_[l];
        cpu::layernorm_forward(ln, mean, rstd, x, P + v.ln1w, P + v.ln1b, n, C);
        product(qkv, ln, v.qkvw, v.qkvb, n, C, 3 * C);
        cpu::attention_decode(y, kcache_.data() + l * layer_cache, vcache_.data() + l * layer_cache, qkv, slot, pos, n,
                              T, C, NH);
        product(ln, y, v.attprojw, v.attprojb, n, C, C);
        cpu::residual_forward(x, x, ln, (long)n * C);
        cpu::layernorm_forward(ln, mean, rstd, x, P + v.ln2w, P + v.ln2b, n, C);
        product(fc, ln, v.fcw, v.fcb, n, C, 4 * C);
        cpu::gelu_forward(fc, fc, 4L * n * C);
        product(ln, fc, v.fcprojw, v.fcprojb, n, 4 * C, C);
        cpu::residual_forward(x, x, ln, (long)n * C);
    }
    cpu::layernorm_forward(ln, mean, rstd, x, P + lnfw_, P + lnfb_, n, C);
    if (!out_rows) {
        head(logits, ln, n);
        return;
    }
    if (n_out < 0 || n_out > n) throw std::invalid_argument("GptDecoder::decode: n_out outside 0..n");
    for (int r = 0; r < n_out; ++r) {
        if (out_rows[r] < 0 || out_rows[r] >= n) throw std::invalid_argument("GptDecoder::decode: out_rows out of range");
        std::memcpy(y + (size_t)r * C, ln + (size_t)out_rows[r] * C, C * sizeof(float));
    }
    head(logits, y, n_out);
}

} // namespace dptrain
