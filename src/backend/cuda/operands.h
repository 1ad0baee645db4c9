// Private to src/cuda: what the GPU models (CudaMlp, CudaGpt) share around their ops.
// Matmuls: the models' matmuls in either precision. In bf16 (--precision bf16) the weights are
// rounded to bf16 once per forward (unless the optimizer's update wrote them so: set_current) and
// each matmul's activation and output gradient just before it, into device scratch allocated once;
// the GEMMs then take bf16 operands and sum in fp32 (matmul_forward_bf16 / matmul_backward_bf16). A
// model may keep a forward's rounded activations for its backward (forward's `keep`, then
// backward_rounded, in memory of its own), so backward rounds only the output gradients: the same
// bits, one pass less over each activation. The CPU models do the same with Bf16Operands (model.h).
// Not for: attention's internal products (TF32 in bf16, in attention.cu).
// HostGradients: the --gpu-state host gradients' way back. InputSlots: the batches' way in.
// OpEvents: --profile-ops on the GPU.
#pragma once

#include "check.h"
#include "dptrain/backend/cuda/ops.h"
#include "dptrain/model/model.h"

#include <memory>
#include <utility>
#include <vector>

namespace dptrain::cuda {

// A buffer of floats that holds bf16 values (an activation kept rounded, in half the bytes).
inline bf16* as_bf16(float* p) { return reinterpret_cast<bf16*>(p); }
inline const bf16* as_bf16(const float* p) { return reinterpret_cast<const bf16*>(p); }

class Matmuls {
  public:
    Matmuls() = default;
    ~Matmuls() { release(); }
    Matmuls(const Matmuls&) = delete;
    Matmuls& operator=(const Matmuls&) = delete;

    // Device bytes set() allocates for bf16.
    static size_t bytes(size_t params, size_t activation, size_t gradient) {
        return (params + activation + gradient) * sizeof(bf16);
    }
    // bf16: device scratch for every parameter, the widest activation and the widest output
    // gradient of one matmul (in values); fp32 frees it.
    void set(Precision p, size_t params, size_t activation, size_t gradient) {
        release();
        if (p == Precision::fp32) return;
        w_ = alloc(params);
        a_ = alloc(activation);
        g_ = alloc(gradient);
        a_n_ = activation;
        g_n_ = gradient;
        w_n_ = params;
    }
    bool is_bf16() const { return w_ != nullptr; }
    // At the start of each forward: the parameters the matmuls use from then until the backward,
    // rounded unless set_current(true) was called since the last begin.
    void begin(const float* params, cudaStream_t s) {
        if (is_bf16() && !current_) to_bf16(w_, params, w_n_, s);
        current_ = false;
    }
    // bf16 (else null): the rounded parameters, for an update that writes them with the parameters.
    bf16* weights() { return w_; }
    // true: weights() holds the rounding of the parameters as they are now (an update wrote both
    // since the last begin), so the next begin need not round them; false: it may not.
    void set_current(bool current) { current_ = current && is_bf16(); }
    // keep (bf16, or null): where the rounded input is written and stays, for the backward of the
    // same matmul to take as it is; null rounds it into scratch.
    void forward(float* out, const float* inp, const float* params, size_t w, const float* bias, int B, int C, int OC,
                 Context& ctx, cudaStream_t s, bf16* keep = nullptr) {
        if (!is_bf16()) return matmul_forward(out, inp, params + w, bias, B, C, OC, ctx, s);
        CUDA_REQUIRE(keep || (size_t)B * C <= a_n_);
        bf16* a = keep ? keep : a_;
        to_bf16(a, inp, (size_t)B * C, s);
        matmul_forward_bf16(out, a, w_ + w, bias, B, C, OC, ctx, s);
    }
    // bf16 only: the input already rounded (by an op that writes bf16 itself: layernorm_forward_bf16,
    // matmul_forward_bf16_gelu, flash_attention_forward_bf16).
    void forward_rounded(float* out, const bf16* inp, size_t w, const float* bias, int B, int C, int OC, Context& ctx,
                         cudaStream_t s) {
        CUDA_REQUIRE(is_bf16());
        matmul_forward_bf16(out, inp, w_ + w, bias, B, C, OC, ctx, s);
    }
    // bf16 only: forward_rounded with the output rounded to bf16 too (matmul_forward_bf16_out;
    // staging: out's size in floats, used only where cuBLASLt has no algorithm).
    // ld: out's row stride (matmul_forward_bf16_out's; 0: OC).
    void forward_rounded_out16(bf16* out, const bf16* inp, size_t w, const float* bias, int B, int C, int OC,
                               float* staging, Context& ctx, cudaStream_t s, int ld = 0) {
        CUDA_REQUIRE(is_bf16());
        matmul_forward_bf16_out(out, inp, w_ + w, bias, B, C, OC, staging, ctx, s, ld);
    }
    // bf16 only: forward_rounded into pre (bf16) with GELU after it into out (bf16):
    // matmul_forward_bf16_gelu (staging: out's size in floats, where cuBLASLt has no algorithm).
    void forward_rounded_gelu(bf16* pre, bf16* out, const bf16* inp, size_t w, const float* bias, int B, int C, int OC,
                              float* staging, Context& ctx, cudaStream_t s) {
        CUDA_REQUIRE(is_bf16());
        matmul_forward_bf16_gelu(pre, out, inp, w_ + w, bias, B, C, OC, staging, ctx, s);
    }
    // In bf16 dout and inp rounded into scratch first. accumulate false, here and below: dweight
    // and dbias written, not added to (matmul_backward's), for their first writer.
    void backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* params,
                  size_t w, int B, int C, int OC, Context& ctx, cudaStream_t s, bool accumulate = true) {
        if (!is_bf16())
            return matmul_backward(dinp, dweight, dbias, dout, inp, params + w, B, C, OC, ctx, s, accumulate);
        CUDA_REQUIRE((size_t)B * OC <= g_n_ && (size_t)B * C <= a_n_);
        to_bf16(g_, dout, (size_t)B * OC, s);
        to_bf16(a_, inp, (size_t)B * C, s);
        matmul_backward_bf16(dinp, dweight, dbias, g_, a_, w_ + w, B, C, OC, ctx, s, 0, accumulate);
    }

    // bf16 only: room for an output gradient of n values, for an op that writes it as bf16 itself
    // (softmax_crossentropy_backward_bf16, flash_attention_backward_bf16,
    // layernorm_backward_bf16's copy of dinp, or a model's own to_bf16) before backward_rounded or
    // backward_rounded_out16 takes it. One buffer, which
    // backward's own rounding of dout overwrites too: each value must be taken before the next
    // is written (one stream: queue order).
    bf16* grad_scratch(size_t n) {
        CUDA_REQUIRE(is_bf16() && n <= g_n_);
        return g_;
    }
    // bf16 only: backward with the output gradient and the input both already rounded (ld: dout's
    // row stride, matmul_backward_bf16's; 0: OC).
    void backward_rounded(float* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp, size_t w, int B,
                          int C, int OC, Context& ctx, cudaStream_t s, int ld = 0, bool accumulate = true) {
        CUDA_REQUIRE(is_bf16());
        matmul_backward_bf16(dinp, dweight, dbias, dout, inp, w_ + w, B, C, OC, ctx, s, ld, accumulate);
    }
    // bf16 only: backward_rounded with dinp rounded to bf16 as it is stored (matmul_backward_bf16_out),
    // for an op that reads it as bf16 (LayerNorm's backward, flash attention's).
    void backward_rounded_out16(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp, size_t w,
                                int B, int C, int OC, Context& ctx, cudaStream_t s, int ld = 0,
                                bool accumulate = true) {
        CUDA_REQUIRE(is_bf16());
        matmul_backward_bf16_out(dinp, dweight, dbias, dout, inp, w_ + w, B, C, OC, ctx, s, ld, accumulate);
    }
    // bf16 only: backward_rounded of the matmul after GELU, dinp taken through GELU's backward at pre
    // into dpre (bf16): matmul_backward_bf16_gelu (staging: dinp's size in floats).
    void backward_rounded_gelu(bf16* dpre, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                               const bf16* pre, size_t w, int B, int C, int OC, float* staging, Context& ctx,
                               cudaStream_t s, bool accumulate = true) {
        CUDA_REQUIRE(is_bf16());
        matmul_backward_bf16_gelu(dpre, dweight, dbias, dout, inp, w_ + w, pre, B, C, OC, staging, ctx, s, accumulate);
    }

  private:
    static bf16* alloc(size_t n) {
        void* p = nullptr;
        CUDA_CHECK(cudaMalloc(&p, (n ? n : 1) * sizeof(bf16)));
        return static_cast<bf16*>(p);
    }
    void release() {
        for (bf16* p : {w_, a_, g_})
            if (p) cudaFree(p);
        w_ = a_ = g_ = nullptr;
        current_ = false;
    }
    bf16 *w_ = nullptr, *a_ = nullptr, *g_ = nullptr;
    bool current_ = false;
    size_t w_n_ = 0, a_n_ = 0, g_n_ = 0;
};

// The --gpu-state host path's hand-off of the device's gradients: added onto the caller's host
// buffer (the trainer's contract: backward adds), through staging made at the first call and
// page-locked when the driver allows. Shared by CudaMlp and CudaGpt.
class HostGradients {
  public:
    // host[i] += device[i] for n values, once the work queued on `s` is done; returns after.
    void add_to(float* host, const float* device, size_t n, cudaStream_t s) {
        if (staging_.size() != n) {
            pin_.reset();
            staging_.assign(n, 0.0f);
            pin_ = std::make_unique<PinnedHost>(staging_.data(), n * sizeof(float));
        }
        CUDA_CHECK(cudaMemcpyAsync(staging_.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
#pragma omp parallel for schedule(static)
        for (long i = 0; i < (long)n; ++i) host[i] += staging_[i];
    }

  private:
    std::vector<float> staging_;
    std::unique_ptr<PinnedHost> pin_;  // released before staging_ (declared after it)
};

// The batches' way onto the device (Model::stage). Two device slots, each with room for max_rows
// rows of every part of a batch (the GPT: token rows; the MLP: features and labels). stage()
// copies the next step's batch into the slot the current batch does not use, on a copy stream of
// its own, and records an event; take() gives forward that slot and makes the compute stream wait
// for the event (no host wait). A batch nobody staged (the first step, evaluation, a batch the
// reader had not finished) is copied there and then, on the compute stream, into the current
// batch's slot, whose earlier uses are all queued before it on that stream; a staged batch stays
// staged across such forwards. A slot is written by the copy stream only after the compute stream
// has passed every use of its last batch: the event `released_` recorded when forward switched
// away from it.
class InputSlots {
  public:
    static constexpr int kMaxParts = 2;
    struct Part {  // host rows of `width` bytes, `pitch` bytes apart; packed on the device
        const void* src = nullptr;
        size_t pitch = 0, width = 0;
    };
    // widths: each part's row bytes; max_rows: the largest batch. (src/cuda/input_slots.cpp)
    InputSlots(const size_t* widths, int parts, int max_rows);
    ~InputSlots();
    InputSlots(const InputSlots&) = delete;
    InputSlots& operator=(const InputSlots&) = delete;

    // Starts copying `rows` rows of each part into the free slot. The host rows must stay as they
    // are until the forward that takes them (the reader's ring keeps a ready batch until then).
    void stage(const Part* parts, int rows);
    // The device copy of the batch (one pointer per part), ready for work queued on `compute`
    // after this call.
    void* const* take(const Part* parts, int rows, cudaStream_t compute);
    // Waits for a staged copy and forgets it: before the staged batch's host memory goes away.
    void drain();
    long staged_hits() const { return staged_hits_; }  // batches that came through stage()

  private:
    void copy(int s, const Part* parts, int rows, cudaStream_t stream);
    int parts_, max_rows_;
    size_t width_[kMaxParts] = {};
    void* dev_[2][kMaxParts] = {};
    cudaEvent_t copied_[2] = {}, released_[2] = {};
    cudaStream_t copy_ = nullptr;
    int cur_ = 0;      // the slot of the last forward's batch
    int staged_ = -1;  // the slot holding a staged batch not yet taken
    int staged_rows_ = 0;
    Part staged_parts_[kMaxParts];
    long staged_hits_ = 0;
};

// --profile-ops on a GPU: a pair of events recorded around each op on the model's stream while an
// OpTimes is set; stop() waits for the stream and adds each pair's elapsed time to it by kind.
// Events are made as the first profiled step needs them and kept for the model's life.
class OpEvents {
  public:
    OpEvents() = default;
    ~OpEvents() {
        for (auto& e : events_) {
            cudaEventDestroy(e.first);
            cudaEventDestroy(e.second);
        }
    }
    OpEvents(const OpEvents&) = delete;
    OpEvents& operator=(const OpEvents&) = delete;

    // Starts timing into t; null stops it (stop()).
    void set(OpTimes* t) {
        stop();
        times_ = t;
    }
    template <class Op>
    void timed(OpKind k, cudaStream_t s, Op&& op) {
        if (!times_) return op();
        if (used_ == events_.size()) {
            cudaEvent_t a = nullptr, b = nullptr;
            CUDA_CHECK(cudaEventCreate(&a));
            CUDA_CHECK(cudaEventCreate(&b));
            events_.emplace_back(a, b);
            kinds_.push_back(k);
        }
        CUDA_CHECK(cudaEventRecord(events_[used_].first, s));
        op();
        CUDA_CHECK(cudaEventRecord(events_[used_].second, s));
        kinds_[used_++] = k;
    }
    void stop() {
        if (!times_) return;
        for (size_t i = 0; i < used_; ++i) {
            CUDA_CHECK(cudaEventSynchronize(events_[i].second));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i].first, events_[i].second));
            times_->add(kinds_[i], ms / 1e3);
        }
        times_ = nullptr;
        used_ = 0;
    }

  private:
    OpTimes* times_ = nullptr;
    std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events_;
    std::vector<OpKind> kinds_;
    size_t used_ = 0;
};

} // namespace dptrain::cuda
