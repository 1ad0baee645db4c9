// CudaLlama's forward: the CPU Llama's ops as CUDA twins in the same order on one stream, cut as
// the CPU's so --recompute can rerun block_forward or attention.
// Not for: backward (llama.cpp) or decoding (the CPU's LlamaDecoder).
#include "dptrain/backend/cuda/llama.h"

#include "check.h"
#include "operands.h"
#include "dptrain/core/error.h"

#include <stdexcept>

namespace dptrain {

void CudaLlama::stage(const ModelBatch& in) {
    if (in.B <= 0 || in.B > max_batch_ || in.stride < cfg_.block_size + 1) return;  // forward refuses it
    const cuda::InputSlots::Part rows = cuda::token_rows(in, cfg_.block_size);
    input_->stage(&rows, in.B);
}

void CudaLlama::matmul_fwd(float* out, const float* inp, size_t w, int IC, int OC, long BT, bool out16) {
    cudaStream_t s = ctx_->stream();
    ev_->timed(OpKind::matmul, s, [&] {
        mm_->forward(out, inp, params_, w, nullptr, (int)BT, IC, OC, *ctx_, s);
        if (out16 && mm_->is_bf16()) cuda::round_bf16(out, out, (size_t)BT * OC, s);
    });
}

// Causal attention of layer l's kept q, k, v into out; flash keeps lse, else att the softmax.
void CudaLlama::attention(int l, float* out, int B) {
    const int T = cfg_.block_size, C = cfg_.n_embd, NH = cfg_.n_head;
    const size_t sBTC = (size_t)max_batch_ * T * C, a = kept_att(l);
    const float* qkv = qkv3_ + kept(l) * 3 * sBTC;
    cudaStream_t s = ctx_->stream();
    ev_->timed(OpKind::attention, s, [&] {
        if (!cfg_.flash_attention)
            return cuda::attention_forward(out, att_ + a * (size_t)max_batch_ * NH * T * T, qkv, B, T, C, NH,
                                           mm_->is_bf16(), *ctx_, s);
        cuda::flash_attention_forward(out, lse_ + a * (size_t)max_batch_ * NH * T, qkv, B, T, C, NH, s);
        if (mm_->is_bf16()) cuda::round_bf16(out, out, (size_t)B * T * C, s);  // for the projection and delta
    });
}

// From ln1's output (kept(l)) to SwiGLU's; the residual stream's input is residual3 of l - 1.
void CudaLlama::block_forward(int l, int B) {
    const int T = cfg_.block_size, C = cfg_.n_embd, NH = cfg_.n_head, F = cfg_.ffn_hidden;
    const long BT = (long)B * T;
    const size_t sBT = (size_t)max_batch_ * T, sBTC = sBT * C, k = kept(l);
    const Llama::LayerViews& v = lv_[l];
    cudaStream_t s = ctx_->stream();
    const float* residual = l == 0 ? encoded_ : residual3_ + (l - 1) * sBTC;
    float* ln2 = ln2_ + k * sBTC;
    float* gu = gu_ + k * 2 * F * sBT;
    float* atty = atty_ + k * sBTC;
    matmul_fwd(scratch_, ln1_ + k * sBTC, v.qkvw, C, qkv_, BT);
    ev_->timed(OpKind::attention, s, [&] {
        cuda::rope_qkv_forward(qkv3_ + k * 3 * sBTC, scratch_, rope_cos_, rope_sin_, B, T, NH, cfg_.n_kv_head, hs_, s);
    });
    attention(l, atty, B);
    matmul_fwd(scratch_, atty, v.attprojw, C, C, BT);
    ev_->timed(OpKind::layernorm, s, [&] {
        cuda::residual_rmsnorm_forward(residual2_ + k * sBTC, ln2, ln2_rstd_ + k * sBT, residual, scratch_,
                                       params_ + v.ln2w, BT, C, cfg_.norm_eps, s);
    });
    // SwiGLU of the fp32 gate and up, which bf16 then keeps rounded for backward (as the CPU).
    matmul_fwd(gu, ln2, v.gateupw, C, 2 * F, BT);
    ev_->timed(OpKind::activation, s, [&] {
        cuda::swiglu_forward(swi_ + k * F * sBT, gu, BT, F, s);
        if (mm_->is_bf16()) cuda::round_bf16(gu, gu, (size_t)2 * F * BT, s);
    });
}

// block: everything from the kept input, ln1 included. attention: the softmax (flash: lse) again,
// the output into scratch_ so the kept one stays as the projection saw it.
void CudaLlama::recompute_layer(int l, const float* residual, int B) {
    const long BT = (long)B * cfg_.block_size;
    cudaStream_t s = ctx_->stream();
    if (cfg_.recompute == Recompute::block) {
        ev_->timed(OpKind::layernorm, s, [&] {
            cuda::rmsnorm_forward(ln1_, ln1_rstd_, residual, params_ + lv_[l].ln1w, BT, cfg_.n_embd, cfg_.norm_eps, s);
        });
        block_forward(l, B);
    } else if (cfg_.recompute == Recompute::attention) {
        attention(l, scratch_, B);
    }
}

double CudaLlama::forward(const float* params, const ModelBatch& in, long* correct) {
    const int B = in.B, T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, V = cfg_.vocab_size;
    const float eps = cfg_.norm_eps;
    if (B > max_batch_) throw std::invalid_argument("CudaLlama::forward: batch larger than max_batch");
    if (B == 0) {
        last_B_ = 0;
        return 0.0;
    }
    if (in.stride < T + 1) throw std::invalid_argument("CudaLlama::forward: token rows shorter than T + 1");
    lm_targets(in, T, V, host_targets_.data());  // Llama::forward's checks, before anything is queued
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
    CUDA_REQUIRE(precision_set_);
    const float* P = params_;
    if (mm_->is_bf16()) ev_->timed(OpKind::matmul, s, [&] { mm_->begin(P, s); });
    ev_->timed(OpKind::encoder, s,
               [&] { cuda::encoder_forward(encoded_, tokens_, T + 1, P + wte_, nullptr, B, T, C, s); });
    ev_->timed(OpKind::layernorm, s,  // layer 0's norm; later ones run with the residual add before them
               [&] { cuda::rmsnorm_forward(ln1_, ln1_rstd_, encoded_, P + lv_[0].ln1w, BT, C, eps, s); });
    for (int l = 0; l < L; ++l) {
        const size_t k = kept(l), next = kept(l + 1);
        block_forward(l, B);
        matmul_fwd(scratch_, swi_ + k * cfg_.ffn_hidden * sBT, lv_[l].fcprojw, cfg_.ffn_hidden, C, BT);
        const bool last = l + 1 == L;
        ev_->timed(OpKind::layernorm, s, [&] {
            cuda::residual_rmsnorm_forward(residual3_ + l * sBTC, last ? lnf_ : ln1_ + next * sBTC,
                                           last ? lnf_rstd_ : ln1_rstd_ + next * sBT, residual2_ + k * sBTC, scratch_,
                                           P + (last ? lnfw_ : lv_[l + 1].ln1w), BT, C, eps, s);
        });
    }
    return head_forward(B, correct);
}

// The head (logits rounded in bf16, as the CPU keeps them) and the loss; the losses (and argmax)
// read back and summed on the host.
double CudaLlama::head_forward(int B, long* correct) {
    const int T = cfg_.block_size, C = cfg_.n_embd, V = cfg_.vocab_size;
    const long BT = (long)B * T;
    cudaStream_t s = ctx_->stream();
    matmul_fwd(logits_, lnf_, head_, C, V, BT, true);
    ev_->timed(OpKind::crossentropy, s, [&] {
        cuda::softmax_crossentropy_forward(losses_, ce_stats_, correct ? argmax_ : nullptr, logits_, targets_, (int)BT,
                                           V, s);
    });
    const double sum = readback_->read(losses_, argmax_, host_targets_.data(), BT, correct, s, *ev_);
    last_B_ = B;
    return sum;
}

} // namespace dptrain
