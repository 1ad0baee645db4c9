// CudaGpt's device buffers (sized for --precision and --recompute) and backward: Gpt's ops as CUDA
// twins, in the CPU's order on one stream. Not for: forward (gpt_forward.cpp).
#include "dptrain/backend/cuda/gpt.h"

#include "check.h"
#include "operands.h"
#include "dptrain/core/error.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

CudaGpt::CudaGpt(const GptConfig& cfg, int max_batch, int device, Precision precision)
    : host_(cfg, 0), cfg_(cfg), max_batch_(max_batch), ctx_(std::make_unique<cuda::Context>(device)),
      mm_(std::make_unique<cuda::Matmuls>()), host_grads_(std::make_unique<cuda::HostGradients>()),
      readback_(std::make_unique<cuda::LossReadback>()), ev_(std::make_unique<cuda::OpEvents>()) {
    if (max_batch < 1) throw std::invalid_argument("CudaGpt: max_batch must be positive (decoding: CudaGptDecoder)");
    const ParamLayout& lay = host_.layout();
    wte_ = lay.find("wte").offset;
    wpe_ = lay.find("wpe").offset;
    lnfw_ = lay.find("lnf.weight").offset;
    lnfb_ = lay.find("lnf.bias").offset;
    lv_ = host_.layer_views();
    const int T = cfg.block_size, C = cfg.n_embd, NH = cfg.n_head;
    const size_t P = lay.total;
    const size_t BT = (size_t)max_batch * T;
    const bool flash = cfg.flash_attention;
    // Counted first, so a GPU too small gets one message with the whole need.
    std::vector<std::pair<void**, size_t>> plan = {{(void**)&params_, P}, {(void**)&grads_, P}};
    for (const GptBuffer& b : gpt_buffers(cfg, max_batch, precision, BufferDevice::gpu))
        if (!b.by_precision) plan.push_back({field(b.name), b.count});
    const size_t token_rows = (size_t)max_batch * (T + 1);  // two slots of them (InputSlots)
    // set_precision's share too, so one message names the whole need (it checks again).
    const size_t grad = BT * std::max<size_t>(4 * C, (size_t)logits_stride(Precision::bf16));
    double need = 4.0 * 2.0 * (double)token_rows + kept_bytes(precision);
    if (precision == Precision::bf16) need += (double)cuda::Matmuls::bytes(P, 0, grad);
    for (auto& [where, n] : plan) {
        need += 4.0 * (double)n;
        if (where != (void**)&params_ && where != (void**)&grads_) fixed_activation_bytes_ += 4 * n;
    }
    if (flash) cuda::require_flash_fits(C, NH, device);
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const double GiB = 1073741824.0;
    const std::string what = strfmt("GPT on GPU %d needs %.2f GiB of device memory (%.2f GiB of it activations for "
                                    "--batch-size %d x --block-size %d), and %.2f GiB of %.2f GiB are free",
                                    device, need / GiB, (need - 8.0 * (double)P) / GiB, max_batch, T,
                                    (double)free_bytes / GiB, (double)total_bytes / GiB);
    if (need > (double)free_bytes) throw UserError(what + "; lower --batch-size (or the model size)");
    try {
        for (auto& [where, n] : plan) *where = dev(n, what, allocs_);
        const size_t row_bytes = (size_t)(T + 1) * sizeof(int);
        input_ = std::make_unique<cuda::InputSlots>(&row_bytes, 1, max_batch);
    } catch (...) {
        for (void* p : allocs_) cudaFree(p);
        allocs_.clear();
        throw;
    }
    // The widest column sums (fc's bias, 4C; LayerNorm's two) and the embedding's sort, reserved
    // now: growing it later waits for the device.
    ctx_->reduction_scratch(std::max({cuda::column_sums_scratch((long)BT, 4 * C, 1),
                                      cuda::column_sums_scratch((long)BT, C, 2),
                                      cuda::encoder_backward_scratch((long)BT)}));
    host_targets_.resize(BT);
    readback_->reserve(BT);
    try {
        set_precision(precision);
    } catch (...) {
        release();  // no destructor runs for an object whose constructor threw
        throw;
    }
}

void** CudaGpt::field(const char* name) {
    const std::pair<const char*, void**> fields[] = {
        {"targets", (void**)&targets_}, {"encoded", (void**)&encoded_}, {"ln1", (void**)&ln1_},
        {"ln1_mean", (void**)&ln1_mean_}, {"ln1_rstd", (void**)&ln1_rstd_}, {"qkv", (void**)&qkv_},
        {"atty", (void**)&atty_}, {"att", (void**)&att_}, {"lse", (void**)&lse_}, {"residual2", (void**)&residual2_},
        {"ln2", (void**)&ln2_}, {"ln2_mean", (void**)&ln2_mean_}, {"ln2_rstd", (void**)&ln2_rstd_},
        {"fch", (void**)&fch_}, {"fch_gelu", (void**)&fch_gelu_}, {"residual3", (void**)&residual3_},
        {"lnf", (void**)&lnf_}, {"lnf_mean", (void**)&lnf_mean_}, {"lnf_rstd", (void**)&lnf_rstd_},
        {"logits", (void**)&logits_}, {"ce_stats", (void**)&ce_stats_}, {"argmax", (void**)&argmax_},
        {"losses", (void**)&losses_}, {"scratch", (void**)&scratch_}, {"dres", (void**)&dres_},
        {"dbig", (void**)&dbig_}, {"dsmall", (void**)&dsmall_}, {"datt", (void**)&datt_}, {"datty", (void**)&datty_},
        {"delta", (void**)&delta_}, {"atty16", (void**)&atty16_}, {"dfc16", (void**)&dfc16_}};
    for (const auto& [n, f] : fields)
        if (std::strcmp(n, name) == 0) return f;
    throw std::logic_error(std::string("CudaGpt: no field for buffer ") + name);
}

std::vector<GptBuffer> CudaGpt::kept_plan(Precision p) const {
    std::vector<GptBuffer> kept;
    for (const GptBuffer& b : gpt_buffers(cfg_, max_batch_, p, BufferDevice::gpu))
        if (b.by_precision) kept.push_back(b);
    return kept;
}

double CudaGpt::kept_bytes(Precision p) const { return (double)buffer_bytes(kept_plan(p)); }

void CudaGpt::set_precision(Precision p) {
    if (precision_set_ && p == precision_) return;
    const size_t BT = (size_t)max_batch_ * cfg_.block_size, C = (size_t)cfg_.n_embd;
    const size_t grad = BT * std::max<size_t>(4 * C, (size_t)logits_stride(Precision::bf16));
    // Freed first, so the check below counts that memory free.
    precision_set_ = false;
    kept_activation_bytes_ = 0;
    last_B_ = -1;  // a backward now would read new buffers: it refuses without a forward first
    mm_->set(Precision::fp32, 0, 0, 0);
    for (void* q : kept_) cudaFree(q);
    kept_.clear();
    for (const GptBuffer& k : kept_plan(p)) *field(k.name) = nullptr;
    // No activation scratch: in bf16 every matmul input is written as bf16 by its producer.
    const bool bf = p == Precision::bf16;
    const double GiB = 1073741824.0;
    const double matmuls = bf ? (double)cuda::Matmuls::bytes(host_.num_params(), 0, grad) : 0.0;
    const double need = kept_bytes(p) + matmuls;
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const std::string what =
        strfmt("--precision %s on GPU %d needs %.2f GiB more device memory for the activations kept in it%s, and "
               "%.2f GiB are free",
               bf ? "bf16" : "fp32", ctx_->device(), need / GiB, bf ? " and the bf16 operands" : "",
               (double)free_bytes / GiB);
    if (need > (double)free_bytes)
        throw UserError(what + (bf ? "; lower --batch-size or use --precision fp32" : "; lower --batch-size"));
    for (const GptBuffer& k : kept_plan(p))
        *field(k.name) = dev((k.count * (size_t)k.value_bytes + 3) / 4, what, kept_);
    if (bf) mm_->set(p, host_.num_params(), 0, grad);
    precision_ = p;
    precision_set_ = true;
    kept_activation_bytes_ = (size_t)kept_bytes(p);
}

using cuda::as_bf16;

long CudaGpt::staged_batches() const { return input_->staged_hits(); }

void CudaGpt::unstage() {
    input_->drain();
}

void CudaGpt::set_op_times(OpTimes* t) { ev_->set(t); }
void CudaGpt::finish() { CUDA_CHECK(cudaStreamSynchronize(ctx_->stream())); }

bf16* CudaGpt::rounded_params() { return mm_->weights(); }

void CudaGpt::set_rounded_current(bool current) { mm_->set_current(current); }

CudaGpt::~CudaGpt() { release(); }

void CudaGpt::release() {
    input_.reset();
    mm_.reset();
    for (void* p : kept_) cudaFree(p);
    for (void* p : allocs_) cudaFree(p);
    kept_.clear();
    allocs_.clear();
}

float* CudaGpt::dev(size_t n, const std::string& what, std::vector<void*>& into) {
    return cuda::alloc_floats(n, what, into);
}

// Adds into dres_. In bf16 dout is bf16 (its matmul's backward rounded it, as autocast does);
// rounded_next: dres_ also rounded into the gradient scratch for the projection's backward next.
void CudaGpt::layernorm_bwd(float* dw, float* db, const float* dout, const float* inp, size_t w, const float* mean,
                            const float* rstd, bool rounded_next, long BT, bool adds) {
    const int C = cfg_.n_embd;
    const float* P = params_;
    const bool bf = mm_->is_bf16();
    cudaStream_t s = ctx_->stream();
    ev_->timed(OpKind::layernorm, s, [&] {
        if (bf && rounded_next)
            cuda::layernorm_backward_bf16(dres_, mm_->grad_scratch((size_t)BT * C), dw, db, as_bf16(dout), inp, P + w,
                                          mean, rstd, BT, C, *ctx_, s, adds);
        else if (bf)
            cuda::layernorm_backward(dres_, dw, db, as_bf16(dout), inp, P + w, mean, rstd, BT, C, *ctx_, s, adds);
        else cuda::layernorm_backward(dres_, dw, db, dout, inp, P + w, mean, rstd, BT, C, *ctx_, s, adds);
    });
}

// From dres_ (d residual3; in bf16 rounded in the gradient scratch) to d residual2 added into dres_.
void CudaGpt::mlp_backward(int l, int B, bool adds) {
    const int T = cfg_.block_size, C = cfg_.n_embd;
    const long BT = (long)B * T;
    const size_t BTC = (size_t)BT * C, sBT = (size_t)max_batch_ * T, sBTC = sBT * C, k = kept(l);
    const bool bf = mm_->is_bf16();
    const float* P = params_;
    float* G = grads_;
    cudaStream_t s = ctx_->stream();
    const LayerViews& v = lv_[l];
    const float* ln2 = slot(ln2_, k, sBTC, bf);
    const float* fch = slot(fch_, k, 4 * sBTC, bf);
    const float* fchg = slot(fch_gelu_, k, 4 * sBTC, bf);
    bf16* dres16 = bf ? mm_->grad_scratch(BTC) : nullptr;
    // bf16: fcproj's and GELU's backward as one op; dfc16 has its own buffer since dres16 is still
    // being read. Why: docs/GPU.md, "Note [CudaGpt scratch]".
    float* dfc = dbig_;
    bf16* dfc16 = dfc16_;
    if (bf) {
        ev_->timed(OpKind::matmul, s, [&] {
            mm_->backward_rounded_gelu(dfc16, G + v.fcprojw, G + v.fcprojb, dres16, as_bf16(fchg), as_bf16(fch),
                                       v.fcprojw, (int)BT, 4 * C, C, dfc, *ctx_, s, adds);
        });
    } else {
        ev_->timed(OpKind::matmul, s, [&] {
            mm_->backward(dfc, G + v.fcprojw, G + v.fcprojb, dres_, fchg, P, v.fcprojw, (int)BT, 4 * C, C, *ctx_, s,
                          adds);
        });
        ev_->timed(OpKind::activation, s, [&] { cuda::gelu_backward(dfc, fch, dfc, 4 * (long)BTC, s); });
    }
    float* dln = dsmall_;
    ev_->timed(OpKind::matmul, s, [&] {
        if (bf)
            mm_->backward_rounded_out16(as_bf16(dln), G + v.fcw, G + v.fcb, dfc16, as_bf16(ln2), v.fcw, (int)BT, C,
                                        4 * C, *ctx_, s, 0, adds);
        else mm_->backward(dln, G + v.fcw, G + v.fcb, dfc, ln2, P, v.fcw, (int)BT, C, 4 * C, *ctx_, s, adds);
    });
    layernorm_bwd(G + v.ln2w, G + v.ln2b, dln, residual2_ + k * sBTC, v.ln2w, ln2_mean_ + k * sBT,
                  ln2_rstd_ + k * sBT, true, BT, adds);
}

// From dres_ (d residual2) to d residual (the block's input) added into dres_.
void CudaGpt::attention_bwd(int l, int B, const float* residual, bool adds) {
    const int T = cfg_.block_size, C = cfg_.n_embd, NH = cfg_.n_head;
    const long BT = (long)B * T;
    const size_t BTC = (size_t)BT * C, sBT = (size_t)max_batch_ * T, sBTC = sBT * C;
    const size_t sATT = (size_t)max_batch_ * NH * T * T, sSTAT = (size_t)max_batch_ * NH * T;
    const size_t k = kept(l), a = kept_att(l);
    const bool bf = mm_->is_bf16(), flash16 = bf && cfg_.flash_attention;
    const float* P = params_;
    float* G = grads_;
    cudaStream_t s = ctx_->stream();
    const LayerViews& v = lv_[l];
    const float* ln1 = slot(ln1_, k, sBTC, bf);
    const float* qkv = slot(qkv_, k, 3 * sBTC, flash16);
    const float* atty = flash16 ? nullptr : atty_ + k * sBTC;  // under flash16 only atty16_ is kept
    bf16* atty16 = bf ? atty16_ + k * sBTC : nullptr;
    bf16* dres16 = bf ? mm_->grad_scratch(BTC) : nullptr;
    // datty: rounded under flash16, as flash attention's backward takes it; else fp32.
    ev_->timed(OpKind::matmul, s, [&] {
        if (flash16)
            mm_->backward_rounded_out16(as_bf16(datty_), G + v.attprojw, G + v.attprojb, dres16, atty16, v.attprojw,
                                        (int)BT, C, C, *ctx_, s, 0, adds);
        else if (bf)
            mm_->backward_rounded(datty_, G + v.attprojw, G + v.attprojb, dres16, atty16, v.attprojw, (int)BT, C, C,
                                  *ctx_, s, 0, adds);
        else
            mm_->backward(datty_, G + v.attprojw, G + v.attprojb, dres_, atty, P, v.attprojw, (int)BT, C, C, *ctx_, s,
                          adds);
    });
    // Before attention's backward reads the shared slot.
    if (cfg_.recompute == Recompute::attention) recompute_layer(l, residual, B);
    // dqkv: under flash16 rounded into the gradient scratch; else into dbig_ (dfc is done with).
    bf16* dqkv16 = flash16 ? mm_->grad_scratch(3 * BTC) : nullptr;
    float* dqkv = dbig_;
    ev_->timed(OpKind::attention, s, [&] {
        if (flash16)
            cuda::flash_attention_backward_bf16(dqkv16, delta_, as_bf16(datty_), as_bf16(qkv), atty16,
                                                lse_ + a * sSTAT, B, T, C, NH, s);
        else if (cfg_.flash_attention)
            cuda::flash_attention_backward(dqkv, delta_, datty_, qkv, atty, lse_ + a * sSTAT, B, T, C, NH, s);
        else
            cuda::attention_backward(dqkv, datt_, datty_, qkv, att_ + a * sATT, B, T, C, NH, bf, *ctx_, s);
    });
    // bf16: matmul attention's dqkv rounded into the gradient scratch, free again once the
    // projection's backward took dres16.
    float* dln = dsmall_;
    ev_->timed(OpKind::matmul, s, [&] {
        if (bf) {
            bf16* g = flash16 ? dqkv16 : mm_->grad_scratch(3 * BTC);
            if (!flash16) cuda::to_bf16(g, dqkv, 3 * BTC, s);
            mm_->backward_rounded_out16(as_bf16(dln), G + v.qkvw, G + v.qkvb, g, as_bf16(ln1), v.qkvw, (int)BT, C,
                                        3 * C, *ctx_, s, 0, adds);
        } else
            mm_->backward(dln, G + v.qkvw, G + v.qkvb, dqkv, ln1, P, v.qkvw, (int)BT, C, 3 * C, *ctx_, s, adds);
    });
    // Layer 0's dres goes to the encoder's backward, in fp32: not rounded.
    layernorm_bwd(G + v.ln1w, G + v.ln1b, dln, residual, v.ln1w, ln1_mean_ + k * sBT, ln1_rstd_ + k * sBT, l > 0,
                  BT, adds);
}

void CudaGpt::backward(float* grads, const float*, const ModelBatch& in, float scale, GradHook* hook) {
    const int B = in.B, T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, V = cfg_.vocab_size;
    if (B != last_B_) throw std::logic_error("CudaGpt::backward without the matching forward");
    const bool adds = backward_adds();  // a step's later micro-batch: add
    if (B == 0) {
        if (resident_ && !adds)
            CUDA_CHECK(cudaMemsetAsync(grads_, 0, host_.num_params() * sizeof(float), ctx_->stream()));
        if (hook) hook->grads_ready_from(0);
        return;
    }
    const long BT = (long)B * T;
    const size_t BTC = (size_t)BT * C, sBTC = (size_t)max_batch_ * T * C;
    const float* P = params_;
    float* G = grads_;
    const bool bf = mm_->is_bf16();
    cudaStream_t s = ctx_->stream();
    // Each gradient's first writer writes it (no zeroing pass; docs/GPU.md, "What exists"), but
    // wpe's, which only the encoder adds to. wte's first writer is the classifier's backward.
    if (!adds)
        ev_->timed(OpKind::other, s,
                   [&] { CUDA_CHECK(cudaMemsetAsync(G + wpe_, 0, (size_t)T * C * sizeof(float), s)); });
    // dlogits: fp32 in place over the logits (each element reads its own first); bf16 rounded into
    // the gradient scratch.
    float* dlogits = logits_;
    const int Vs = logits_stride(precision_);  // dlogits16's rows as the logits'
    bf16* dlogits16 = bf ? mm_->grad_scratch((size_t)BT * Vs) : nullptr;
    ev_->timed(OpKind::crossentropy, s, [&] {
        if (bf)
            cuda::softmax_crossentropy_backward_bf16(dlogits16, as_bf16(logits_), ce_stats_, targets_, scale, (int)BT,
                                                     V, Vs, s);
        else cuda::softmax_crossentropy_backward(dlogits, logits_, ce_stats_, targets_, scale, (int)BT, V, s);
    });
    float* dlnf = dsmall_;
    ev_->timed(OpKind::matmul, s, [&] {
        if (bf)
            mm_->backward_rounded_out16(as_bf16(dlnf), G + wte_, nullptr, dlogits16, as_bf16(lnf_), wte_, (int)BT, C,
                                        V, *ctx_, s, Vs, adds);
        else mm_->backward(dlnf, G + wte_, nullptr, dlogits, lnf_, P, wte_, (int)BT, C, V, *ctx_, s, adds);
    });
    ev_->timed(OpKind::other, s, [&] { CUDA_CHECK(cudaMemsetAsync(dres_, 0, BTC * sizeof(float), s)); });
    const float* last = L > 0 ? residual3_ + (L - 1) * sBTC : encoded_;
    layernorm_bwd(G + lnfw_, G + lnfb_, dlnf, last, lnfw_, lnf_mean_, lnf_rstd_, L > 0, BT, adds);
    // Resident: the hook hears of each layer as its work is queued, so sums overlap backward.
    if (resident_ && hook) hook->grads_ready_from(lnfw_);
    for (int l = L - 1; l >= 0; --l) {
        const float* residual = l == 0 ? encoded_ : residual3_ + (l - 1) * sBTC;
        // Here dbig_ and scratch_ are free, and the block's forward touches neither dres_ nor the
        // gradient scratch (Note [CudaGpt scratch]).
        if (cfg_.recompute == Recompute::block) recompute_layer(l, residual, B);
        mlp_backward(l, B, adds);
        attention_bwd(l, B, residual, adds);
        if (resident_ && hook) hook->grads_ready_from(lv_[l].ln1w);
    }
    ev_->timed(OpKind::encoder, s,
               [&] { cuda::encoder_backward(G + wte_, G + wpe_, dres_, tokens_, T + 1, B, T, C, *ctx_, s); });
    if (resident_) {  // the gradients stay on the device, queued on the stream
        if (hook) hook->grads_ready_from(0);
        return;
    }
    ev_->timed(OpKind::copy, s, [&] { host_grads_->add_to(grads, grads_, host_.num_params(), s); });
    if (hook) hook->grads_ready_from(0);  // every layer's gradients at once
}

} // namespace dptrain
