// CpuDecoder (cpu_decoder.h): the products and the head of the CPU's decoders.
#include "dptrain/model/cpu_decoder.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/error.h"

#include <cstring>
#include <stdexcept>

namespace dptrain {

CpuDecoder::CpuDecoder(size_t num_params, size_t widest, Precision weights) {
    if (weights == Precision::bf16) {
        w16_.resize(num_params);
        wide_.assign(widest, 0.0f);
    }
}

void CpuDecoder::set_params(const float* params) {
    params_ = params;
    if (!w16_.empty()) to_bf16(w16_.data(), params, w16_.size());
}

void CpuDecoder::begin_call(const int* tok, const int* slot, const int* pos, int n, int V, int T) {
    if (n > rows_) throw std::invalid_argument("decode: more rows than reserve allowed");
    if (!params_) throw std::logic_error("decode: no parameters (set_params first)");
    for (int i = 0; i < n; ++i) {
        if (tok[i] < 0 || tok[i] >= V) throw UserError(strfmt("token %d outside the model's vocabulary of %d", tok[i], V));
        if (slot[i] < 0 || slot[i] >= slots_ || pos[i] < 0 || pos[i] >= T)
            throw std::invalid_argument("decode: slot or position out of range");
    }
    decode_prompt_runs(slot, n, prompts_);
}

// Rows through matmul_forward_rows, a prompt's run through one sgemm of its own (bf16: on the
// matrix widened once a call). Why: docs/SERVING.md, "Note [decode products]".
void CpuDecoder::product(float* out, const float* inp, size_t w, const float* bias, int n, int C, int OC) {
    const float* weight = params_ + w;
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

void CpuDecoder::head(float* logits, const float* normed, float* spare, int n, const int* out_rows, int n_out,
                      size_t head, int C, int V) const {
    const float* rows = normed;
    int m = n;
    if (out_rows) {
        if (n_out < 0 || n_out > n) throw std::invalid_argument("decode: n_out outside 0..n");
        for (int r = 0; r < n_out; ++r) {
            if (out_rows[r] < 0 || out_rows[r] >= n) throw std::invalid_argument("decode: out_rows out of range");
            std::memcpy(spare + (size_t)r * C, normed + (size_t)out_rows[r] * C, C * sizeof(float));
        }
        rows = spare;
        m = n_out;
    }
    if (!w16_.empty()) cpu::matmul_forward_rows(logits, rows, w16_.data() + head, nullptr, m, C, V);
    else cpu::matmul_forward_rows(logits, rows, params_ + head, nullptr, m, C, V);
}

} // namespace dptrain
