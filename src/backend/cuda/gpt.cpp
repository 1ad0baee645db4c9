// CudaGpt: the Gpt's forward and backward (src/model/gpt.cpp) with each CPU op replaced by its CUDA
// twin, in the same order on one stream, so results match the CPU within the ops' tolerances.
#include "dptrain/backend/cuda/gpt.h"

#include "check.h"
#include "operands.h"
#include "dptrain/core/error.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

CudaGpt::CudaGpt(const GptConfig& cfg, int max_batch, int device, Precision precision)
    : host_(cfg, 0), cfg_(cfg), max_batch_(max_batch), ctx_(std::make_unique<cuda::Context>(device)),
      mm_(std::make_unique<cuda::Matmuls>()), host_grads_(std::make_unique<cuda::HostGradients>()),
      ev_(std::make_unique<cuda::OpEvents>()) {
    if (max_batch <= 0) throw std::invalid_argument("CudaGpt: max_batch must be positive");
    const ParamLayout& lay = host_.layout();
    wte_ = lay.find("wte").offset;
    wpe_ = lay.find("wpe").offset;
    lnfw_ = lay.find("lnf.weight").offset;
    lnfb_ = lay.find("lnf.bias").offset;
    for (int l = 0; l < cfg.n_layer; ++l) {
        std::string p = "h" + std::to_string(l) + ".";
        LayerViews v;
        v.ln1w = lay.find(p + "ln1.weight").offset;
        v.ln1b = lay.find(p + "ln1.bias").offset;
        v.qkvw = lay.find(p + "attn.qkv.weight").offset;
        v.qkvb = lay.find(p + "attn.qkv.bias").offset;
        v.attprojw = lay.find(p + "attn.proj.weight").offset;
        v.attprojb = lay.find(p + "attn.proj.bias").offset;
        v.ln2w = lay.find(p + "ln2.weight").offset;
        v.ln2b = lay.find(p + "ln2.bias").offset;
        v.fcw = lay.find(p + "mlp.fc.weight").offset;
        v.fcb = lay.find(p + "mlp.fc.bias").offset;
        v.fcprojw = lay.find(p + "mlp.proj.weight").offset;
        v.fcprojb = lay.find(p + "mlp.proj.bias").offset;
        lv_.push_back(v);
    }
    const int T = cfg.block_size, C = cfg.n_embd, NH = cfg.n_head;
    const size_t P = lay.total, L = (size_t)cfg.n_layer;
    const size_t BT = (size_t)max_batch * T, BTC = BT * C;
    // Flash attention keeps each query's log-sum-exp instead of the T x T softmax.
    const bool flash = cfg.flash_attention;
    const size_t ATT = flash ? 0 : (size_t)max_batch * NH * T * T, STAT = flash ? (size_t)max_batch * NH * T : 0;
    // Every device buffer with its size in values (4 bytes each), counted first so that a GPU too
    // small gets one message with the whole need, then allocated; freed again if any fails. The
    // activations whose size depends on the precision come after, from set_precision.
    const std::vector<std::pair<void**, size_t>> plan = {
        {(void**)&params_, P}, {(void**)&grads_, P}, {(void**)&targets_, BT},
        {(void**)&encoded_, BTC}, {(void**)&ln1_mean_, L * BT},
        {(void**)&ln1_rstd_, L * BT},
        {(void**)&att_, L * ATT}, {(void**)&lse_, L * STAT}, {(void**)&residual2_, L * BTC},
        {(void**)&ln2_mean_, L * BT}, {(void**)&ln2_rstd_, L * BT},
        {(void**)&residual3_, L * BTC},
        {(void**)&lnf_mean_, BT}, {(void**)&lnf_rstd_, BT},
        {(void**)&ce_stats_, 2 * BT}, {(void**)&argmax_, BT},
        {(void**)&losses_, BT}, {(void**)&scratch_, BTC}, {(void**)&dres_, BTC}, {(void**)&dbig_, 4 * BTC},
        {(void**)&dsmall_, BTC}, {(void**)&datt_, ATT}, {(void**)&datty_, BTC},
        {(void**)&delta_, STAT}};
    const size_t token_rows = (size_t)max_batch * (T + 1);  // two slots of them (InputSlots)
    // The kept activations at the precision asked for, and in bf16 its operand room, attention's
    // output rounded and dfc's bf16 buffer (set_precision allocates those, checking again).
    const size_t grad = BT * std::max<size_t>(4 * C, (size_t)logits_stride(Precision::bf16));
    double need = 4.0 * 2.0 * (double)token_rows + kept_bytes(precision);
    if (precision == Precision::bf16)
        need += 2.0 * (double)(L * BTC + 4 * BTC) + (double)cuda::Matmuls::bytes(P, 0, grad);
    for (auto& [where, n] : plan) need += 4.0 * (double)n;
    if (flash) {
        int optin = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        const size_t want = cuda::flash_attention_shared_bytes(C, NH);
        if ((size_t)optin < want)
            throw UserError(strfmt("--attention flash at head size %d needs %zu bytes of shared memory per block, and "
                                   "GPU %d allows %d; use --attention matmul or a smaller head size (more --n-head)",
                                   C / NH, want, device, optin));
    }
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const double GiB = 1073741824.0;
    std::string what = strfmt("GPT on GPU %d needs %.2f GiB of device memory (%.2f GiB of it activations for "
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
    // The widest column sums of backward (fc's bias gradient, 4C; LayerNorm's two, C each) and the
    // embedding backward's sort, reserved now so that no step grows it.
    ctx_->reduction_scratch(std::max({cuda::column_sums_scratch((long)BT, 4 * C, 1),
                                      cuda::column_sums_scratch((long)BT, C, 2),
                                      cuda::encoder_backward_scratch((long)BT)}));
    host_targets_.resize(BT);
    host_losses_.resize(BT);
    host_argmax_.resize(BT);
    try {
        set_precision(precision);
    } catch (...) {
        release();  // no destructor runs for an object whose constructor threw
        throw;
    }
}

// The activations set_precision allocates: the inputs of matmuls (and GELU's), and the logits,
// which bf16 keeps rounded, at half the bytes; qkv only with flash attention (matmul attention
// reads it as fp32). Attention's output in fp32 only where it is read so: in bf16 with flash
// attention only its rounded copy (atty16_) is kept, which both the projection and flash
// attention's backward take.
std::vector<CudaGpt::Kept> CudaGpt::kept_plan(Precision p) {
    const size_t BT = (size_t)max_batch_ * cfg_.block_size, BTC = BT * cfg_.n_embd, L = (size_t)cfg_.n_layer;
    const bool half = p == Precision::bf16, flash16 = half && cfg_.flash_attention;
    return {{&atty_, flash16 ? 0 : L * BTC, false},
            {&ln1_, L * BTC, half},
            {&ln2_, L * BTC, half},
            {&lnf_, BTC, half},
            {&fch_, 4 * L * BTC, half},
            {&fch_gelu_, 4 * L * BTC, half},
            {&qkv_, 3 * L * BTC, half && cfg_.flash_attention},
            {&logits_, BT * logits_stride(p), half}};
}

double CudaGpt::kept_bytes(Precision p) {
    double bytes = 0.0;
    for (const Kept& k : kept_plan(p)) bytes += (k.half ? 2.0 : 4.0) * (double)k.n;
    return bytes;
}

void CudaGpt::set_precision(Precision p) {
    if (precision_set_ && p == precision_) return;  // allocated for it already
    const size_t BT = (size_t)max_batch_ * cfg_.block_size, C = (size_t)cfg_.n_embd, L = (size_t)cfg_.n_layer;
    const size_t grad = BT * std::max<size_t>(4 * C, (size_t)logits_stride(Precision::bf16));
    // Everything that depends on the precision is freed first, so the check below sees it free.
    precision_set_ = false;
    last_B_ = -1;  // a backward now would read new buffers: it refuses without a forward first
    mm_->set(Precision::fp32, 0, 0, 0);
    free16();
    for (void* q : kept_) cudaFree(q);
    kept_.clear();
    for (const Kept& k : kept_plan(p)) *k.where = nullptr;
    // The kept activations at this precision; bf16 adds the weights' and output gradients'
    // rounding scratch, attention's output rounded (forward rounds it once, backward takes it as it
    // is) and fc's output gradient in bf16 (GELU's backward writes it, fc's backward takes it). No
    // activation scratch: every other matmul input is written as bf16 by its producer.
    const bool bf = p == Precision::bf16;
    const double GiB = 1073741824.0, bf16_buffers = bf ? 2.0 * (double)(L * BT * C + 4 * BT * C) : 0.0;
    const double matmuls = bf ? (double)cuda::Matmuls::bytes(host_.num_params(), 0, grad) : 0.0;
    const double need = kept_bytes(p) + bf16_buffers + matmuls;
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const std::string what =
        strfmt("--precision %s on GPU %d needs %.2f GiB more device memory for the activations kept in it%s, and "
               "%.2f GiB are free",
               bf ? "bf16" : "fp32", ctx_->device(), need / GiB, bf ? " and the bf16 operands" : "",
               (double)free_bytes / GiB);
    if (need > (double)free_bytes)
        throw UserError(what + (bf ? "; lower --batch-size or use --precision fp32" : "; lower --batch-size"));
    for (const Kept& k : kept_plan(p)) *k.where = dev(k.half ? (k.n + 1) / 2 : k.n, what, kept_);
    if (bf) {
        for (auto [where, n] : {std::pair<bf16**, size_t>{&atty16_, L * BT * C}, {&dfc16_, 4 * BT * C}}) {
            cudaError_t rc = cudaMalloc(where, std::max<size_t>(n, 1) * sizeof(bf16));
            if (rc == cudaErrorMemoryAllocation) {
                cudaGetLastError();  // not sticky: the error is the user's to fix
                *where = nullptr;
                free16();
                throw UserError(what + ", but an allocation failed (fragmented, or shared with another process?); "
                                       "lower --batch-size or use --precision fp32");
            }
            CUDA_CHECK(rc);
        }
        mm_->set(p, host_.num_params(), 0, grad);
    }
    precision_ = p;
    precision_set_ = true;
}

// bf16: the activations kept rounded (LayerNorm's, GELU's, fc's, the logits and, under flash
// attention, qkv's outputs), in buffers of half the bytes (slot()).
static bf16* as_bf16(float* p) { return reinterpret_cast<bf16*>(p); }
static const bf16* as_bf16(const float* p) { return reinterpret_cast<const bf16*>(p); }

// The batch's token windows: B rows of T + 1 tokens, in.stride apart.
static cuda::InputSlots::Part token_part(const ModelBatch& in, int T) {
    cuda::InputSlots::Part p;
    p.src = in.tokens;
    p.pitch = (size_t)in.stride * sizeof(int);
    p.width = (size_t)(T + 1) * sizeof(int);
    return p;
}

void CudaGpt::stage(const ModelBatch& in) {
    if (in.B <= 0 || in.B > max_batch_ || in.stride < cfg_.block_size + 1) return;  // forward refuses it
    const cuda::InputSlots::Part rows = token_part(in, cfg_.block_size);
    input_->stage(&rows, in.B);
}

long CudaGpt::staged_batches() const { return input_->staged_hits(); }

void CudaGpt::unstage() { input_->drain(); }

void CudaGpt::set_op_times(OpTimes* t) { ev_->set(t); }

bf16* CudaGpt::rounded_params() { return mm_->weights(); }

void CudaGpt::set_rounded_current(bool current) { mm_->set_current(current); }

CudaGpt::~CudaGpt() { release(); }

void CudaGpt::free16() {
    for (bf16** p : {&atty16_, &dfc16_}) {
        if (*p) cudaFree(*p);
        *p = nullptr;
    }
}

void CudaGpt::release() {
    input_.reset();
    mm_.reset();
    free16();
    for (void* p : kept_) cudaFree(p);
    for (void* p : allocs_) cudaFree(p);
    for (void* p : dec_allocs_) cudaFree(p);
    kept_.clear();
    allocs_.clear();
    dec_allocs_.clear();
}

float* CudaGpt::dev(size_t n, const std::string& what, std::vector<void*>& into) {
    void* p = nullptr;
    cudaError_t rc = cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float));
    if (rc == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // clear it: the error is the user's to fix, not a broken device
        throw UserError(what + ", but an allocation of " + strfmt("%.2f GiB", 4.0 * (double)n / 1073741824.0) +
                        " failed (fragmented, or shared with another process?); lower --batch-size");
    }
    CUDA_CHECK(rc);
    into.push_back(p);
    return static_cast<float*>(p);
}

double CudaGpt::forward(const float* params, const ModelBatch& in, long* correct) {
    const int B = in.B, T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head, V = cfg_.vocab_size;
    if (B > max_batch_) throw std::invalid_argument("CudaGpt::forward: batch larger than max_batch");
    if (B == 0) {
        last_B_ = 0;
        return 0.0;
    }
    if (in.stride < T + 1) throw std::invalid_argument("CudaGpt::forward: token rows shorter than T + 1");
    // The same checks, in the same order, and messages as Gpt::forward (targets first, then
    // inputs), on the host before anything is queued.
    for (int pass = 0; pass < 2; ++pass)
        for (int b = 0; b < B; ++b)
            for (int t = 0; t < T; ++t) {
                int tok = in.tokens[(long)b * in.stride + t + (pass == 0 ? 1 : 0)];
                if (tok < 0 || tok >= V)
                    throw UserError(strfmt("token %d outside the model's vocabulary of %d", tok, V));
                if (pass == 0) host_targets_[(long)b * T + t] = tok;
            }
    const long BT = (long)B * T;
    const size_t BTC = (size_t)BT * C, sBT = (size_t)max_batch_ * T, sBTC = sBT * C;
    const size_t sATT = (size_t)max_batch_ * NH * T * T, sSTAT = (size_t)max_batch_ * NH * T;
    cudaStream_t s = ctx_->stream();
    if (!resident_) {
        ev_->timed(OpKind::copy, s, [&] {
            CUDA_CHECK(cudaMemcpyAsync(params_, params, host_.num_params() * sizeof(float), cudaMemcpyHostToDevice, s));
        });
        mm_->set_current(false);  // the host's parameters: rounded below, whatever an update wrote
    }
    // Rows of T + 1 tokens, at the device's stride: staged during the last step, or copied now;
    // the targets are the rows' last T tokens, packed on the device.
    const cuda::InputSlots::Part rows = token_part(in, T);
    ev_->timed(OpKind::copy, s, [&] { tokens_ = static_cast<int*>(input_->take(&rows, B, s)[0]); });
    ev_->timed(OpKind::copy, s, [&] {
        CUDA_CHECK(cudaMemcpy2DAsync(targets_, (size_t)T * sizeof(int), tokens_ + 1, (size_t)(T + 1) * sizeof(int),
                                     (size_t)T * sizeof(int), (size_t)B, cudaMemcpyDeviceToDevice, s));
    });
    const float* P = params_;
    if (mm_->is_bf16()) ev_->timed(OpKind::matmul, s, [&] { mm_->begin(P, s); });  // the weights' rounding
    ev_->timed(OpKind::encoder, s,
               [&] { cuda::encoder_forward(encoded_, tokens_, T + 1, P + wte_, P + wpe_, B, T, C, s); });
    // LayerNorm and GELU feed only the next matmul: in bf16 they write its input rounded, into their
    // own bf16 buffer (as_bf16), where that matmul and its backward take it.
    const bool bf = mm_->is_bf16(), flash16 = bf && cfg_.flash_attention;
    auto layernorm = [&](float* out, float* mean, float* rstd, const float* inp, size_t w, size_t b) {
        ev_->timed(OpKind::layernorm, s, [&] {
            if (bf) cuda::layernorm_forward_bf16(as_bf16(out), mean, rstd, inp, P + w, P + b, BT, C, s);
            else cuda::layernorm_forward(out, mean, rstd, inp, P + w, P + b, BT, C, s);
        });
    };
    auto matmul_of = [&](float* out, const float* inp, size_t w, const float* bias, int IC, int OC) {
        ev_->timed(OpKind::matmul, s, [&] {
            if (bf) mm_->forward_rounded(out, as_bf16(inp), w, bias, (int)BT, IC, OC, *ctx_, s);
            else mm_->forward(out, inp, P, w, bias, (int)BT, IC, OC, *ctx_, s);
        });
    };
    // bf16 only: the output kept rounded too (dbig_, free in forward, as the staging it may need
    // with a bias).
    auto matmul_out16 = [&](float* out, const float* inp, size_t w, const float* bias, int IC, int OC) {
        ev_->timed(OpKind::matmul, s, [&] {
            mm_->forward_rounded_out16(as_bf16(out), as_bf16(inp), w, bias, (int)BT, IC, OC, dbig_, *ctx_, s);
        });
    };
    // Each residual add runs with the LayerNorm after it (ln2, the next block's ln1, the final one),
    // as on the CPU: the LayerNorm's first pass takes the sums as they are computed.
    auto residual_layernorm = [&](float* res, float* out, float* mean, float* rstd, const float* a, const float* b,
                                  size_t w, size_t bias) {
        ev_->timed(OpKind::layernorm, s, [&] {
            if (bf)
                cuda::residual_layernorm_forward_bf16(res, as_bf16(out), mean, rstd, a, b, P + w, P + bias, BT, C, s);
            else cuda::residual_layernorm_forward(res, out, mean, rstd, a, b, P + w, P + bias, BT, C, s);
        });
    };
    CUDA_REQUIRE(precision_set_);  // the kept activations are sized for mm_'s precision (set_precision)
    if (L > 0) layernorm(ln1_, ln1_mean_, ln1_rstd_, encoded_, lv_[0].ln1w, lv_[0].ln1b);
    else layernorm(lnf_, lnf_mean_, lnf_rstd_, encoded_, lnfw_, lnfb_);
    const float* residual = encoded_;
    for (int l = 0; l < L; ++l) {
        const LayerViews& v = lv_[l];
        float* ln1 = slot(ln1_, l, sBTC, bf);
        float* qkv = slot(qkv_, l, 3 * sBTC, flash16);  // bf16 only under flash (set_precision)
        float* atty = flash16 ? nullptr : atty_ + l * sBTC;  // under flash16 only atty16_ is kept
        float* res2 = residual2_ + l * sBTC;
        float* ln2 = slot(ln2_, l, sBTC, bf);
        float* fch = slot(fch_, l, 4 * sBTC, bf);
        float* fchg = slot(fch_gelu_, l, 4 * sBTC, bf);
        float* res3 = residual3_ + l * sBTC;
        // Flash attention rounds q, k and v to bf16 as it loads them: in bf16 the qkv matmul
        // writes them rounded (qkv's buffer is bf16 then), half the bytes for both to move.
        if (flash16) matmul_out16(qkv, ln1, v.qkvw, P + v.qkvb, C, 3 * C);
        else matmul_of(qkv, ln1, v.qkvw, P + v.qkvb, C, 3 * C);
        // Flash: bf16 operands, lse kept; else the T x T softmax kept, and with bf16 TF32 operands.
        ev_->timed(OpKind::attention, s, [&] {
            if (flash16)  // atty only rounded, as it is stored: the projection and both backwards take it
                cuda::flash_attention_forward_bf16(nullptr, atty16_ + l * sBTC, lse_ + l * sSTAT, as_bf16(qkv), B, T,
                                                   C, NH, s);
            else if (cfg_.flash_attention)
                cuda::flash_attention_forward(atty, lse_ + l * sSTAT, qkv, B, T, C, NH, s);
            else
                cuda::attention_forward(atty, att_ + l * sATT, qkv, B, T, C, NH, mm_->is_bf16(), *ctx_, s);
        });
        ev_->timed(OpKind::matmul, s, [&] {
            if (flash16)  // atty as flash attention rounded it
                mm_->forward_rounded(scratch_, atty16_ + l * sBTC, v.attprojw, P + v.attprojb, (int)BT, C, C, *ctx_, s);
            else  // bf16: atty rounded here, and kept for backward
                mm_->forward(scratch_, atty, P, v.attprojw, P + v.attprojb, (int)BT, C, C, *ctx_, s,
                             bf ? atty16_ + l * sBTC : nullptr);
        });
        residual_layernorm(res2, ln2, ln2_mean_ + l * sBT, ln2_rstd_ + l * sBT, residual, scratch_, v.ln2w, v.ln2b);
        // bf16: fc and GELU as one op (timed as matmul): GELU of fc's fp32 output, rounded for
        // fcproj, and that output kept rounded for GELU's backward, as the CPU computes them; one
        // GEMM writes both where cuBLASLt has the epilogue (else dbig_, free in forward, holds the
        // fp32 output on the way).
        if (bf) {
            ev_->timed(OpKind::matmul, s, [&] {
                mm_->forward_rounded_gelu(as_bf16(fch), as_bf16(fchg), as_bf16(ln2), v.fcw, P + v.fcb, (int)BT, C,
                                          4 * C, dbig_, *ctx_, s);
            });
        } else {
            matmul_of(fch, ln2, v.fcw, P + v.fcb, C, 4 * C);
            ev_->timed(OpKind::activation, s, [&] { cuda::gelu_forward(fchg, fch, 4 * (long)BTC, s); });
        }
        matmul_of(scratch_, fchg, v.fcprojw, P + v.fcprojb, 4 * C, C);
        if (l + 1 < L)
            residual_layernorm(res3, slot(ln1_, l + 1, sBTC, bf), ln1_mean_ + (l + 1) * sBT, ln1_rstd_ + (l + 1) * sBT,
                               res2, scratch_, lv_[l + 1].ln1w, lv_[l + 1].ln1b);
        else
            residual_layernorm(res3, lnf_, lnf_mean_, lnf_rstd_, res2, scratch_, lnfw_, lnfb_);
        residual = res3;
    }
    // bf16: the logits written rounded (as the CPU keeps them, and PyTorch's autocast), in rows of
    // logits_stride values, and the loss reads them so: half the bytes of the largest activation,
    // on each of its passes.
    const int Vs = logits_stride(precision_);
    if (bf)
        ev_->timed(OpKind::matmul, s, [&] {
            mm_->forward_rounded_out16(as_bf16(logits_), as_bf16(lnf_), wte_, nullptr, (int)BT, C, V, nullptr, *ctx_,
                                       s, Vs);
        });
    else matmul_of(logits_, lnf_, wte_, nullptr, C, V);
    ev_->timed(OpKind::crossentropy, s, [&] {
        int* arg = correct ? argmax_ : nullptr;
        if (bf)
            cuda::softmax_crossentropy_forward_bf16(losses_, ce_stats_, arg, as_bf16(logits_), targets_, (int)BT, V, Vs,
                                                    s);
        else cuda::softmax_crossentropy_forward(losses_, ce_stats_, arg, logits_, targets_, (int)BT, V, s);
    });
    ev_->timed(OpKind::copy, s, [&] {
        CUDA_CHECK(
            cudaMemcpyAsync(host_losses_.data(), losses_, (size_t)BT * sizeof(float), cudaMemcpyDeviceToHost, s));
        if (correct)  // each row's argmax (the first largest logit, as the CPU), 4 bytes a row
            CUDA_CHECK(cudaMemcpyAsync(host_argmax_.data(), argmax_, (size_t)BT * sizeof(int),
                                       cudaMemcpyDeviceToHost, s));
    });
    CUDA_CHECK(cudaStreamSynchronize(s));
    last_B_ = B;
    double sum = 0.0;
    for (long i = 0; i < BT; ++i) sum += host_losses_[i];
    if (correct)
        for (long i = 0; i < BT; ++i) *correct += host_argmax_[i] == host_targets_[i];
    return sum;
}

void CudaGpt::backward(float* grads, const float*, const ModelBatch& in, float scale, GradHook* hook) {
    const int B = in.B, T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head, V = cfg_.vocab_size;
    if (B != last_B_) throw std::logic_error("CudaGpt::backward without the matching forward");
    const bool adds = backward_adds();  // a later micro-batch of the step: add to the device's gradients
    if (B == 0) {
        if (resident_ && !adds)
            CUDA_CHECK(cudaMemsetAsync(grads_, 0, host_.num_params() * sizeof(float), ctx_->stream()));
        if (hook) hook->grads_ready_from(0);
        return;
    }
    const long BT = (long)B * T;
    const size_t BTC = (size_t)BT * C, sBT = (size_t)max_batch_ * T, sBTC = sBT * C;
    const size_t sATT = (size_t)max_batch_ * NH * T * T, sSTAT = (size_t)max_batch_ * NH * T;
    const size_t Pn = host_.num_params();
    const float* P = params_;
    float* G = grads_;
    // bf16: the matmul inputs as forward rounded and kept them (slot()'s bf16 buffers, atty16_).
    const bool bf = mm_->is_bf16(), flash16 = bf && cfg_.flash_attention;
    cudaStream_t s = ctx_->stream();
    // Every gradient's first writer writes it (accumulate `adds`, false but for a step's later
    // micro-batches: no zeroing pass over all of them, and the weight-gradient GEMMs do not read
    // them, 8 bytes a parameter less, 1 GB a step at 124M), except wpe's, which only the encoder's
    // backward adds to: zeroed here. wte's is written by the classifier's backward and added to by
    // the encoder's.
    if (!adds)
        ev_->timed(OpKind::other, s,
                   [&] { CUDA_CHECK(cudaMemsetAsync(G + wpe_, 0, (size_t)T * C * sizeof(float), s)); });
    // dlogits: in fp32 over the logits in place (each element reads its own logit first); in
    // bf16 written rounded, straight into the matmuls' gradient scratch (as are the LayerNorms'
    // below; GELU's goes to a buffer of its own).
    float* dlogits = logits_;
    const int Vs = logits_stride(precision_);  // dlogits16's rows as the logits'
    bf16* dlogits16 = bf ? mm_->grad_scratch((size_t)BT * Vs) : nullptr;
    ev_->timed(OpKind::crossentropy, s, [&] {
        if (bf)
            cuda::softmax_crossentropy_backward_bf16(dlogits16, as_bf16(logits_), ce_stats_, targets_, scale, (int)BT,
                                                     V, Vs, s);
        else cuda::softmax_crossentropy_backward(dlogits, logits_, ce_stats_, targets_, scale, (int)BT, V, s);
    });
    // In bf16 every LayerNorm backward takes its dout as bf16 (each is a matmul's input gradient,
    // written rounded by that matmul's backward into dsmall_), as PyTorch's autocast hands a bf16
    // linear's input gradient to the fp32 LayerNorm before it.
    float* dlnf = dsmall_;
    ev_->timed(OpKind::matmul, s, [&] {
        if (bf)
            mm_->backward_rounded_out16(as_bf16(dlnf), G + wte_, nullptr, dlogits16, as_bf16(lnf_), wte_, (int)BT, C,
                                        V, *ctx_, s, Vs, adds);
        else mm_->backward(dlnf, G + wte_, nullptr, dlogits, lnf_, P, wte_, (int)BT, C, V, *ctx_, s, adds);
    });
    float* dres = dres_;
    ev_->timed(OpKind::other, s, [&] { CUDA_CHECK(cudaMemsetAsync(dres, 0, BTC * sizeof(float), s)); });
    // bf16: each LayerNorm backward whose dres a projection's backward takes next also writes it
    // rounded, into the gradient scratch (free again by then), where that backward takes it.
    bf16* dres16 = bf ? mm_->grad_scratch(BTC) : nullptr;
    auto layernorm_backward = [&](float* dw, float* db, const float* dout, const float* inp, size_t w,
                                  const float* mean, const float* rstd, bool rounded_next) {
        ev_->timed(OpKind::layernorm, s, [&] {
            if (bf && rounded_next)
                cuda::layernorm_backward_bf16(dres, dres16, dw, db, as_bf16(dout), inp, P + w, mean, rstd, BT, C, *ctx_,
                                              s, adds);
            else if (bf)
                cuda::layernorm_backward(dres, dw, db, as_bf16(dout), inp, P + w, mean, rstd, BT, C, *ctx_, s, adds);
            else cuda::layernorm_backward(dres, dw, db, dout, inp, P + w, mean, rstd, BT, C, *ctx_, s, adds);
        });
    };
    const float* last = L > 0 ? residual3_ + (L - 1) * sBTC : encoded_;
    layernorm_backward(G + lnfw_, G + lnfb_, dlnf, last, lnfw_, lnf_mean_, lnf_rstd_, L > 0);
    // Resident: the hook hears of each finished layer as its work is queued (as Gpt::backward
    // tells it), so gradient sums can start on the GPU while backward goes on.
    if (resident_ && hook) hook->grads_ready_from(lnfw_);
    for (int l = L - 1; l >= 0; --l) {
        const LayerViews& v = lv_[l];
        const float* residual = l == 0 ? encoded_ : residual3_ + (l - 1) * sBTC;
        const float* ln1 = slot(ln1_, l, sBTC, bf);
        const float* qkv = slot(qkv_, l, 3 * sBTC, flash16);
        const float* atty = flash16 ? nullptr : atty_ + l * sBTC;  // under flash16 only atty16_ is kept
        const float* res2 = residual2_ + l * sBTC;
        const float* ln2 = slot(ln2_, l, sBTC, bf);
        const float* fch = slot(fch_, l, 4 * sBTC, bf);
        const float* fchg = slot(fch_gelu_, l, 4 * sBTC, bf);
        // bf16: fcproj's backward and GELU's as one op (timed as matmul), dfc written rounded into
        // its own buffer (dres16 is still being read); one GEMM does both where cuBLASLt has the
        // epilogue, else dinp goes through dbig_ in fp32 first, as the CPU computes it.
        float* dfc = dbig_;
        bf16* dfc16 = dfc16_;
        if (bf) {
            ev_->timed(OpKind::matmul, s, [&] {
                mm_->backward_rounded_gelu(dfc16, G + v.fcprojw, G + v.fcprojb, dres16, as_bf16(fchg), as_bf16(fch),
                                           v.fcprojw, (int)BT, 4 * C, C, dfc, *ctx_, s, adds);
            });
        } else {
            ev_->timed(OpKind::matmul, s, [&] {
                mm_->backward(dfc, G + v.fcprojw, G + v.fcprojb, dres, fchg, P, v.fcprojw, (int)BT, 4 * C, C, *ctx_, s,
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
        layernorm_backward(G + v.ln2w, G + v.ln2b, dln, res2, v.ln2w, ln2_mean_ + l * sBT, ln2_rstd_ + l * sBT, true);
        // datty: under flash16 written rounded (flash attention's backward takes it as bf16), else
        // fp32 (matmul attention's backward takes it so).
        ev_->timed(OpKind::matmul, s, [&] {
            if (flash16)
                mm_->backward_rounded_out16(as_bf16(datty_), G + v.attprojw, G + v.attprojb, dres16, atty16_ + l * sBTC,
                                            v.attprojw, (int)BT, C, C, *ctx_, s, 0, adds);
            else if (bf)
                mm_->backward_rounded(datty_, G + v.attprojw, G + v.attprojb, dres16, atty16_ + l * sBTC, v.attprojw,
                                      (int)BT, C, C, *ctx_, s, 0, adds);
            else
                mm_->backward(datty_, G + v.attprojw, G + v.attprojb, dres, atty, P, v.attprojw, (int)BT, C, C, *ctx_,
                              s, adds);
        });
        // dqkv: with flash attention in bf16 (the trainer allows no other) written rounded, straight
        // into the gradient scratch; otherwise into dbig_, as the CPU does (dfc is done with).
        bf16* dqkv16 = flash16 ? mm_->grad_scratch(3 * BTC) : nullptr;
        float* dqkv = dbig_;
        ev_->timed(OpKind::attention, s, [&] {
            if (flash16)  // from q, k, v and the output as forward rounded them, and datty rounded
                cuda::flash_attention_backward_bf16(dqkv16, delta_, as_bf16(datty_), as_bf16(qkv), atty16_ + l * sBTC,
                                                    lse_ + l * sSTAT, B, T, C, NH, s);
            else if (cfg_.flash_attention)
                cuda::flash_attention_backward(dqkv, delta_, datty_, qkv, atty, lse_ + l * sSTAT, B, T, C, NH, s);
            else
                cuda::attention_backward(dqkv, datt_, datty_, qkv, att_ + l * sATT, B, T, C, NH, mm_->is_bf16(),
                                         *ctx_, s);
        });
        // bf16: dln written rounded, for LayerNorm's backward; matmul attention's dqkv (fp32) rounded
        // into the gradient scratch first (free again: the projection's backward took dres16).
        ev_->timed(OpKind::matmul, s, [&] {
            if (bf) {
                bf16* g = flash16 ? dqkv16 : mm_->grad_scratch(3 * BTC);
                if (!flash16) cuda::to_bf16(g, dqkv, 3 * BTC, s);
                mm_->backward_rounded_out16(as_bf16(dln), G + v.qkvw, G + v.qkvb, g, as_bf16(ln1), v.qkvw, (int)BT, C,
                                            3 * C, *ctx_, s, 0, adds);
            } else
                mm_->backward(dln, G + v.qkvw, G + v.qkvb, dqkv, ln1, P, v.qkvw, (int)BT, C, 3 * C, *ctx_, s, adds);
        });
        // The first layer's dres goes to the encoder's backward, in fp32.
        layernorm_backward(G + v.ln1w, G + v.ln1b, dln, residual, v.ln1w, ln1_mean_ + l * sBT, ln1_rstd_ + l * sBT,
                           l > 0);
        if (resident_ && hook) hook->grads_ready_from(v.ln1w);
    }
    ev_->timed(OpKind::encoder, s,
               [&] { cuda::encoder_backward(G + wte_, G + wpe_, dres, tokens_, T + 1, B, T, C, *ctx_, s); });
    if (resident_) {  // the gradients stay on the device, queued on the stream
        if (hook) hook->grads_ready_from(0);
        return;
    }
    ev_->timed(OpKind::copy, s, [&] { host_grads_->add_to(grads, grads_, Pn, s); });
    if (hook) hook->grads_ready_from(0);  // every layer's gradients at once
}

} // namespace dptrain
