// Gpt's incremental decoding (generate, serve): the key/value cache, one forward of n rows of any
// sequences a call, and the products' rule that keeps a row's bits the same alone or batched
// (decode_product); fp32 weights, or a bf16 copy of them. The CPU twin of
// src/backend/cuda/gpt_decode.cpp. Not for: training's forward and backward (gpt.cpp), or choosing
// which rows to decode (app/completions.cpp).
#include "dptrain/model/gpt.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/error.h"

#include <cstring>
#include <stdexcept>

namespace dptrain {

void Gpt::reserve_decode(int slots, int max_rows) {
    const size_t T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer;
    if (slots <= 0 || max_rows <= 0) throw std::invalid_argument("Gpt::reserve_decode: slots and rows must be positive");
    kcache_.assign(L * slots * T * C, 0.0f);
    vcache_.assign(L * slots * T * C, 0.0f);
    const size_t R = max_rows;
    dec_x_.resize(R * C);
    dec_ln_.resize(R * C);
    dec_qkv_.resize(R * 3 * C);
    dec_y_.resize(R * C);
    dec_fc_.resize(R * 4 * C);
    dec_mean_.resize(R);
    dec_rstd_.resize(R);
    dec_prompts_.reserve(max_rows / kDecodePromptRows + 1);
    dec_slots_ = slots;
    dec_rows_ = max_rows;
}

void Gpt::set_decode_weights(const bf16* weights) {
    dec_w16_ = weights;
    dec_wide_.assign(weights ? 4 * (size_t)cfg_.n_embd * cfg_.n_embd : 0, 0.0f);
}

// Why two products: matmul_forward_rows gives every row the same bits whatever rows share its
// call, but runs at 0.6-0.9x sgemm from 48 rows on (dptrain-bench matmul), which a long prompt's
// first call pays in every layer. sgemm's bits for a row depend on how many rows the call has, so
// a prompt of kDecodePromptRows rows or more is one call of its own: the same call alone or
// batched, as a prompt's rows always come together. Other rows, alone or among others, go row by
// row. The logits always go row by row: mostly a sequence's last row alone, and so that asking for
// fewer rows' logits does not change theirs.
// With bf16 weights: rows through the bf16 form of matmul_forward_rows (the fp32 form's bits on the
// widened weights), a prompt's sgemm on the matrix widened once a call (C x OC values, against
// its rows x C x OC products).
void Gpt::decode_product(float* out, const float* inp, const float* params, size_t w, size_t b, int n, int C,
                         int OC) {
    const float *weight = params + w, *bias = params + b;
    const bf16* w16 = dec_w16_ ? dec_w16_ + w : nullptr;
    if (w16 && !dec_prompts_.empty()) {
        from_bf16(dec_wide_.data(), w16, (size_t)OC * C);
        weight = dec_wide_.data();
    }
    auto rows = [&](int first, int count) {
        if (w16) cpu::matmul_forward_rows(out + (size_t)first * OC, inp + (size_t)first * C, w16, bias, count, C, OC);
        else cpu::matmul_forward_rows(out + (size_t)first * OC, inp + (size_t)first * C, weight, bias, count, C, OC);
    };
    int done = 0;
    for (const auto& [begin, end] : dec_prompts_) {
        rows(done, begin - done);
        cpu::matmul_forward(out + (size_t)begin * OC, inp + (size_t)begin * C, weight, bias, end - begin, C, OC);
        done = end;
    }
    rows(done, n - done);
}

void Gpt::decode_logits(float* logits, const float* rows, const float* params, int m) const {
    const int C = cfg_.n_embd, V = cfg_.vocab_size;
    if (dec_w16_) cpu::matmul_forward_rows(logits, rows, dec_w16_ + wte_, nullptr, m, C, V);
    else cpu::matmul_forward_rows(logits, rows, params + wte_, nullptr, m, C, V);
}

void Gpt::prompt_runs(const int* slot, int n, std::vector<std::pair<int, int>>& runs) {
    runs.clear();
    for (int begin = 0, end; begin < n; begin = end) {
        for (end = begin + 1; end < n && slot[end] == slot[begin];) ++end;
        if (end - begin >= kDecodePromptRows) runs.emplace_back(begin, end);
    }
}

void Gpt::decode(const float* params, const int* tok, const int* slot, const int* pos, int n, float* logits,
                 const int* out_rows, int n_out) {
    const int T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head, V = cfg_.vocab_size;
    if (n > dec_rows_) throw std::invalid_argument("Gpt::decode: more rows than reserve_decode allowed");
    float *x = dec_x_.data(), *ln = dec_ln_.data(), *y = dec_y_.data(), *fc = dec_fc_.data(), *qkv = dec_qkv_.data();
    float *mean = dec_mean_.data(), *rstd = dec_rstd_.data();
    for (int i = 0; i < n; ++i) {
        if (tok[i] < 0 || tok[i] >= V) throw UserError(strfmt("token %d outside the model's vocabulary of %d", tok[i], V));
        if (slot[i] < 0 || slot[i] >= dec_slots_ || pos[i] < 0 || pos[i] >= T)
            throw std::invalid_argument("Gpt::decode: slot or position out of range");
    }
    prompt_runs(slot, n, dec_prompts_);
    cpu::encoder_decode(x, tok, pos, params + wte_, params + wpe_, n, C);
    const size_t layer_cache = (size_t)dec_slots_ * T * C;
    for (int l = 0; l < L; ++l) {
        const LayerViews& v = lv_[l];
        cpu::layernorm_forward(ln, mean, rstd, x, params + v.ln1w, params + v.ln1b, n, C);
        decode_product(qkv, ln, params, v.qkvw, v.qkvb, n, C, 3 * C);
        cpu::attention_decode(y, kcache_.data() + l * layer_cache, vcache_.data() + l * layer_cache, qkv, slot, pos, n,
                              T, C, NH);
        decode_product(ln, y, params, v.attprojw, v.attprojb, n, C, C);
        cpu::residual_forward(x, x, ln, (long)n * C);
        cpu::layernorm_forward(ln, mean, rstd, x, params + v.ln2w, params + v.ln2b, n, C);
        decode_product(fc, ln, params, v.fcw, v.fcb, n, C, 4 * C);
        cpu::gelu_forward(fc, fc, 4L * n * C);
        decode_product(ln, fc, params, v.fcprojw, v.fcprojb, n, 4 * C, C);
        cpu::residual_forward(x, x, ln, (long)n * C);
    }
    cpu::layernorm_forward(ln, mean, rstd, x, params + lnfw_, params + lnfb_, n, C);
    if (!out_rows) {
        decode_logits(logits, ln, params, n);
        return;
    }
    if (n_out < 0 || n_out > n) throw std::invalid_argument("Gpt::decode: n_out outside 0..n");
    for (int r = 0; r < n_out; ++r) {
        if (out_rows[r] < 0 || out_rows[r] >= n) throw std::invalid_argument("Gpt::decode: out_rows out of range");
        std::memcpy(y + (size_t)r * C, ln + (size_t)out_rows[r] * C, C * sizeof(float));
    }
    decode_logits(logits, y, params, n_out);
}

} // namespace dptrain
