// CudaGpt's forward: Gpt::forward's ops as CUDA twins in the same order on one stream, cut as the
// CPU's so --recompute can rerun block_forward or attention_fwd.
// Not for: backward (gpt.cpp) or incremental decoding (gpt_decoder.cpp).
#include "dptrain/backend/cuda/gpt.h"

#include "check.h"
#include "operands.h"
#include "dptrain/core/error.h"

namespace dptrain {

using cuda::as_bf16;

void CudaGpt::stage(const ModelBatch& in) {
    if (in.B <= 0 || in.B > max_batch_ || in.stride < cfg_.block_size + 1) return;  // forward refuses it
    const cuda::InputSlots::Part rows = cuda::token_rows(in, cfg_.block_size);
    input_->stage(&rows, in.B);
}

// In bf16 out is the next matmul's input, written rounded for it and its backward.
void CudaGpt::layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, size_t w, size_t b, long BT) {
    const int C = cfg_.n_embd;
    const float* P = params_;
    cudaStream_t s = ctx_->stream();
    ev_->timed(OpKind::layernorm, s, [&] {
        if (mm_->is_bf16()) cuda::layernorm_forward_bf16(as_bf16(out), mean, rstd, inp, P + w, P + b, BT, C, s);
        else cuda::layernorm_forward(out, mean, rstd, inp, P + w, P + b, BT, C, s);
    });
}

// Each residual add runs inside the LayerNorm after it, as on the CPU: one pass saved.
void CudaGpt::residual_layernorm_fwd(float* res, float* out, float* mean, float* rstd, const float* a, const float* b,
                                     size_t w, size_t bias, long BT) {
    const int C = cfg_.n_embd;
    const float* P = params_;
    cudaStream_t s = ctx_->stream();
    ev_->timed(OpKind::layernorm, s, [&] {
        if (mm_->is_bf16())
            cuda::residual_layernorm_forward_bf16(res, as_bf16(out), mean, rstd, a, b, P + w, P + bias, BT, C, s);
        else cuda::residual_layernorm_forward(res, out, mean, rstd, a, b, P + w, P + bias, BT, C, s);
    });
}

void CudaGpt::matmul_fwd(float* out, const float* inp, size_t w, const float* bias, int IC, int OC, long BT) {
    cudaStream_t s = ctx_->stream();
    ev_->timed(OpKind::matmul, s, [&] {
        if (mm_->is_bf16()) mm_->forward_rounded(out, as_bf16(inp), w, bias, (int)BT, IC, OC, *ctx_, s);
        else mm_->forward(out, inp, params_, w, bias, (int)BT, IC, OC, *ctx_, s);
    });
}

// Flash in bf16 writes the output only rounded, into out16: the projection and backward take it so.
void CudaGpt::attention_fwd(int l, int B, float* out, bf16* out16) {
    const int T = cfg_.block_size, C = cfg_.n_embd, NH = cfg_.n_head;
    const size_t sBTC = (size_t)max_batch_ * T * C;
    const size_t sATT = (size_t)max_batch_ * NH * T * T, sSTAT = (size_t)max_batch_ * NH * T;
    const bool flash16 = mm_->is_bf16() && cfg_.flash_attention;
    const float* qkv = slot(qkv_, kept(l), 3 * sBTC, flash16);
    const size_t a = kept_att(l);
    cudaStream_t s = ctx_->stream();
    ev_->timed(OpKind::attention, s, [&] {
        if (flash16)
            cuda::flash_attention_forward_bf16(nullptr, out16, lse_ + a * sSTAT, as_bf16(qkv), B, T, C, NH, s);
        else if (cfg_.flash_attention) cuda::flash_attention_forward(out, lse_ + a * sSTAT, qkv, B, T, C, NH, s);
        else cuda::attention_forward(out, att_ + a * sATT, qkv, B, T, C, NH, mm_->is_bf16(), *ctx_, s);
    });
}

// From ln1's output to GELU's, each kept in slot kept(l).
void CudaGpt::block_forward(int l, const float* residual, int B) {
    const int T = cfg_.block_size, C = cfg_.n_embd;
    const long BT = (long)B * T;
    const size_t BTC = (size_t)BT * C, sBT = (size_t)max_batch_ * T, sBTC = sBT * C, k = kept(l);
    const bool bf = mm_->is_bf16(), flash16 = bf && cfg_.flash_attention;
    const float* P = params_;
    cudaStream_t s = ctx_->stream();
    const LayerViews& v = lv_[l];
    float* ln1 = slot(ln1_, k, sBTC, bf);
    float* qkv = slot(qkv_, k, 3 * sBTC, flash16);      // bf16 only under flash (set_precision)
    float* atty = flash16 ? nullptr : atty_ + k * sBTC;  // under flash16 only atty16_ is kept
    bf16* atty16 = bf ? atty16_ + k * sBTC : nullptr;
    float* ln2 = slot(ln2_, k, sBTC, bf);
    float* fch = slot(fch_, k, 4 * sBTC, bf);
    float* fchg = slot(fch_gelu_, k, 4 * sBTC, bf);
    // Flash rounds q, k, v as it loads them, so the qkv matmul writes them rounded; dbig_ is free
    // here for the staging that may need. Why: docs/GPU.md, "Note [CudaGpt scratch]".
    if (flash16)
        ev_->timed(OpKind::matmul, s, [&] {
            mm_->forward_rounded_out16(as_bf16(qkv), as_bf16(ln1), v.qkvw, P + v.qkvb, (int)BT, C, 3 * C, dbig_, *ctx_,
                                       s);
        });
    else matmul_fwd(qkv, ln1, v.qkvw, P + v.qkvb, C, 3 * C, BT);
    attention_fwd(l, B, atty, atty16);
    ev_->timed(OpKind::matmul, s, [&] {
        if (flash16)  // atty as flash attention rounded it
            mm_->forward_rounded(scratch_, atty16, v.attprojw, P + v.attprojb, (int)BT, C, C, *ctx_, s);
        else  // bf16: atty rounded here, and kept for backward
            mm_->forward(scratch_, atty, P, v.attprojw, P + v.attprojb, (int)BT, C, C, *ctx_, s, atty16);
    });
    residual_layernorm_fwd(residual2_ + k * sBTC, ln2, ln2_mean_ + k * sBT, ln2_rstd_ + k * sBT, residual, scratch_,
                           v.ln2w, v.ln2b, BT);
    // bf16: fc and GELU as one op: GELU of fc's fp32 output, both kept rounded, as the CPU does
    // (docs/GPU.md, "GELU in the GEMM").
    if (bf) {
        ev_->timed(OpKind::matmul, s, [&] {
            mm_->forward_rounded_gelu(as_bf16(fch), as_bf16(fchg), as_bf16(ln2), v.fcw, P + v.fcb, (int)BT, C, 4 * C,
                                      dbig_, *ctx_, s);
        });
    } else {
        matmul_fwd(fch, ln2, v.fcw, P + v.fcb, C, 4 * C, BT);
        ev_->timed(OpKind::activation, s, [&] { cuda::gelu_forward(fchg, fch, 4 * (long)BTC, s); });
    }
}

// block: ln1 again from the kept input (the fused add-LayerNorm's bits). attention: the output into
// scratch_, so the kept one stays as the projection saw it.
void CudaGpt::recompute_layer(int l, const float* residual, int B) {
    const long BT = (long)B * cfg_.block_size;
    if (cfg_.recompute == Recompute::block) {
        layernorm_fwd(ln1_, ln1_mean_, ln1_rstd_, residual, lv_[l].ln1w, lv_[l].ln1b, BT);  // slot 0, shared
        block_forward(l, residual, B);
    } else if (cfg_.recompute == Recompute::attention) {
        attention_fwd(l, B, scratch_, as_bf16(scratch_));
    }
}

double CudaGpt::forward(const float* params, const ModelBatch& in, long* correct) {
    const int B = in.B, T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, V = cfg_.vocab_size;
    if (B > max_batch_) throw std::invalid_argument("CudaGpt::forward: batch larger than max_batch");
    if (B == 0) {
        last_B_ = 0;
        return 0.0;
    }
    if (in.stride < T + 1) throw std::invalid_argument("CudaGpt::forward: token rows shorter than T + 1");
    // Gpt::forward's checks, order and messages, before anything is queued.
    for (int pass = 0; pass < 2; ++pass)
        for (int b = 0; b < B; ++b)
            for (int t = 0; t < T; ++t) {
                int tok = in.tokens[(long)b * in.stride + t + (pass == 0 ? 1 : 0)];
                if (tok < 0 || tok >= V)
                    throw UserError(strfmt("token %d outside the model's vocabulary of %d", tok, V));
                if (pass == 0) host_targets_[(long)b * T + t] = tok;
            }
    const long BT = (long)B * T;
    const size_t sBT = (size_t)max_batch_ * T, sBTC = sBT * C;
    cudaStream_t s = ctx_->stream();
    if (!resident_) {
        ev_->timed(OpKind::copy, s, [&] {
            CUDA_CHECK(cudaMemcpyAsync(params_, params, host_.num_params() * sizeof(float), cudaMemcpyHostToDevice, s));
        });
        mm_->set_current(false);  // the host's parameters: rounded below, whatever an update wrote
    }
    ev_->timed(OpKind::copy, s, [&] { tokens_ = cuda::take_windows(*input_, in, T, targets_, s); });
    const float* P = params_;
    if (mm_->is_bf16()) ev_->timed(OpKind::matmul, s, [&] { mm_->begin(P, s); });
    ev_->timed(OpKind::encoder, s,
               [&] { cuda::encoder_forward(encoded_, tokens_, T + 1, P + wte_, P + wpe_, B, T, C, s); });
    CUDA_REQUIRE(precision_set_);  // the kept activations are sized for mm_'s precision
    const bool bf = mm_->is_bf16();
    if (L > 0) layernorm_fwd(ln1_, ln1_mean_, ln1_rstd_, encoded_, lv_[0].ln1w, lv_[0].ln1b, BT);
    else layernorm_fwd(lnf_, lnf_mean_, lnf_rstd_, encoded_, lnfw_, lnfb_, BT);
    const float* residual = encoded_;
    for (int l = 0; l < L; ++l) {
        const LayerViews& v = lv_[l];
        const size_t k = kept(l), next = kept(l + 1);
        float* res3 = residual3_ + l * sBTC;
        block_forward(l, residual, B);
        matmul_fwd(scratch_, slot(fch_gelu_, k, 4 * sBTC, bf), v.fcprojw, P + v.fcprojb, 4 * C, C, BT);
        const float* res2 = residual2_ + k * sBTC;
        if (l + 1 < L)
            residual_layernorm_fwd(res3, slot(ln1_, next, sBTC, bf), ln1_mean_ + next * sBT, ln1_rstd_ + next * sBT,
                                   res2, scratch_, lv_[l + 1].ln1w, lv_[l + 1].ln1b, BT);
        else residual_layernorm_fwd(res3, lnf_, lnf_mean_, lnf_rstd_, res2, scratch_, lnfw_, lnfb_, BT);
        residual = res3;
    }
    return head_forward(B, correct);
}

// Classifier and loss; the losses (and argmax) read back and summed on the host.
double CudaGpt::head_forward(int B, long* correct) {
    const int T = cfg_.block_size, C = cfg_.n_embd, V = cfg_.vocab_size;
    const long BT = (long)B * T;
    cudaStream_t s = ctx_->stream();
    // bf16: logits rounded (as the CPU and autocast keep them), rows of logits_stride values.
    const int Vs = logits_stride(precision_);
    const bool bf = mm_->is_bf16();
    if (bf)
        ev_->timed(OpKind::matmul, s, [&] {
            mm_->forward_rounded_out16(as_bf16(logits_), as_bf16(lnf_), wte_, nullptr, (int)BT, C, V, nullptr, *ctx_,
                                       s, Vs);
        });
    else matmul_fwd(logits_, lnf_, wte_, nullptr, C, V, BT);
    ev_->timed(OpKind::crossentropy, s, [&] {
        int* arg = correct ? argmax_ : nullptr;
        if (bf)
            cuda::softmax_crossentropy_forward_bf16(losses_, ce_stats_, arg, as_bf16(logits_), targets_, (int)BT, V, Vs,
                                                    s);
        else cuda::softmax_crossentropy_forward(losses_, ce_stats_, arg, logits_, targets_, (int)BT, V, s);
    });
    const double sum = readback_->read(losses_, argmax_, host_targets_.data(), BT, correct, s, *ev_);
    last_B_ = B;
    return sum;
}

} // namespace dptrain
