// CudaLlama's device buffers (llama_buffers' list, fp32), its bf16 operands and its backward: the
// CPU Llama's ops as CUDA twins, in its order on one stream. Not for: forward (llama_forward.cpp).
#include "dptrain/backend/cuda/llama.h"

#include "check.h"
#include "operands.h"
#include "dptrain/core/error.h"
#include "dptrain/model/gpt_buffers.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

static constexpr double kGiB = 1073741824.0;

CudaLlama::CudaLlama(const GptConfig& cfg, int max_batch, int device, Precision precision)
    : host_(cfg, 0), cfg_(host_.config()), max_batch_(max_batch), ctx_(std::make_unique<cuda::Context>(device)),
      mm_(std::make_unique<cuda::Matmuls>()), host_grads_(std::make_unique<cuda::HostGradients>()),
      readback_(std::make_unique<cuda::LossReadback>()), ev_(std::make_unique<cuda::OpEvents>()) {
    if (max_batch < 1) throw std::invalid_argument("CudaLlama: max_batch must be positive");
    lv_ = host_.layer_views();
    wte_ = host_.wte();
    lnfw_ = host_.lnf();
    head_ = host_.head();
    const int T = cfg_.block_size, C = cfg_.n_embd, NH = cfg_.n_head;
    hs_ = C / NH;
    qkv_ = (NH + 2 * cfg_.n_kv_head) * hs_;
    const size_t P = host_.num_params(), BT = (size_t)max_batch * T;
    if (cfg_.flash_attention) cuda::require_flash_fits(C, NH, device);
    // Counted first, so a GPU too small gets one message with the whole need.
    std::vector<std::pair<void**, size_t>> plan = {{(void**)&params_, P}, {(void**)&grads_, P}};
    const std::vector<GptBuffer> buffers = llama_buffers(cfg_, max_batch);
    for (const GptBuffer& b : buffers) plan.push_back({field(b.name), b.count});  // 4 bytes a value, ints too
    activation_bytes_ = buffer_bytes(buffers);
    size_t act = 0, grad = 0;
    llama_operand_sizes(cfg_, max_batch, &act, &grad);
    const size_t token_rows = (size_t)max_batch * (T + 1);  // two slots of them (InputSlots)
    double need = 8.0 * (double)token_rows + (double)activation_bytes_ + 8.0 * (double)P;
    if (precision == Precision::bf16) need += (double)cuda::Matmuls::bytes(P, act, grad);
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const std::string what = strfmt("Llama on GPU %d needs %.2f GiB of device memory (%.2f GiB of it activations for "
                                    "--batch-size %d x --block-size %d), and %.2f GiB of %.2f GiB are free",
                                    device, need / kGiB, (double)activation_bytes_ / kGiB, max_batch, T,
                                    (double)free_bytes / kGiB, (double)total_bytes / kGiB);
    if (need > (double)free_bytes) throw UserError(what + "; lower --batch-size (or the model size)");
    try {
        for (auto& [where, n] : plan) *where = cuda::alloc_floats(n, what, allocs_);
        const size_t row_bytes = (size_t)(T + 1) * sizeof(int);
        input_ = std::make_unique<cuda::InputSlots>(&row_bytes, 1, max_batch);
        // The rotation's angles, once: the CPU's table (fp32 angles, as Hugging Face computes them).
        std::vector<float> cos((size_t)T * hs_ / 2), sin(cos.size());
        llama_rope_table(cfg_, cos.data(), sin.data());
        cudaStream_t s = ctx_->stream();  // the model's stream does not wait for the legacy default one
        CUDA_CHECK(cudaMemcpyAsync(rope_cos_, cos.data(), cos.size() * sizeof(float), cudaMemcpyHostToDevice, s));
        CUDA_CHECK(cudaMemcpyAsync(rope_sin_, sin.data(), sin.size() * sizeof(float), cudaMemcpyHostToDevice, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        // The norms' weight sums and the embedding's sort, reserved now: growing it later waits for the device.
        ctx_->reduction_scratch(
            std::max(cuda::column_sums_scratch((long)BT, C, 1), cuda::encoder_backward_scratch((long)BT)));
        host_targets_.resize(BT);
        readback_->reserve(BT);
        set_precision(precision);
    } catch (...) {
        release();  // no destructor runs for an object whose constructor threw
        throw;
    }
}

void** CudaLlama::field(const char* name) {
    const std::pair<const char*, void**> fields[] = {
        {"targets", (void**)&targets_}, {"argmax", (void**)&argmax_}, {"rope_cos", (void**)&rope_cos_},
        {"rope_sin", (void**)&rope_sin_}, {"encoded", (void**)&encoded_}, {"ln1", (void**)&ln1_},
        {"ln1_rstd", (void**)&ln1_rstd_}, {"qkv3", (void**)&qkv3_}, {"atty", (void**)&atty_}, {"att", (void**)&att_},
        {"lse", (void**)&lse_}, {"residual2", (void**)&residual2_}, {"ln2", (void**)&ln2_},
        {"ln2_rstd", (void**)&ln2_rstd_}, {"gu", (void**)&gu_}, {"swi", (void**)&swi_},
        {"residual3", (void**)&residual3_}, {"lnf", (void**)&lnf_}, {"lnf_rstd", (void**)&lnf_rstd_},
        {"logits", (void**)&logits_}, {"ce_stats", (void**)&ce_stats_}, {"losses", (void**)&losses_},
        {"scratch", (void**)&scratch_}, {"dres", (void**)&dres_}, {"dbig", (void**)&dbig_},
        {"dsmall", (void**)&dsmall_}, {"datt", (void**)&datt_}, {"datty", (void**)&datty_}, {"delta", (void**)&delta_}};
    for (const auto& [n, f] : fields)
        if (std::strcmp(n, name) == 0) return f;
    throw std::logic_error(std::string("CudaLlama: no field for buffer ") + name);
}

void CudaLlama::set_precision(Precision p) {
    if (precision_set_ && p == precision_) return;
    precision_set_ = false;
    last_B_ = -1;  // a backward now would take other operands than its forward: it refuses
    mm_->set(Precision::fp32, 0, 0, 0);  // freed first, so the check below counts that memory free
    if (p == Precision::bf16) {
        size_t act = 0, grad = 0;
        llama_operand_sizes(cfg_, max_batch_, &act, &grad);
        const size_t P = host_.num_params();
        const double need = (double)cuda::Matmuls::bytes(P, act, grad);
        size_t free_bytes = 0, total_bytes = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        if (need > (double)free_bytes)
            throw UserError(strfmt("--precision bf16 on GPU %d needs %.2f GiB more device memory for the bf16 "
                                   "operands, and %.2f GiB are free; lower --batch-size or use --precision fp32",
                                   ctx_->device(), need / kGiB, (double)free_bytes / kGiB));
        mm_->set(p, P, act, grad);
    }
    precision_ = p;
    precision_set_ = true;
}

size_t CudaLlama::operand_bytes() const {
    if (precision_ != Precision::bf16) return 0;
    size_t act = 0, grad = 0;
    llama_operand_sizes(cfg_, max_batch_, &act, &grad);
    return cuda::Matmuls::bytes(host_.num_params(), act, grad);
}

long CudaLlama::staged_batches() const { return input_->staged_hits(); }
void CudaLlama::unstage() { input_->drain(); }
void CudaLlama::set_op_times(OpTimes* t) { ev_->set(t); }
void CudaLlama::finish() { CUDA_CHECK(cudaStreamSynchronize(ctx_->stream())); }
bf16* CudaLlama::rounded_params() { return mm_->weights(); }
void CudaLlama::set_rounded_current(bool current) { mm_->set_current(current); }

CudaLlama::~CudaLlama() { release(); }

void CudaLlama::release() {
    input_.reset();
    mm_.reset();
    for (void* p : allocs_) cudaFree(p);
    allocs_.clear();
}

void CudaLlama::matmul_bwd(float* dinp, size_t w, const float* dout, const float* inp, int IC, int OC, long BT,
                           bool dinp16, bool adds) {
    cudaStream_t s = ctx_->stream();
    ev_->timed(OpKind::matmul, s, [&] {
        mm_->backward(dinp, grads_ + w, nullptr, dout, inp, params_, w, (int)BT, IC, OC, *ctx_, s, adds);
        if (dinp16 && mm_->is_bf16()) cuda::round_bf16(dinp, dinp, (size_t)BT * IC, s);
    });
}

// dres_ holds d residual3 of layer l on entry, d residual3 of l - 1 (its input) on return.
void CudaLlama::block_backward(int l, const float* residual, int B, bool adds) {
    const int T = cfg_.block_size, C = cfg_.n_embd, NH = cfg_.n_head, F = cfg_.ffn_hidden;
    const long BT = (long)B * T;
    const size_t sBT = (size_t)max_batch_ * T, sBTC = sBT * C;
    const size_t sATT = (size_t)max_batch_ * NH * T * T, sSTAT = (size_t)max_batch_ * NH * T;
    const Llama::LayerViews& v = lv_[l];
    const float* P = params_;
    float* G = grads_;
    cudaStream_t s = ctx_->stream();
    if (cfg_.recompute == Recompute::block) recompute_layer(l, residual, B);
    const size_t k = kept(l), a = kept_att(l);
    const float* gu = gu_ + k * 2 * F * sBT;
    float *dswi = dsmall_, *dgu = dbig_, *dln = dsmall_;
    matmul_bwd(dswi, v.fcprojw, dres_, swi_ + k * F * sBT, F, C, BT, false, adds);
    ev_->timed(OpKind::activation, s, [&] { cuda::swiglu_backward(dgu, gu, dswi, BT, F, s); });
    matmul_bwd(dln, v.gateupw, dgu, ln2_ + k * sBTC, C, 2 * F, BT, true, adds);
    ev_->timed(OpKind::layernorm, s, [&] {
        cuda::rmsnorm_backward(dres_, G + v.ln2w, dln, residual2_ + k * sBTC, P + v.ln2w, ln2_rstd_ + k * sBT, BT, C,
                               *ctx_, s, adds);
    });
    const float* atty = atty_ + k * sBTC;
    matmul_bwd(datty_, v.attprojw, dres_, atty, C, C, BT, cfg_.flash_attention, adds);
    if (cfg_.recompute == Recompute::attention) recompute_layer(l, residual, B);
    const float* qkv3 = qkv3_ + k * 3 * sBTC;
    float* dqkv3 = dbig_;  // d gate/up is done with
    ev_->timed(OpKind::attention, s, [&] {
        if (cfg_.flash_attention)
            cuda::flash_attention_backward(dqkv3, delta_, datty_, qkv3, atty, lse_ + a * sSTAT, B, T, C, NH, s);
        else
            cuda::attention_backward(dqkv3, datt_, datty_, qkv3, att_ + a * sATT, B, T, C, NH, mm_->is_bf16(), *ctx_,
                                     s);
        cuda::rope_qkv_backward(scratch_, dqkv3, rope_cos_, rope_sin_, B, T, NH, cfg_.n_kv_head, hs_, s);
    });
    matmul_bwd(dln, v.qkvw, scratch_, ln1_ + k * sBTC, C, qkv_, BT, true, adds);
    ev_->timed(OpKind::layernorm, s, [&] {
        cuda::rmsnorm_backward(dres_, G + v.ln1w, dln, residual, P + v.ln1w, ln1_rstd_ + k * sBT, BT, C, *ctx_, s,
                               adds);
    });
}

void CudaLlama::backward(float* grads, const float*, const ModelBatch& in, float scale, GradHook* hook) {
    const int B = in.B, T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, V = cfg_.vocab_size;
    if (B != last_B_) throw std::logic_error("CudaLlama::backward without the matching forward");
    const bool adds = backward_adds();  // a step's later micro-batch: add
    cudaStream_t s = ctx_->stream();
    if (B == 0) {
        if (resident_ && !adds) CUDA_CHECK(cudaMemsetAsync(grads_, 0, host_.num_params() * sizeof(float), s));
        if (hook) hook->grads_ready_from(0);
        return;
    }
    const long BT = (long)B * T;
    const size_t sBTC = (size_t)max_batch_ * T * C;
    float* G = grads_;
    // Each gradient's first writer writes it (no zeroing pass), but an untied wte's: only the
    // encoder adds to it. Tied, the head's backward writes it first.
    if (!adds && !cfg_.tie_embeddings)
        ev_->timed(OpKind::other, s,
                   [&] { CUDA_CHECK(cudaMemsetAsync(G + wte_, 0, (size_t)V * C * sizeof(float), s)); });
    ev_->timed(OpKind::crossentropy, s, [&] {  // in place: each element reads its own logit first
        cuda::softmax_crossentropy_backward(logits_, logits_, ce_stats_, targets_, scale, (int)BT, V, s);
    });
    matmul_bwd(dsmall_, head_, logits_, lnf_, C, V, BT, true, adds);
    ev_->timed(OpKind::other, s, [&] { CUDA_CHECK(cudaMemsetAsync(dres_, 0, (size_t)BT * C * sizeof(float), s)); });
    ev_->timed(OpKind::layernorm, s, [&] {
        cuda::rmsnorm_backward(dres_, G + lnfw_, dsmall_, residual3_ + (L - 1) * sBTC, params_ + lnfw_, lnf_rstd_, BT,
                               C, *ctx_, s, adds);
    });
    // Resident: the hook hears of each layer as its work is queued, so sums overlap backward.
    if (resident_ && hook) hook->grads_ready_from(lnfw_);  // and lm_head's, after it
    for (int l = L - 1; l >= 0; --l) {
        const float* residual = l == 0 ? encoded_ : residual3_ + (l - 1) * sBTC;
        block_backward(l, residual, B, adds);
        if (resident_ && hook) hook->grads_ready_from(lv_[l].ln1w);
    }
    ev_->timed(OpKind::encoder, s,
               [&] { cuda::encoder_backward(G + wte_, nullptr, dres_, tokens_, T + 1, B, T, C, *ctx_, s); });
    if (resident_) {  // the gradients stay on the device, queued on the stream
        if (hook) hook->grads_ready_from(0);
        return;
    }
    ev_->timed(OpKind::copy, s, [&] { host_grads_->add_to(grads, grads_, host_.num_params(), s); });
    if (hook) hook->grads_ready_from(0);  // every layer's gradients at once
}

} // namespace dptrain
